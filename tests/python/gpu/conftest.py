"""GPU tests of horovodlite.torch: every rank of the mpirun job runs them, each
on the GPU of its local rank. Skipped (with the reason) without a CUDA device,
without a PyTorch that has CUDA, or with a horovodlite built without CUDA.
More ranks than GPUs on a node need HOROVODLITE_GPU_OPERATIONS=mpi (NCCL needs
one GPU per rank); the ctest entries set it where that is so."""

import horovodlite.torch as hvd
import pytest
import torch


def gpu_skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA device (or a PyTorch without CUDA)"
    if not hvd.cuda_built():
        return "horovodlite was built without CUDA"
    return None


def pytest_configure(config):
    hvd.init(process_sets="dynamic")  # test_process_set_allreduce adds one
    if gpu_skip_reason() is None:
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    if hvd.rank() != 0:
        config.option.verbose = -2


def pytest_unconfigure(config):
    if hvd.is_initialized():
        hvd.shutdown()


def pytest_collection_modifyitems(config, items):
    reason = gpu_skip_reason()
    if reason is None:
        return
    if hvd.rank() == 0:
        print("HVL_GPU_TESTS_SKIPPED: " + reason, flush=True)
    for item in items:
        item.add_marker(pytest.mark.skip(reason=reason))
