"""hvd.init(comm=...) and HOROVOD_TIMELINE=DYNAMIC. These restart horovodlite,
so they run near the end (file order) and leave it initialised on the world."""

import json
import os

import horovodlite.torch as hvd
import pytest
import torch

MPI = pytest.importorskip("mpi4py.MPI")


def _restart_world():
    hvd.shutdown()
    hvd.init()


def _sum_of_world_ranks(world_rank):
    return hvd.allreduce(torch.tensor([float(world_rank)]), op=hvd.Sum, name="init_comm.sum").item()


def test_init_with_a_list_of_ranks(rank, size):
    listed = list(range(size - 1, 0, -1)) if size > 2 else [1]  # reversed: ranks follow list order
    hvd.shutdown()
    if rank in listed:
        hvd.init(comm=listed)
        assert hvd.size() == len(listed)
        assert hvd.rank() == listed.index(rank)
        assert _sum_of_world_ranks(rank) == float(sum(listed))
        gathered = hvd.allgather(torch.tensor([rank]), name="init_comm.gather")
        assert gathered.tolist() == listed
        hvd.init(comm=listed)  # initialised already: a no-op, as in Horovod
        hvd.shutdown()
    else:
        with pytest.raises(ValueError, match="rank %d of MPI_COMM_WORLD is not in the list" % rank):
            hvd.init(comm=listed)
        assert not hvd.is_initialized()
    with pytest.raises(ValueError, match="distinct"):
        hvd.init(comm=[rank, rank])
    with pytest.raises(ValueError, match="out of range"):
        hvd.init(comm=[rank, size])
    with pytest.raises(TypeError):
        hvd.init(comm=["0"])
    hvd.init(comm=[])  # [] is MPI_COMM_WORLD
    assert hvd.size() == size and hvd.rank() == rank
    assert _sum_of_world_ranks(rank) == float(sum(range(size)))


def test_init_with_an_mpi4py_communicator(rank, size):
    color = rank % 2
    comm = MPI.COMM_WORLD.Split(color, -rank)  # key -rank: reversed order within each half
    members = sorted((r for r in range(size) if r % 2 == color), reverse=True)
    hvd.shutdown()
    hvd.init(comm=comm)
    try:
        assert hvd.size() == len(members) == comm.Get_size()
        assert hvd.rank() == members.index(rank) == comm.Get_rank()
        # two independent horovodlite worlds at once, with the same tensor names
        assert _sum_of_world_ranks(rank) == float(sum(members))
        assert hvd.broadcast(torch.tensor([rank]), root_rank=0, name="init_comm.bcast").item() == members[0]
    finally:
        hvd.shutdown()
        comm.Free()
    with pytest.raises(ValueError, match="COMM_NULL"):
        hvd.init(comm=MPI.COMM_NULL)
    with pytest.raises(TypeError):
        hvd.init(comm=object())
    hvd.init(comm=MPI.COMM_WORLD)
    assert hvd.size() == size and hvd.rank() == rank
    _restart_world()


def test_timeline_dynamic(rank, size, tmp_path_factory):
    # Same directory on every rank: rank 0's name, broadcast.
    directory = hvd.broadcast_object(str(tmp_path_factory.mktemp("timeline")) if rank == 0 else None, 0,
                                     name="timeline.dir")
    cwd = os.getcwd()
    hvd.shutdown()
    os.environ["HOROVOD_TIMELINE"] = "DYNAMIC"
    try:
        os.chdir(directory)
        hvd.init()
    finally:
        os.chdir(cwd)
        del os.environ["HOROVOD_TIMELINE"]
    try:
        # DYNAMIC is not a file name: nothing is written until start_timeline().
        assert not os.path.exists(os.path.join(directory, "DYNAMIC"))
        hvd.barrier()
        path = os.path.join(directory, "dynamic.json")
        hvd.start_timeline(path)
        hvd.allreduce(torch.ones(3), name="timeline.dynamic.tensor")
        hvd.stop_timeline()
        # Rank 0 (the coordinator) records the other ranks' requests as they
        # arrive: without this barrier a rank that ran ahead could submit the
        # next tensor before rank 0 stopped its timeline.
        hvd.barrier()
        hvd.allreduce(torch.ones(3), name="timeline.after.stop")
        hvd.barrier()
        if rank == 0:
            with open(path) as f:
                text = f.read()
            json.loads(text)  # a complete Chrome-trace file
            assert "timeline.dynamic.tensor" in text
            assert "timeline.after.stop" not in text
    finally:
        _restart_world()


def test_thread_affinity_list(rank, size, background_thread_cpus):
    """HOROVOD_THREAD_AFFINITY as Horovod reads it: one CPU per local rank,
    comma-separated; local rank i's background thread runs on the i-th. A list
    too short for this host's ranks fails init on every rank, naming the
    variable and the local rank without a CPU, and leaves nothing hanging."""
    allowed = sorted(os.sched_getaffinity(0))
    local_rank, local_size = hvd.local_rank(), hvd.local_size()
    # Each local rank on the CPU after "its own", as round-robin would give it.
    wanted = [allowed[(i + 1) % len(allowed)] for i in range(local_size)]
    hvd.shutdown()
    os.environ["HOROVOD_THREAD_AFFINITY"] = ", ".join(str(c) for c in wanted)
    try:
        hvd.init()
        assert background_thread_cpus() == [{wanted[local_rank]}]
        assert hvd.allreduce(torch.ones(4), op=hvd.Sum, name="affinity.sum").tolist() == [float(size)] * 4
        hvd.shutdown()
        os.environ["HOROVOD_THREAD_AFFINITY"] = ",".join(str(c) for c in wanted[:-1])  # one short
        if local_rank == local_size - 1:
            with pytest.raises(ValueError, match=r"HOROVOD_THREAD_AFFINITY=.*no CPU for local rank %d" % local_rank):
                hvd.init()
        else:
            with pytest.raises(Exception, match="THREAD_AFFINITY setting was refused there"):
                hvd.init()
        assert not hvd.is_initialized()
    finally:
        del os.environ["HOROVOD_THREAD_AFFINITY"]
        _restart_world()
