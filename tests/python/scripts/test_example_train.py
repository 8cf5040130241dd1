"""examples/train.py run as a user would (mpirun -np 2): it learns its synthetic data
set with the default optimizer and with --use-adasum (Horovod's example flag:
op=hvd.Adasum, the learning rate not scaled by the number of ranks), and refuses
Adasum on a rank count that is not a power of two with a clear error."""

import os
import re
import subprocess
import sys

import pytest
from horovodlite.runner import mpi_flags

MPIRUN = os.environ.get("HVL_TEST_MPIRUN", "mpirun")
MPIRUN_FLAGS = mpi_flags.JOB_FLAGS + mpi_flags.EXCLUSIONS
TRAIN = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir, "examples", "train.py")


def _clean_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OMPI_", "PMIX_", "HOROVODLITE_", "HOROVOD_"))
            or k.startswith("OMPI_ALLOW_RUN_AS_ROOT")}


def _train(np, *args):
    cmd = [MPIRUN, "-np", str(np)] + MPIRUN_FLAGS + [sys.executable, TRAIN, "--threads", "1"] + list(args)
    return subprocess.run(cmd, env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=240)


@pytest.mark.parametrize("adasum", [False, True], ids=["average", "adasum"])
def test_train_learns(adasum):
    p = _train(2, "--epochs", "3", *(["--use-adasum"] if adasum else []))
    assert p.returncode == 0, p.stdout
    header = re.search(r"sgd lr=([0-9.]+), .* (Adasum|Average), device cpu", p.stdout)
    assert header, p.stdout
    # Horovod's convention: lr x size when averaging, not with Adasum (SGD's default 0.02).
    assert float(header.group(1)) == pytest.approx(0.02 if adasum else 0.04), p.stdout
    assert header.group(2) == ("Adasum" if adasum else "Average"), p.stdout
    accuracies = [float(a) for a in re.findall(r"accuracy ([0-9.]+)", p.stdout)]
    assert len(accuracies) == 3, p.stdout
    # Ten classes (chance: 0.1); both reached 0.80-0.81 after 3 epochs here.
    assert accuracies[-1] > 0.7, p.stdout


def test_train_adasum_needs_a_power_of_two():
    p = _train(3, "--epochs", "1", "--use-adasum")
    assert p.returncode != 0, p.stdout
    assert "power-of-two" in p.stdout, p.stdout
