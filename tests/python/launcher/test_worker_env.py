"""horovodlite.runner.worker_env: the ranks and variables Spark and Ray workers get."""

import pytest
from horovodlite.runner import worker_env


def test_ranks_contiguous_per_host_in_first_seen_order():
    slots = worker_env.assign_ranks(["b", "a", "b", "a", "c"])
    # Hosts in order of their first worker: b (workers 0, 2), a (1, 3), c (4).
    assert [s.rank for s in slots] == [0, 2, 1, 3, 4]
    assert [s.local_rank for s in slots] == [0, 0, 1, 1, 0]
    assert [s.local_size for s in slots] == [2, 2, 2, 2, 1]
    assert all(s.size == 5 for s in slots)


def test_cross_rank_counts_hosts_with_that_local_rank():
    slots = worker_env.assign_ranks(["a", "a", "a", "b", "c", "c"])
    by_rank = sorted(slots, key=lambda s: s.rank)
    # local rank 0 on a, b, c; local rank 1 on a, c; local rank 2 on a only.
    assert [(s.hostname, s.local_rank, s.cross_rank, s.cross_size) for s in by_rank] == [
        ("a", 0, 0, 3), ("a", 1, 0, 2), ("a", 2, 0, 1), ("b", 0, 1, 3), ("c", 0, 2, 3), ("c", 1, 1, 2)]


def test_contract_variables():
    slot = worker_env.assign_ranks(["h", "h"])[1]
    env = worker_env.gloo_env(slot, "10.0.0.1", 1234, timeout_s=7, iface="eth0")
    assert env["HOROVOD_CONTROLLER"] == "gloo" and env["HOROVOD_CPU_OPERATIONS"] == "gloo"
    assert (env["HOROVOD_RANK"], env["HOROVOD_SIZE"], env["HOROVOD_LOCAL_RANK"], env["HOROVOD_LOCAL_SIZE"]) == (
        "1", "2", "1", "2")
    assert (env["HOROVOD_CROSS_RANK"], env["HOROVOD_CROSS_SIZE"], env["HOROVOD_HOSTNAME"]) == ("0", "1", "h")
    assert (env["HOROVOD_GLOO_RENDEZVOUS_ADDR"], env["HOROVOD_GLOO_RENDEZVOUS_PORT"]) == ("10.0.0.1", "1234")
    assert env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "7" and env["HOROVOD_GLOO_IFACE"] == "eth0"
    roundtrip = worker_env.SlotInfo.from_dict(slot.to_dict())
    assert roundtrip.to_dict() == slot.to_dict()


def test_inherited_mpi_identity_is_dropped():
    env = worker_env.strip_inherited({"OMPI_COMM_WORLD_RANK": "3", "PMIX_RANK": "3", "HOROVOD_RANK": "1",
                                      "HOROVOD_FUSION_THRESHOLD": "1024", "PATH": "/bin"})
    assert env == {"HOROVOD_FUSION_THRESHOLD": "1024", "PATH": "/bin"}


def test_no_workers_is_an_error():
    with pytest.raises(ValueError, match="no workers"):
        worker_env.assign_ranks([])
