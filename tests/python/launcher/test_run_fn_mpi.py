"""horovodlite.runner.run (Horovod's horovod.run) under mpirun: fn's return
values in rank order at np 1 and 3, mpirun as the default controller where it is
found, and an exception on one rank raised in the caller naming it."""

import os
import shutil
import sys

import pytest

cloudpickle = pytest.importorskip("cloudpickle", reason="cloudpickle is not installed (ci/setup_venv.sh installs it)")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_run_fn_gloo as fns  # noqa: E402
from horovodlite.runner import run  # noqa: E402

if shutil.which("mpirun") is None or os.environ.get("HVL_EXPECT_MPI") == "0":
    pytest.skip("needs mpirun and a build with MPI", allow_module_level=True)
cloudpickle.register_pickle_by_value(fns)


@pytest.mark.parametrize("np", [1, 3])
def test_results_in_rank_order(np):
    assert run(fns.identity, args=(1,), kwargs={"b": 2}, np=np, use_mpi=True) == [(r, None, 3) for r in range(np)]


def test_mpi_is_the_default_and_collectives_run():
    results = run(fns.train_step, args=(1,), np=3)
    assert results == [(r, 3, 6.0) for r in range(3)]
    import horovodlite.torch as hvd
    assert run(lambda: hvd.init() or hvd.mpi_enabled(), np=1) == [True]


def test_exception_names_rank_and_ends_the_others():
    fns.check_exception_names_rank(use_mpi=True)
