"""Runs last (file order): shutdown, use after shutdown, and init again."""

import horovodlite.torch as hvd
import pytest
import torch
from horovodlite.common.exceptions import HorovodInternalError


def test_shutdown_then_reinit(size):
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(ValueError, match="not been initialized"):
        hvd.rank()
    with pytest.raises(HorovodInternalError):
        hvd.allreduce(torch.ones(2))
    hvd.init()
    assert hvd.is_initialized() and hvd.size() == size
    assert torch.allclose(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(size)))
