"""Launcher tests: each starts its launcher (torchrun, srun, Spark, Ray, a
plain torch.distributed group) over tests/python/launchers/launch_train.py and
checks every rank's place and weights against one process on the
concatenated batch."""

import json
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "launch_train.py")
sys.path.insert(0, HERE)


_torchrun_works = None


def require_torchrun():
    """Skips the calling test where this torch's torchrun cannot start a job at
    all (Debian's torch 1.13 on Python 3.11: start_processes fails with
    "'NoneType' object has no attribute 'get'" for every script)."""
    global _torchrun_works
    if _torchrun_works is None:
        p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
                            "--no_python", "true"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120, env=clean_env())
        _torchrun_works = (p.returncode == 0, p.stdout.strip().splitlines()[-1:] or [""])
    if not _torchrun_works[0]:
        pytest.skip("this torch's torchrun cannot start any job: %s" % _torchrun_works[1][0])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra):
    """This environment without any launcher's variables (ctest's own mpirun,
    an enclosing job), plus `extra`."""
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items()
           if k not in drop and not k.startswith(("OMPI_", "PMI", "SLURM_", "TORCHELASTIC_", "HOROVOD_RANK",
                                                   "HOROVOD_GLOO", "HOROVOD_CONTROLLER"))}
    env["OMP_NUM_THREADS"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def read_ranks(out_dir, size):
    results = []
    for r in range(size):
        path = os.path.join(out_dir, "rank%d.json" % r)
        assert os.path.exists(path), "rank %d wrote no result (%s)" % (r, sorted(os.listdir(out_dir)))
        with open(path) as f:
            results.append(json.load(f))
    return results


def check_training(results):
    """Every rank's weights equal one process's on the concatenated batch."""
    import launch_train
    size = results[0]["size"]
    want = launch_train.reference(size)
    for res in results:
        assert res["size"] == size
        assert res["first_sum"] == size
        for got, exp in zip(res["weights"], want):
            assert got == pytest.approx(exp, rel=1e-5, abs=1e-6), "rank %d" % res["rank"]
        assert res["weights"] == results[0]["weights"], "rank %d differs from rank 0" % res["rank"]


def run(cmd, env, timeout=180, check=True):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError("%s exited %d:\n%s" % (" ".join(cmd), p.returncode, p.stdout[-6000:]))
    return p
