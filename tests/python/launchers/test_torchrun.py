"""hvd.init() under torchrun (standalone, two agents meeting through a c10d
rendezvous, --nnodes MIN:MAX, --max-restarts) and under an already-initialised
torch.distributed: the world torchrun made, on the Gloo transport, training to
one process's weights on the concatenated batch."""

import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import HERE, WORKER, check_training, clean_env, free_port, read_ranks, require_torchrun, run

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def test_standalone(tmp_path):
    require_torchrun()
    env = clean_env(HVL_TEST_OUT=tmp_path, HOROVODLITE_LOG_LEVEL="info")
    p = run(TORCHRUN + ["--standalone", "--nproc_per_node", "2", WORKER], env)
    assert "joins the torchrun world (torchrun's variables (RANK=0 WORLD_SIZE=2))" in p.stdout
    results = read_ranks(tmp_path, 2)
    check_training(results)
    for res in results:
        assert res["gloo"]
        assert str(res["rank"]) == res["env"]["RANK"]
        assert str(res["local_rank"]) == res["env"]["LOCAL_RANK"]
        assert (res["local_size"], res["cross_rank"], res["cross_size"]) == (2, 0, 1)


def _two_agents(tmp_path, nnodes, extra=()):
    require_torchrun()
    port = free_port()
    env = clean_env(HVL_TEST_OUT=tmp_path)
    cmd = TORCHRUN + ["--nnodes", nnodes, "--nproc_per_node", "1", "--rdzv_backend", "c10d",
                      "--rdzv_endpoint", "127.0.0.1:%d" % port, "--rdzv_id", "hvl-two-agents", *extra, WORKER]
    agents = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(2)]
    outs = [a.communicate(timeout=180)[0] for a in agents]
    for a, out in zip(agents, outs):
        assert a.returncode == 0, out[-6000:]
    return read_ranks(tmp_path, 2)


def test_two_agents_c10d_rendezvous(tmp_path):
    results = _two_agents(tmp_path, "2")
    check_training(results)
    for res in results:
        # Two torchrun nodes (GROUP_RANK 0 and 1), one process each: what torchrun says.
        assert str(res["local_rank"]) == res["env"]["LOCAL_RANK"] == "0"
        assert (res["local_size"], res["cross_size"]) == (1, 2)
        assert str(res["cross_rank"]) == res["env"]["GROUP_RANK"]


def test_nnodes_min_max(tmp_path):
    results = _two_agents(tmp_path, "1:2", ["--rdzv_conf", "last_call_timeout=5"])
    check_training(results)


RESUME = os.path.join(HERE, "resume_train.py")


def test_max_restarts_resumes_from_checkpoint(tmp_path):
    """Rank 1 dies after the checkpoint of step 2 in the first attempt; torchrun
    restarts the group, which forms a fresh world, resumes and finishes with the
    weights of an uninterrupted run."""
    require_torchrun()
    env = clean_env(HVL_TEST_OUT=tmp_path, HVL_TEST_CKPT=tmp_path / "ckpt.pt")
    p = run(TORCHRUN + ["--standalone", "--nproc_per_node", "2", "--max_restarts", "1", RESUME], env)
    results = read_ranks(tmp_path, 2)
    check_training(results)
    assert all(r["env"]["TORCHELASTIC_RESTART_COUNT"] == "1" for r in results), p.stdout[-3000:]
    assert all(r["resumed_from"] == 2 for r in results)


DIST_FIRST = os.path.join(HERE, "dist_first.py")


