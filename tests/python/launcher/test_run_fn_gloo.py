"""horovodlite.runner.run (Horovod's horovod.run) over Gloo: fn's return values
in rank order at np 1 and 3, an exception on one rank raised in the caller
naming it (the others ended), and the arguments it refuses. Runs in this process,
as a notebook calls it."""

import os
import sys
import time

import pytest

cloudpickle = pytest.importorskip("cloudpickle", reason="cloudpickle is not installed (ci/setup_venv.sh installs it)")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks cannot import this test module

from horovodlite.runner import RunError, run  # noqa: E402


def rank_of_env():
    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK"):
        if os.environ.get(name):
            return int(os.environ[name])
    return None


def identity(a, b=0):
    return rank_of_env(), os.environ.get("HOROVOD_CONTROLLER"), a + b


def train_step(a):
    import horovodlite.torch as hvd
    import torch
    hvd.init()
    if not hvd.gloo_enabled() and not hvd.mpi_enabled():
        return None
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + a)]), op=hvd.Sum).item()
    return hvd.rank(), hvd.size(), total


def fail_on(bad_rank):
    if rank_of_env() == bad_rank:
        raise ValueError("injected failure on rank %d" % bad_rank)
    time.sleep(60)  # ended by the launcher once bad_rank fails
    return "not ended"


def check_exception_names_rank(**launch):
    t0 = time.monotonic()
    with pytest.raises(RunError) as info:
        run(fail_on, args=(1,), np=3, **launch)
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.ranks == [1], str(err)
    assert "fn failed on rank 1" in str(err) and "injected failure on rank 1" in str(err)
    assert "Horovod detected that one or more processes exited with non-zero status" in str(err)
    assert "Traceback" in err.remote_traceback and "fail_on" in err.remote_traceback
    assert isinstance(err.__cause__, ValueError)
    assert time.monotonic() - t0 < 45, "the other ranks were not ended"


@pytest.mark.parametrize("np", [1, 3])
def test_results_in_rank_order(np):
    assert run(identity, args=(1,), kwargs={"b": 2}, np=np, use_gloo=True) == [(r, "gloo", 3) for r in range(np)]


def test_collectives_in_fn():
    import horovodlite.torch as hvd
    if not hvd.gloo_built():
        pytest.skip("horovodlite was built without Gloo (libgloo-dev)")
    assert run(train_step, args=(1,), np=3, use_gloo=True) == [(r, 3, 6.0) for r in range(3)]


def test_exception_names_rank_and_ends_the_others():
    check_exception_names_rank(use_gloo=True)


def test_refused_arguments():
    with pytest.raises(NotImplementedError, match="elastic jobs .*min_np, max_np"):
        run(identity, args=(0,), np=2, min_np=1, max_np=3)
    with pytest.raises(ValueError, match="hosts or hostfile"):
        run(identity, args=(0,), hosts="localhost:2", hostfile="/dev/null")
    with pytest.raises(ValueError, match="use_gloo and use_mpi"):
        run(identity, args=(0,), use_gloo=True, use_mpi=True)
    with pytest.raises(ValueError, match="-np 3 is more than the 2 slots"):
        run(identity, args=(0,), np=3, hosts="localhost:2", use_gloo=True)
    with pytest.raises(ValueError, match="np must be a positive int"):
        run(identity, args=(0,), np=0)
