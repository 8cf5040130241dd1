"""Every test module runs on every rank of an mpirun job; horovodlite is
initialised once per process. Tests must issue collectives in the same order
on every rank (pytest's collection order is deterministic)."""


import os

import horovodlite.torch as hvd
import pytest
import torch

torch.set_num_threads(1)


def pytest_configure(config):
    hvd.init()
    if hvd.rank() != 0:
        # Only rank 0 reports progress; other ranks still report failures.
        config.option.verbose = -2


def pytest_unconfigure(config):
    if hvd.is_initialized():
        hvd.shutdown()


@pytest.fixture
def rank():
    return hvd.rank()


@pytest.fixture
def size():
    return hvd.size()


def _background_thread_cpus():
    """The CPU sets of the threads named "horovodlite" (the background thread)."""
    found = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != "horovodlite":
                    continue
            with open(f"/proc/self/task/{tid}/status") as f:
                status = f.read()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        line = next(x for x in status.splitlines() if x.startswith("Cpus_allowed_list:"))
        cpus = set()
        for part in line.split(":", 1)[1].strip().split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
        found.append(cpus)
    return found


@pytest.fixture
def background_thread_cpus():
    return _background_thread_cpus
