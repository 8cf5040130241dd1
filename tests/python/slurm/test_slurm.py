"""hvd.init() under a real Slurm (a one-node cluster this session starts,
slurm_cluster.py): the world of an srun step on the Gloo transport, training
to one process's weights on the concatenated batch; a batch script's own
process (sbatch -n 2, no srun step) refused with the reason; the C++ example
under srun refused too (a C++ program does not join a Slurm world by itself)."""

import os
import shlex
import sys
import time

import pytest
from launchers_conftest import WORKER, check_training, clean_env, read_ranks, run

PYTHON = sys.executable
INIT = "import horovodlite.torch as hvd; hvd.init(); print('size', hvd.size())"


@pytest.mark.parametrize("np", [2, 3])
def test_srun_trains(slurm, tmp_path, np):
    env = slurm.env(clean_env(HVL_TEST_OUT=tmp_path, HOROVODLITE_LOG_LEVEL="info"))
    p = run(["srun", "-n", str(np), PYTHON, WORKER], env, timeout=120)
    for r in range(np):
        assert "joins the slurm world (Slurm's variables (SLURM_PROCID=%d SLURM_STEP_NUM_TASKS=%d, job " % (r, np) \
            in p.stdout, p.stdout[-4000:]
    results = read_ranks(tmp_path, np)
    check_training(results)
    for res in results:
        assert res["gloo"] is True
        assert str(res["rank"]) == res["env"]["SLURM_PROCID"]
        assert str(res["local_rank"]) == res["env"]["SLURM_LOCALID"]
        assert res["env"]["SLURM_NODEID"] == "0"
        assert (res["size"], res["local_size"], res["cross_rank"], res["cross_size"]) == (np, np, 0, 1)


# A world of one inside a step must not start MPI: Open MPI 4.1, seeing
# SLURM_STEP_ID, takes the task for one that srun launched directly and aborts
# in MPI_Init, since srun gives it no PMI here (MpiDefault=none, Slurm's
# default). The core runs such a world on Gloo with one rank (config.cc).
OMPI_NO_PMI = "OMPI was not built with SLURM's PMI support"


@pytest.mark.parametrize("np,launcher", [(1, None), (2, "single")], ids=["one-task", "LAUNCHER=single"])
def test_world_of_one_inside_a_step(slurm, np, launcher):
    """srun -n 1 (no world to join), and HOROVODLITE_LAUNCHER=single in a step
    of two (what the refusals suggest): every task a world of one."""
    extra = {"HOROVODLITE_LAUNCHER": launcher} if launcher else {}
    p = run(["srun", "-n", str(np), PYTHON, "-c", INIT], slurm.env(clean_env(**extra)), timeout=60, check=False)
    assert OMPI_NO_PMI not in p.stdout, p.stdout[-4000:]
    assert p.returncode == 0, p.stdout[-4000:]
    assert p.stdout.count("size 1") == np, p.stdout[-4000:]


def test_batch_script_outside_a_step_fails_with_the_reason(slurm, tmp_path):
    """sbatch -n 2 running python itself (no srun): SLURM_NTASKS=2 and
    SLURM_PROCID=0 but no SLURM_STEP_ID. hvd.init() must say so, not wait
    for ranks that never start nor quietly train alone."""
    out = tmp_path / "batch.out"
    t0 = time.monotonic()
    p = run(["sbatch", "-n", "2", "--wait", "-o", str(out), "--wrap", shlex.join([PYTHON, "-c", INIT])],
            slurm.env(clean_env()), timeout=90, check=False)
    took = time.monotonic() - t0
    text = out.read_text() if out.exists() else "(no %s)" % out
    assert p.returncode != 0, p.stdout + text
    assert "SLURM_NTASKS=2 but this process is not a task of an srun step (no SLURM_STEP_ID)" in text, text
    assert "size " not in text
    assert took < 60, "sbatch took %.1f s" % took


def test_cpp_train_under_srun(slurm, tmp_path):
    """The LibTorch example joins the step's world itself (adapters/torch/src/launchers.cc)."""
    train = os.environ.get("HVL_TRAIN_BIN")
    if not train:
        pytest.skip("HVL_TRAIN_BIN is not set (the C++ example `train`, built with LibTorch)")
    p = run(["srun", "-n", "2", train, "--epochs", "1"], slurm.env(clean_env()), timeout=90, check=False)
    assert p.returncode == 0, p.stdout[-4000:]
    assert "train: 2 ranks" in p.stdout and "weights identical on all 2 ranks: yes" in p.stdout, p.stdout[-4000:]


def test_core_program_under_srun_is_refused(slurm, tmp_path):
    """A program of the core alone does not join another launcher's world: it says so, before MPI."""
    core = os.environ.get("HVL_CORE_BIN")
    if not core:
        pytest.skip("HVL_CORE_BIN is not set (tests/core/core_init_app: a program of the core alone)")
    t0 = time.monotonic()
    p = run(["srun", "-n", "2", core], slurm.env(clean_env()), timeout=90, check=False)
    took = time.monotonic() - t0
    assert p.returncode != 0, p.stdout
    for r in range(2):
        assert ("init: this process is one of several started by Slurm's srun step (SLURM_PROCID=%d SLURM_NTASKS=2)"
                % r) in p.stdout, p.stdout[-4000:]
    # Refused before MPI: no Open MPI abort (no PMI under srun --mpi=none).
    for abort in ("MPI_Init", "MPI_INIT", "PMI", "MPI_ABORT", "ORTE", "Open MPI"):
        assert abort not in p.stdout, p.stdout[-4000:]
    assert took < 30, "srun took %.1f s" % took
