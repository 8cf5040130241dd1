"""Process-set tests: each test initialises horovodlite itself (init with
process_sets=..., with and without dynamic process sets), on every rank."""

import os

import horovodlite.torch as hvd
import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture
def dynamic():
    """horovodlite initialised with dynamic process sets; shut down after."""
    os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
    hvd.init()
    yield
    # Ranks outside a test's set finish early: wait for the members before the
    # (collective) shutdown, which would otherwise end their ops.
    hvd.barrier()
    hvd.shutdown()
    del os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"]


def pytest_configure(config):
    from mpi4py import MPI
    if MPI.COMM_WORLD.Get_rank() != 0:
        config.option.verbose = -2
