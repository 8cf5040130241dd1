"""The core handle as Python sees it (_C.Handle, a plain CPython type since
the pybind11 class cost ~0.3 us per call): what every *_async function
returns, its methods and their errors, and that a handle keeps what it needs
alive when the caller drops everything else."""

import gc
import weakref

import horovodlite.torch as hvd
import pytest
import torch
from horovodlite.common.exceptions import HorovodInternalError
from horovodlite.torch import _C


def test_every_single_tensor_async_returns_a_core_handle(size):
    t = torch.ones(5)
    handles = [
        hvd.allreduce_async(t, name="ho.ar", op=hvd.Sum),
        hvd.allreduce_async_(t.clone(), name="ho.ar_", op=hvd.Sum),
        hvd.allgather_async(t, name="ho.ag"),
        hvd.broadcast_async(t, 0, name="ho.bc"),
        hvd.reducescatter_async(torch.ones(2 * size), name="ho.rs", op=hvd.Sum),
    ]
    for h in handles:
        assert type(h) is _C.Handle
    results = [hvd.synchronize(h) for h in handles]
    assert torch.equal(results[0], torch.full((5,), float(size)))
    assert torch.equal(results[1], torch.full((5,), float(size)))
    assert results[2].shape == (5 * size,)
    assert torch.equal(results[3], t)
    assert torch.equal(results[4], torch.full((2,), float(size)))


def test_methods_and_name(size):
    h = _C.allreduce_async(torch.ones(3), "ho.methods", hvd.Sum, 1.0, 1.0, False, False, None, 0)
    assert h.name == "ho.methods"
    assert h.wait(30.0) is True          # positional
    assert h.wait(timeout_s=30) is True  # by keyword, an int
    assert h.poll() is True
    assert "ho.methods" in repr(h) and "completed" in repr(h)
    out = h.synchronize()
    assert torch.equal(out, torch.full((3,), float(size)))
    assert h.synchronize() is out        # later calls return the same tensor
    assert h.received_splits() == []
    assert h.last_joined_rank() == -1


def test_grouped_ops_return_lists_of_core_handles(size):
    ts = [torch.ones(2), torch.ones(3)]
    hs = _C.grouped_allreduce_async(ts, ["ho.g.0", "ho.g.1"], hvd.Sum, 1.0, 1.0, False, 0)
    assert isinstance(hs, list) and [type(h) for h in hs] == [_C.Handle, _C.Handle]
    assert [h.name for h in hs] == ["ho.g.0", "ho.g.1"]
    assert [h.synchronize().tolist() for h in hs] == [[float(size)] * 2, [float(size)] * 3]


def test_alltoall_and_join_results(size):
    h = _C.alltoall_async(torch.arange(size, dtype=torch.float32), [1] * size, "ho.a2a", 0)
    out = h.synchronize()
    assert out.shape == (size,) and h.received_splits() == [1] * size
    j = _C.join_async()
    j.synchronize()
    assert 0 <= j.last_joined_rank() < size


def test_bad_wait_arguments_raise_type_errors():
    h = _C.allreduce_async(torch.ones(1), "ho.badwait", hvd.Sum, 1.0, 1.0, False, False, None, 0)
    h.synchronize()
    with pytest.raises(TypeError, match="timeout_s"):
        h.wait()
    with pytest.raises(TypeError, match="timeout_s"):
        h.wait(1.0, 2.0)
    with pytest.raises(TypeError, match="timeout_s"):
        h.wait(timeout=1.0)
    with pytest.raises(TypeError):
        h.wait("soon")
    with pytest.raises(TypeError):
        _C.Handle()  # made only by the *_async functions


def test_a_failed_op_raises_from_synchronize(size):
    # Ranks disagree on the shape: the negotiation fails the op on every rank.
    h = hvd.allreduce_async(torch.ones(hvd.rank() + 1), name="ho.mismatch", op=hvd.Sum)
    if size == 1:
        hvd.synchronize(h)
        return
    with pytest.raises(HorovodInternalError, match="ho.mismatch"):
        hvd.synchronize(h)
    with pytest.raises(HorovodInternalError, match="ho.mismatch"):
        h.synchronize()  # again: the same error


def test_a_dropped_handle_keeps_its_tensors_until_the_op_completes(size):
    # The caller keeps neither the input nor the handle: the core references the
    # tensor until the op has run, then lets it go (nothing leaks).
    refs = []
    for i in range(50):
        t = torch.full((1000,), float(i))
        refs.append(weakref.ref(t))
        hvd.allreduce_async_(t, name="ho.drop.%d" % i, op=hvd.Sum)
        del t
    # Later ops run after these on every rank: once this one is done, they are.
    assert torch.equal(hvd.allreduce_(torch.ones(4), name="ho.drop.after", op=hvd.Sum), torch.full((4,), float(size)))
    gc.collect()
    assert [r() for r in refs] == [None] * 50
