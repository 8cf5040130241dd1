"""horovodlite.lightning.HorovodStrategy under each launcher: mpirun,
horovodlite-run --gloo and torchrun each start lightning_train.py on 2 ranks
once. Its fits (plain, gradient accumulation, a checkpoint and a resumed fit,
manual optimization, an accumulation schedule, pytorch_lightning's Trainer)
must reach the weights of one plain-PyTorch process on the global batches, the
same on both ranks, with the checkpoint and the CSV log written once; the
strategy's collectives give the expected values; sync_batchnorm is refused."""

import csv
import importlib.util
import json
import os
import subprocess
import sys

import pytest

if importlib.util.find_spec("lightning") is None:
    pytest.skip("lightning is not installed (ci/setup_venv.sh installs it)", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "lightning_train.py")
sys.path.insert(0, HERE)

import lightning_train as lt  # noqa: E402

CASES = list(lt.CASES) if importlib.util.find_spec("pytorch_lightning") else [c for c in lt.CASES if c != "pl"]
SIZE = 2


def clean_env(out_dir):
    """This environment without any launcher's variables (an enclosing job's,
    ctest's), plus the test's."""
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
            "PL_GLOBAL_SEED")
    env = {k: v for k, v in os.environ.items()
           if k not in drop and not k.startswith(("OMPI_COMM_WORLD", "OMPI_UNIVERSE", "PMIX_", "PMI_", "SLURM_",
                                                   "TORCHELASTIC_", "HOROVOD_", "HOROVODLITE_"))}
    env.update(HVL_TEST_OUT=str(out_dir), OMP_NUM_THREADS="1", HOROVODLITE_LOG_LEVEL="info")
    return env


def launch(cmd, out_dir, timeout=240):
    """Runs `cmd` (a launcher's command line ending with the script) on every
    case; returns its output and the ranks' results."""
    p = subprocess.run(cmd + [",".join(CASES)], env=clean_env(out_dir), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout)
    assert p.returncode == 0, "%s exited %d:\n%s" % (" ".join(cmd), p.returncode, p.stdout[-8000:])
    results = []
    for r in range(SIZE):
        path = os.path.join(out_dir, "rank%d.json" % r)
        assert os.path.exists(path), "rank %d wrote no result:\n%s" % (r, p.stdout[-4000:])
        with open(path) as f:
            results.append(json.load(f))
    return p.stdout, results


def close(got, want, what):
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=1e-5, abs=1e-6), what
    assert len(got) == len(want), what


def check_fits(results):
    def accumulate_schedule(epoch):  # GradientAccumulationScheduler({0: 1, 1: 2})
        return 1 if epoch == 0 else 2

    # fit -> (the epochs of the rows the module saw, reference())
    fits = {"plain": ([0, 1], dict(epochs=2)),
            "accumulate": ([0, 1], dict(epochs=2, accumulate=2)),
            "checkpoint": ([0], dict(epochs=1)),
            "resumed": ([1], dict(epochs=2)),
            "refit": ([0, 0], dict(epochs=1, fits=2)),
            "manual": ([0], dict(epochs=1)),
            "accumulate_schedule": ([0, 1], dict(epochs=2, accumulate=accumulate_schedule)),
            "pl": ([0], dict(epochs=1))}
    for name in [n for n in fits if n in CASES or (n == "resumed" and "checkpoint" in CASES)]:
        epochs, kwargs = fits[name]
        want, _ = lt.reference(size=SIZE, **kwargs)
        for res in results:
            fit = res["fits"][name]
            close(fit["weights"], want, "%s: rank %d's weights" % (name, res["rank"]))
            assert fit["weights"] == results[0]["fits"][name]["weights"], "%s: rank %d differs" % (name, res["rank"])
            rows = [row for e in epochs for row in lt.shard(res["rank"], e, SIZE)]
            assert fit["seen"] == rows, "%s: rank %d trained on other rows" % (name, res["rank"])


