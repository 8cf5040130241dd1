"""horovodlite.ray.RayExecutor on a real local Ray (ray from PyPI): one
ray.init(num_cpus=3) for the module; workers are real actors that get the
Gloo-launch contract's environment."""

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "engines"))
import engine_training as et  # noqa: E402

ray = pytest.importorskip("ray", reason="ray is not installed (ci/setup_venv.sh installs it)")

from horovodlite.ray import RayExecutor, RayJobError  # noqa: E402
from ray import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(et)

CPUS = 3


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    ray.init(num_cpus=CPUS, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    yield
    ray.shutdown()


def executor(np, **settings):
    ex = RayExecutor(RayExecutor.create_settings(**{"timeout_s": 60, **settings}), num_workers=np, cpus_per_worker=1)
    ex.start()
    return ex


@pytest.mark.parametrize("np", [2, 3])
def test_ranks_env_and_several_functions(np):
    ex = executor(np)
    try:
        ids = ex.run(et.identity)
        assert [int(r["HOROVOD_RANK"]) for r in ids] == list(range(np))
        for rank, r in enumerate(ids):
            assert r["HOROVOD_CONTROLLER"] == "gloo" and r["HOROVOD_SIZE"] == str(np)
            assert r["HOROVOD_LOCAL_RANK"] == str(rank) and r["HOROVOD_LOCAL_SIZE"] == str(np)
            assert r["HOROVOD_CROSS_SIZE"] == "1" and int(r["HOROVOD_GLOO_RENDEZVOUS_PORT"]) > 0
        # The same actors run the next functions, and keep their state.
        pids = ex.run(os.getpid)
        assert ex.run(lambda k: os.getpid() + k, args=(0,)) == pids
        ex.run(lambda: setattr(sys, "_hvl_test_state", int(os.environ["HOROVOD_RANK"]) + 100))
        assert ex.run(lambda: sys._hvl_test_state) == [100 + r for r in range(np)]
        assert ex.execute(lambda executable: executable) == [None] * np
    finally:
        ex.shutdown()


def test_executable_cls_and_num_hosts():
    class Trainer:
        def __init__(self, base):
            self.base = base

        def value(self):
            return self.base + int(os.environ["HOROVOD_RANK"])
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_hosts=1, num_workers_per_host=2)
    ex.start(executable_cls=Trainer, executable_args=(10,), extra_env_vars={"HVL_TEST_EXTRA": "y"})
    try:
        assert ex.execute(lambda t: t.value()) == [10, 11]
        assert ex.execute_single(lambda t: t.value()) == 10
        assert [r["HVL_TEST_EXTRA"] for r in ex.run(et.identity)] == ["y", "y"]
    finally:
        ex.shutdown()


@pytest.mark.parametrize("np", [2, 3])
def test_distributed_optimizer_training(np):
    reason = et.gloo_core_missing()
    if reason:
        pytest.skip(reason)
    ex = executor(np)
    try:
        et.check_training(ex.run(et.train, kwargs={"steps": 5}), np, steps=5)
        # A second job on the same workers (horovodlite stays initialised).
        et.check_training(ex.run(et.train, kwargs={"steps": 3, "seed": 7}), np, steps=3, seed=7)
    finally:
        ex.shutdown()


def test_exception_names_rank_and_ends_the_workers(tmp_path):
    ex = executor(3)
    t0 = time.monotonic()
    with pytest.raises(RayJobError) as info:
        ex.run(et.fail_on, args=(2, str(tmp_path)))
    assert info.value.ranks == [2], str(info.value)
    assert "rank 2" in str(info.value) and "injected failure on rank 2" in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)
    assert time.monotonic() - t0 < 60
    assert not ex.workers, "stuck workers must be shut down"
    assert et.wait_pids_gone(str(tmp_path)) == [], "workers left running after the failure"
    # A failure that leaves the others free keeps the workers.
    ex.start()
    with pytest.raises(RayJobError, match="rank 0"):
        ex.run(lambda: 1 / int(os.environ["HOROVOD_RANK"]))
    assert ex.workers and ex.run(lambda: 5) == [5, 5, 5]
    ex.shutdown()


def test_worker_dying_without_exception_is_named(tmp_path):
    ex = executor(2)
    with pytest.raises(RayJobError, match="rank 1") as info:
        ex.run(et.fail_on, args=(1, str(tmp_path), "exit"))
    assert info.value.ranks == [1]
    assert not ex.workers, "the blocked worker must be shut down"
    assert et.wait_pids_gone(str(tmp_path)) == [], "workers left running after the failure"


def test_second_executor_in_the_same_ray_session():
    for _ in range(2):
        ex = executor(2)
        try:
            assert [r["HOROVOD_RANK"] for r in ex.run(et.identity)] == ["0", "1"]
        finally:
            ex.shutdown()


def test_start_timeout_says_how_many_started():
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=60, placement_group_timeout_s=3), num_workers=CPUS + 1)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"0 of %d workers started" % (CPUS + 1)):
        ex.start()
    assert time.monotonic() - t0 < 30
    assert not ex.workers
    ex = executor(CPUS)  # the reservation was released
    ex.shutdown()


def test_bad_arguments():
    # Elastic arguments (min_workers/max_workers): test_ray_elastic.py.
    with pytest.raises(ValueError, match="num_workers or num_hosts"):
        RayExecutor(RayExecutor.create_settings())
    with pytest.raises(RuntimeError, match="not started"):
        RayExecutor(RayExecutor.create_settings(), num_workers=2).run(et.identity)
