"""Which world hvd.init() joins, from the environment alone (no processes)."""

import pytest
from horovodlite.common import launchers
from horovodlite.common.launchers import LaunchError, detect


def kind(env, dist_world=None):
    return detect(env, dist_world=dist_world).kind


def test_nothing_is_a_world_of_one():
    launch = detect({}, dist_world=None)
    assert (launch.kind, launch.rank, launch.size) == ("single", 0, 1)


def test_precedence():
    torchrun = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    slurm = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_NODELIST": "n1"}
    ours = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_RANK": "0"}
    mpi = {"OMPI_COMM_WORLD_RANK": "0"}
    assert kind({**ours, **mpi, **torchrun, **slurm}) == "horovodlite"
    assert kind({**mpi, **torchrun, **slurm}) == "mpi"
    assert kind({**torchrun, **slurm}, dist_world=(1, 2)) == "torchrun"
    assert kind(slurm, dist_world=(1, 2)) == "slurm"
    assert kind({}, dist_world=(1, 2)) == "torch"
    assert kind({}, dist_world=(0, 1)) == "single"
    # A choice of transport is not a place in a job.
    assert kind({"HOROVOD_CONTROLLER": "gloo", **torchrun}) == "torchrun"
    # HOROVODLITE_LAUNCHER names one.
    assert kind({**mpi, **torchrun, "HOROVODLITE_LAUNCHER": "torchrun"}) == "torchrun"
    assert kind({**torchrun, "HOROVODLITE_LAUNCHER": "single"}) == "single"
    with pytest.raises(LaunchError, match="HOROVODLITE_LAUNCHER='ddp'"):
        detect({"HOROVODLITE_LAUNCHER": "ddp"}, dist_world=None)


def test_torchrun_fields():
    env = {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "198.18.0.1", "MASTER_PORT": "29400", "GROUP_RANK": "1",
           "TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_RUN_ID": "job7"}
    launch = detect(env, dist_world=None)
    assert launch == launchers.Launch("torchrun", launch.why, 3, 4, "1", "198.18.0.1", 29400, 2, "job7")
    assert "RANK=3 WORLD_SIZE=4" in launch.why
    assert kind({"RANK": "0", "WORLD_SIZE": "1"}) == "single"


@pytest.mark.parametrize("env,match", [
    ({"RANK": "1"}, "RANK is set but WORLD_SIZE is not"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE is set but RANK is not"),
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "RANK=2 is not below WORLD_SIZE=2"),
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_ADDR and MASTER_PORT not"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "MASTER_PORT not"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "SLURM_NTASKS=2 but this process is not a task of an srun step"),
    ({"SLURM_NTASKS": "2", "SLURM_JOB_ID": "5"}, "SLURM_NTASKS=2 but this process is not a task"),  # salloc's shell
    ({"SLURM_PROCID": "2", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_NODELIST": "a"}, "SLURM_PROCID=2"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0"}, "nowhere to meet"),
])
def test_half_set_environment_is_an_error(env, match):
    with pytest.raises(LaunchError, match=match):
        detect(env, dist_world=None)


def test_torchrun_disagreeing_with_torch_distributed():
    env = {"RANK": "0", "WORLD_SIZE": "2"}
    with pytest.raises(LaunchError, match="disagree with torch.distributed's default group"):
        detect(env, dist_world=(0, 3))
    # With torch.distributed initialised its store is used: no MASTER_* needed.
    assert kind(env, dist_world=(0, 2)) == "torchrun"


def test_slurm_fields():
    env = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "2",
           "SLURM_NODEID": "0", "SLURM_STEP_NODELIST": "node[07-09]", "SLURM_JOB_ID": "123456"}
    launch = detect(env, dist_world=None)
    assert (launch.kind, launch.rank, launch.size, launch.master_addr, launch.master_port) == (
        "slurm", 1, 2, "node07", 15000 + 3456)
    assert detect({**env, "MASTER_ADDR": "m", "MASTER_PORT": "2000"}, dist_world=None)[5:7] == ("m", 2000)
    # One task (or sbatch's own shell with -n 1): a world of one.
    assert kind({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) == "single"


@pytest.mark.parametrize("nodelist,first", [
    ("n1", "n1"), ("n1,n2", "n1"), ("node[03-05,9]", "node03"), ("gpu[1,3]-ib,cpu1", "gpu1-ib"),
    ("rack[2-3]n[01-04]", "rack2n01"),
])
def test_first_slurm_host(nodelist, first):
    assert launchers.first_slurm_host(nodelist) == first