def check_place_and_collectives(results):
    for res in results:
        r = res["rank"]
        assert res["place"] == {"global_rank": r, "world_size": SIZE, "local_rank": r, "node_rank": 0,
                                "num_nodes": 1, "is_global_zero": r == 0, "root_device": "cpu",
                                "sampler": {"num_replicas": SIZE, "rank": r}, "hvd": [r, SIZE]}
        assert res["collectives"] == {
            "mean": [1.5], "sum": [3.0], "max": [2.0], "reduceop_sum": [3.0], "int_mean": [0.5], "not_tensor": 3,
            "all_gather": [[0, 10], [1, 11]], "all_gather_scalar": [0.0, 1.0], "broadcast": {"from": 1},
            "all": False, "any": True,
            # d/dx of sum over ranks of (gathered * [1, 2]).sum(): SIZE times this rank's factor
            "sync_grads": [SIZE * (r + 1.0)]}
        assert res["still_initialized"], "teardown shut horovodlite down"
        if "refusals" in CASES:
            assert "does not support Trainer(sync_batchnorm=True)" in res["sync_batchnorm"]
        bad = [w for w in res["warnings"] if "lr_scheduler.step()" in w or "overridden" in w or "synchronize" in w]
        assert not bad, bad


def check_files(out_dir, results):
    if "checkpoint" in CASES:
        assert os.listdir(os.path.join(out_dir, "ckpt")) == ["epoch=0-step=5.ckpt"]
        assert {res["checkpoint"] for res in results} == {os.path.join(out_dir, "ckpt", "epoch=0-step=5.ckpt")}
        assert all(res["resumed_epoch"] == 2 for res in results)
    # CSVLogger: one version, written by rank 0 only, with the sync_dist loss of every step.
    versions = os.path.join(out_dir, "logs", "lightning_logs")
    assert os.listdir(versions) == ["version_0"]
    metrics = [os.path.join(d, f) for d, _, files in os.walk(out_dir) for f in files if f == "metrics.csv"]
    assert metrics == [os.path.join(versions, "version_0", "metrics.csv")]
    with open(metrics[0]) as f:
        logged = [float(row["loss"]) for row in csv.DictReader(f) if row.get("loss")]
    _, losses = lt.reference(2, size=SIZE)
    close(logged, losses, "logged losses (mean over the ranks' batches)")


def check_job(out_dir, output, results, world):
    assert "horovodlite.init(): joins the %s world" % world in output, output[-4000:]
    check_fits(results)
    check_place_and_collectives(results)
    check_files(out_dir, results)


@pytest.mark.skipif(not os.environ.get("HVL_TEST_MPIRUN"), reason="no mpirun (a build without MPI)")
def test_mpirun(tmp_path):
    from horovodlite.runner import mpi_flags
    cmd = [os.environ["HVL_TEST_MPIRUN"], "-np", str(SIZE), *mpi_flags.JOB_FLAGS, *mpi_flags.EXCLUSIONS,
           sys.executable, SCRIPT]
    output, results = launch(cmd, tmp_path)
    check_job(tmp_path, output, results, "mpi")
    assert all(res["launcher_env"]["OMPI_COMM_WORLD_RANK"] == str(res["rank"]) for res in results)


NO_GLOO = pytest.mark.skipif(os.environ.get("HVL_TEST_GLOO") == "0", reason="built without Gloo (HVL_TEST_GLOO=0)")


@NO_GLOO
def test_horovodlite_run_gloo(tmp_path):
    cmd = [sys.executable, "-m", "horovodlite.run", "--gloo", "-np", str(SIZE), sys.executable, SCRIPT]
    output, results = launch(cmd, tmp_path)
    check_job(tmp_path, output, results, "horovodlite")


@NO_GLOO
def test_torchrun(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(SIZE), SCRIPT]
    output, results = launch(cmd, tmp_path)
    check_job(tmp_path, output, results, "torchrun")
    assert all(res["launcher_env"]["RANK"] == str(res["rank"]) for res in results)
