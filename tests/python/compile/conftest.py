"""Every test module runs on every rank of an mpirun job; horovodlite is
initialised once per process. Tests must issue collectives in the same order
on every rank (pytest's collection order is deterministic)."""


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
