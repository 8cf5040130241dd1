"""hvd.ZeroRedundancyOptimizer on every rank of an mpirun job: horovodlite is
initialised once per process, with dynamic process sets (a checkpoint saved
on a subset of the ranks is loaded on all of them: another world size).
Tests issue collectives in the same order on every rank."""

import os

import horovodlite.torch as hvd
import torch

torch.set_num_threads(1)


def pytest_configure(config):
    os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
    hvd.init()
    if hvd.rank() != 0:
        config.option.verbose = -2


def pytest_unconfigure(config):
    if hvd.is_initialized():
        hvd.shutdown()
