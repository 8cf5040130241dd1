import horovodlite.torch as hvd
import pytest
import torch
from horovodlite.common.exceptions import HorovodInternalError


def test_duplicate_name_in_flight_is_value_error(rank):
    t = torch.ones(8)
    hvd.barrier()
    if rank == 0:
        # the other ranks enqueue "dup.name" only after the next barrier, so
        # rank 0's first op is certainly still in flight here
        first = hvd.allreduce_async(t, name="dup.name")
        with pytest.raises(ValueError, match="dup.name"):
            hvd.allreduce_async(t, name="dup.name")
    hvd.barrier()
    if rank != 0:
        first = hvd.allreduce_async(t, name="dup.name")
    assert torch.allclose(hvd.synchronize(first), t)


def test_shape_mismatch_is_internal_error(rank):
    t = torch.ones(3 + rank)
    with pytest.raises(HorovodInternalError):
        hvd.allreduce(t, name="mismatch.shape")
    with pytest.raises(hvd.HorovodInternalError):
        hvd.allgather(torch.ones(2, 2 + rank), name="mismatch.allgather")
    # the runtime keeps working afterwards
    assert torch.allclose(hvd.allreduce(torch.ones(2), op=hvd.Max), torch.ones(2))


def test_dtype_and_op_mismatch_is_internal_error(rank):
    t = torch.ones(4, dtype=torch.float32 if rank % 2 == 0 else torch.float64)
    with pytest.raises(RuntimeError):
        hvd.allreduce(t, name="mismatch.dtype")
    with pytest.raises(HorovodInternalError):
        hvd.allreduce(torch.ones(4), name="mismatch.op", op=hvd.Sum if rank == 0 else hvd.Max)
    with pytest.raises(HorovodInternalError):
        hvd.broadcast(torch.ones(4), root_rank=0 if rank == 0 else 1, name="mismatch.root")


def test_bad_arguments_are_type_or_value_errors(size):
    with pytest.raises(TypeError):
        hvd.allreduce([1.0, 2.0])
    with pytest.raises(TypeError):
        hvd.allreduce_async("tensor")
    with pytest.raises(TypeError):
        hvd.allgather(None)
    with pytest.raises(TypeError):
        hvd.allreduce(torch.ones(2), name=5)
    with pytest.raises(TypeError):
        hvd.broadcast(torch.ones(2), root_rank="0")
    with pytest.raises(ValueError):
        hvd.broadcast(torch.ones(2), root_rank=size)
    with pytest.raises(ValueError):
        hvd.broadcast_(torch.ones(2), root_rank=-1)
    with pytest.raises(ValueError):
        hvd.alltoall(torch.ones(4), splits=[1] * (size + 1))
    with pytest.raises(ValueError):
        hvd.alltoall(torch.ones(4), splits=[5] + [0] * (size - 1))
    with pytest.raises(ValueError):
        hvd.alltoall(torch.ones(4), splits=[-1, 5] + [0] * (size - 2))
    with pytest.raises(ValueError):
        hvd.alltoall(torch.ones(4), splits=[1.5] * size)
    with pytest.raises(ValueError):
        hvd.alltoall(torch.ones(size * 2 + 1))
    with pytest.raises(ValueError):
        hvd.allreduce(torch.ones(2), op=42)
    with pytest.raises(ValueError):
        hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum)  # Adasum: floating point only
    with pytest.raises(ValueError):
        hvd.reducescatter(torch.tensor(1.0))
    with pytest.raises(ValueError):
        hvd.allreduce(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(TypeError):
        hvd.grouped_allreduce(torch.ones(2))
    with pytest.raises(ValueError):
        hvd.grouped_allreduce([])
    with pytest.raises(TypeError):
        hvd.poll(3)
    with pytest.raises(ValueError, match="not registered"):  # never added
        hvd.allreduce(torch.ones(2), process_set=hvd.ProcessSet([0]))
    with pytest.raises(ValueError):
        hvd.broadcast_parameters(5, root_rank=0)
    # every rank still agrees afterwards
    assert torch.allclose(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(size)))
