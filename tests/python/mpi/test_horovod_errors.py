"""The exception types that Horovod 0.28's users (and its test suite) catch."""

import horovodlite.torch as hvd
import pytest
import torch


def test_alltoall_splits_of_a_bad_dtype_is_value_error(size):
    tensor = torch.ones(2 * size)
    for splits in (torch.full((size,), 2.0), torch.full((size,), True), [2.0] * size, [True] * size):
        with pytest.raises(ValueError, match="splits"):
            hvd.alltoall(tensor, splits=splits)
        with pytest.raises(ValueError, match="splits"):
            hvd.alltoall_async(tensor, splits=splits)
    with pytest.raises(ValueError, match="splits"):
        hvd.alltoall(tensor, splits=torch.full((size, 1), 2, dtype=torch.int32))
    # nothing was enqueued: every rank still agrees
    out, received = hvd.alltoall(tensor, splits=torch.full((size,), 2, dtype=torch.int64))
    assert torch.equal(out, tensor) and received.tolist() == [2] * size


def _collectives_other_than_allreduce(size):
    x = torch.ones(size * 2, 3)
    return [
        ("allgather", lambda: hvd.allgather(x, name="joined.allgather")),
        ("broadcast", lambda: hvd.broadcast(x, root_rank=1, name="joined.broadcast")),
        ("alltoall", lambda: hvd.alltoall(x, name="joined.alltoall")),
        ("reducescatter", lambda: hvd.reducescatter(x, name="joined.reducescatter")),
        ("allgather_async", lambda: hvd.synchronize(hvd.allgather_async(x, name="joined.allgather_async"))),
    ]


@pytest.mark.parametrize("joined_rank", [0, "last"])
def test_collective_while_a_rank_has_joined_is_internal_error(joined_rank, rank, size):
    joined_rank = size - 1 if joined_rank == "last" else joined_rank
    for round_ in range(2):  # and join() works again afterwards
        if rank == joined_rank:
            last = hvd.join()
        else:
            for what, op in _collectives_other_than_allreduce(size):
                with pytest.raises(hvd.HorovodInternalError, match="joined") as info:
                    op()
                assert isinstance(info.value, RuntimeError), what
                assert not isinstance(info.value, ValueError), what
            # allreduce is still fine: the joined rank contributes zeros
            total = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="joined.allreduce.%d" % round_)
            assert torch.equal(total, torch.full((3,), float(size - 1)))
            last = hvd.join()
        assert last != joined_rank and 0 <= last < size
        assert torch.equal(hvd.allgather(torch.tensor([rank])), torch.arange(size))


def test_reducescatter_of_an_op_other_than_sum_is_internal_error(size):
    # Horovod's core aborts the enqueue ("Reducescatter currently only supports
    # SUM."), raised as HorovodInternalError: its test catches RuntimeError.
    x = torch.ones(size * 4, 2)
    for op, name in ((hvd.Adasum, "Adasum"), (hvd.Min, "Min"), (hvd.Max, "Max"), (hvd.Product, "Product")):
        for call in (lambda op=op: hvd.reducescatter(x, op=op), lambda op=op: hvd.reducescatter_async(x, op=op),
                     lambda op=op: hvd.grouped_reducescatter([x, x], op=op)):
            with pytest.raises(hvd.HorovodInternalError, match="only supports SUM.*hvd.%s" % name) as info:
                call()
            assert isinstance(info.value, RuntimeError) and not isinstance(info.value, ValueError)
    with pytest.raises(ValueError, match="Average or hvd.Sum"):
        hvd.reducescatter(x, op=17)
    # nothing was enqueued: every rank still agrees
    assert torch.equal(hvd.reducescatter(x, op=hvd.Sum), torch.full((4, 2), float(size)))