@pytest.mark.parametrize("how", ["env", "tcp"])
def test_initialised_torch_distributed(tmp_path, how):
    """init_process_group first (env:// under torchrun; tcp:// with explicit
    ranks and no launcher variables at all): hvd.init() takes its group's rank,
    size and store."""
    env = clean_env(HVL_TEST_OUT=tmp_path, HVL_TEST_INIT=how, HVL_TEST_PORT=free_port())
    if how == "env":
        require_torchrun()
        run(TORCHRUN + ["--standalone", "--nproc_per_node", "2", DIST_FIRST], env)
    else:
        procs = [subprocess.Popen([sys.executable, DIST_FIRST], env=dict(env, HVL_TEST_RANK=str(r)),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
        outs = [p.communicate(timeout=120)[0] for p in procs]
        assert all(p.returncode == 0 for p in procs), "\n".join(o[-4000:] for o in outs)
    check_training(read_ranks(tmp_path, 2))


def _init_fails(env, timeout=60):
    t0 = time.time()
    p = run([sys.executable, "-c", "import horovodlite.torch as hvd; hvd.init()"], env, timeout=timeout, check=False)
    assert p.returncode != 0, p.stdout
    return p.stdout, time.time() - t0


def test_half_set_environment_fails_naming_the_variables():
    out, _ = _init_fails(clean_env(RANK="1"))
    assert "RANK is set but WORLD_SIZE is not" in out


def test_master_nobody_serves_fails_within_the_timeout():
    port = free_port()
    out, took = _init_fails(clean_env(RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                                      HOROVOD_GLOO_TIMEOUT_SECONDS="3"))
    assert "cannot reach the store at MASTER_ADDR:MASTER_PORT=127.0.0.1:%d" % port in out
    assert took < 30


def test_missing_rank_fails_naming_it():
    """WORLD_SIZE=2 but only rank 0 starts: rank 0 names the rank that never came."""
    out, took = _init_fails(clean_env(RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port(),
                                      HOROVOD_GLOO_TIMEOUT_SECONDS="3"))
    assert "not every rank joined within 3 s" in out and "ranks 1 did not arrive" in out
    assert took < 30


def test_two_processes_claiming_one_rank(tmp_path):
    """Ranks 0, 1 and 1 again: the second claimant of rank 1 fails at once, naming it;
    the others form the world. They stay until it has failed: a claimant arriving
    after rank 0 (and its store) is gone could only say that nobody serves the store."""
    port = free_port()
    release = tmp_path / "release"
    # The default timeout: rank 0 may start its store seconds after the others on a busy machine.
    env = clean_env(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    code = ("import os, sys, time; import horovodlite.torch as hvd; hvd.init(); end = time.time() + 120\n"
            "while not os.path.exists(sys.argv[1]) and time.time() < end: time.sleep(0.05)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(release)], env=dict(env, RANK=r),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in ("0", "1", "1")]
    try:
        end = time.time() + 90
        while all(p.poll() is None for p in procs) and time.time() < end:
            time.sleep(0.05)
        first = [p for p in procs if p.poll() is not None]
        assert first, "no process ended within 90 s"
        out = first[0].communicate()[0]
        assert first[0].returncode != 0 and "two processes claim rank 1 of 2" in out, out[-4000:]
        assert first[0] is not procs[0]
    finally:
        release.touch()
    others = [p for p in procs if p is not first[0]]
    outs = [p.communicate(timeout=60)[0] for p in others]
    assert all(p.returncode == 0 for p in others), "\n".join(o[-3000:] for o in outs)


@pytest.mark.skipif(not os.environ.get("HVL_TRAIN_BIN"), reason="HVL_TRAIN_BIN (the C++ train example) not given")
def test_cpp_train_under_torchrun():
    """A LibTorch program joins torchrun's world itself (adapters/torch/src/launchers.cc)."""
    require_torchrun()
    p = run(TORCHRUN + ["--standalone", "--nproc_per_node", "2", "--no_python", os.environ["HVL_TRAIN_BIN"],
                        "--epochs", "1"], clean_env(HOROVODLITE_LOG_LEVEL="info"))
    assert "joins the torchrun world (torchrun's variables (RANK=1 WORLD_SIZE=2))" in p.stdout, p.stdout[-4000:]
    assert "train: 2 ranks" in p.stdout and "weights identical on all 2 ranks: yes" in p.stdout, p.stdout[-4000:]


@pytest.mark.skipif(not os.environ.get("HVL_TRAIN_BIN"), reason="HVL_TRAIN_BIN (the C++ train example) not given")
def test_cpp_half_set_environment_fails_naming_the_variables():
    p = run([os.environ["HVL_TRAIN_BIN"], "--epochs", "1"], clean_env(RANK="0", WORLD_SIZE="2"), check=False)
    assert p.returncode != 0
    assert "torchrun's variables (RANK=0 WORLD_SIZE=2) set but MASTER_ADDR not" in p.stdout, p.stdout[-3000:]


@pytest.mark.skipif(not os.environ.get("HVL_CORE_BIN"), reason="HVL_CORE_BIN (a program of the core alone) not given")
def test_core_program_refuses_a_silent_world_of_one():
    p = run([os.environ["HVL_CORE_BIN"]], clean_env(RANK="0", WORLD_SIZE="2"), check=False)
    assert p.returncode != 0
    assert "one of several started by torchrun's WORLD_SIZE=2 RANK=0" in p.stdout, p.stdout[-3000:]


def test_torchrun_is_on_path_as_users_run_it():
    assert shutil.which("torchrun", path=os.path.dirname(sys.executable)), "torchrun beside %s" % sys.executable
