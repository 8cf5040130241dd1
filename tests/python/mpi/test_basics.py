import os
import warnings

import horovodlite.torch as hvd
import pytest
from horovodlite.common.exceptions import HorovodInternalError

import horovodlite


def test_topology_matches_mpi_environment():
    assert hvd.is_initialized()
    assert hvd.size() == int(os.environ["OMPI_COMM_WORLD_SIZE"])
    assert hvd.rank() == int(os.environ["OMPI_COMM_WORLD_RANK"])
    assert hvd.local_size() == int(os.environ["OMPI_COMM_WORLD_LOCAL_SIZE"])
    assert hvd.local_rank() == int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])
    assert hvd.cross_size() == 1 and hvd.cross_rank() == 0
    assert hvd.is_homogeneous()
    assert isinstance(hvd.mpi_threads_supported(), bool)


def test_second_init_is_noop():
    before = (hvd.rank(), hvd.size())
    hvd.init()
    assert (hvd.rank(), hvd.size()) == before


def _mallinfo2():
    import ctypes

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                   "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = Mallinfo2
    return libc.mallinfo2()


def test_init_keeps_freed_memory_for_reuse():
    """HOROVODLITE_KEEP_FREED_MEMORY (default 1): after hvd.init() a tensor
    above glibc's largest mmap threshold (32 MiB) comes from the heap, not a
    mapping of its own, and its memory stays with the process once freed: the
    next step's activations reuse it instead of faulting in fresh pages."""
    import torch

    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", "") or any(
            v in os.environ for v in ("MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                                      "MALLOC_TOP_PAD_", "HOROVODLITE_KEEP_FREED_MEMORY",
                                      "HOROVOD_KEEP_FREED_MEMORY")):
        pytest.skip("malloc settings of the environment's own")
    mapped = _mallinfo2().hblks
    t = torch.ones(12 << 20)  # 48 MiB of float32
    assert _mallinfo2().hblks <= mapped  # (other threads may unmap older blocks meanwhile)
    del t
    assert _mallinfo2().arena >= 48 << 20  # freed, kept in the heap


def test_background_thread_pinned_only_where_ranks_outnumber_cpus(background_thread_cpus):
    """HOROVODLITE_THREAD_AFFINITY=auto (the default): where more ranks of this
    machine share this process's allowed CPUs than there are (n), the i-th of
    them (in rank order) has its background thread on the (i mod n)-th CPU
    only; otherwise it runs wherever the process may (src/thread_affinity.h)."""
    if any(v in os.environ for v in ("HOROVODLITE_THREAD_AFFINITY", "HOROVOD_THREAD_AFFINITY")):
        pytest.skip("thread affinity set by the environment")
    allowed = sorted(os.sched_getaffinity(0))
    with open("/proc/sys/kernel/random/boot_id") as f:
        mine = (f.read().strip(), allowed)
    everyone = hvd.allgather_object(mine, name="affinity.sharers")
    sharers = [r for r, x in enumerate(everyone) if x == mine]
    threads = background_thread_cpus()
    assert len(threads) == 1, threads
    if len(sharers) > len(allowed):
        assert threads[0] == {allowed[sharers.index(hvd.rank()) % len(allowed)]}
    else:
        assert threads[0] == set(allowed)


def test_build_flags():
    assert hvd.mpi_enabled() and hvd.mpi_built()
    # An mpirun job runs on MPI; the Gloo transport is built when libgloo-dev was found.
    assert hvd.gloo_enabled() is False
    from horovodlite.torch import _C

    assert hvd.gloo_built() is _C.build_info()["gloo"]
    assert isinstance(hvd.nccl_built(), int) and not isinstance(hvd.nccl_built(), bool)
    # CUDA support comes with NCCL (both are detected at configure time), never ROCm.
    assert isinstance(hvd.cuda_built(), bool) and hvd.cuda_built() == (hvd.nccl_built() > 0)
    assert hvd.rocm_built() is False
    assert horovodlite.__version__


def test_exception_types_are_shared():
    assert hvd.HorovodInternalError is HorovodInternalError
    assert issubclass(HorovodInternalError, RuntimeError)


def test_ops_are_distinct():
    ops = {hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product}
    assert len(ops) == 6


def test_timeline_start_stop(tmp_path):
    import json

    import torch
    from horovodlite.torch import _C
    path = hvd.broadcast_object(str(tmp_path / "timeline.json"), root_rank=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hvd.start_timeline(path, mark_cycles=True)
        hvd.start_timeline(path)  # same path while active: OK
        if _C.timeline_built and hvd.rank() == 0:
            with pytest.raises(ValueError):
                hvd.start_timeline(path + ".other")
    hvd.allreduce(torch.ones(4), name="timeline.op")
    hvd.stop_timeline()
    if _C.timeline_built and hvd.rank() == 0:
        with open(path) as f:
            events = json.load(f)
        text = json.dumps(events)
        assert "timeline.op" in text
    with pytest.raises(ValueError):
        hvd.start_timeline("")
    hvd.barrier()
