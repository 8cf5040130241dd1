"""hvd.init() under Ray Train (ray.train.torch.TorchTrainer) on a real local Ray:
one ray.init(num_cpus=2) for the module. Ray Train starts one actor per worker
and initialises torch.distributed (gloo, env://) in each before the training
loop; hvd.init() takes that group's rank, size and store, and the loop trains
with launch_train.train() (DistributedOptimizer) to one process's weights."""

import json
import os
import sys
import tempfile
import time

import pytest
from conftest import check_training, clean_env

pytest.importorskip("ray", reason="ray is not installed (ci/setup_venv.sh installs it)")
try:
    import ray.train
    from ray.train.torch import TorchTrainer
except ImportError as e:  # ray without ray[train]'s dependencies (pandas, pyarrow, pydantic)
    pytest.skip("Ray Train cannot be imported: %s" % e, allow_module_level=True)

import launch_train  # noqa: E402
from ray import cloudpickle  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray[.]")  # Ray's own, at import

# Ray's workers cannot import this directory's modules: send them whole.
cloudpickle.register_pickle_by_value(launch_train)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

# Ray Train's controller polls its workers every 2 s by default and starts side
# actors (preemption watcher, state reconciliation): poll often, start none.
# RAY_TRAIN_* set in the driver reach the controller and the workers.
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2",
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_ENABLE_STATE_ACTOR_RECONCILIATION": "0",
    "RAY_TRAIN_METRICS_ENABLED": "0",
}


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    saved = dict(os.environ)
    env = clean_env(**RAY_ENV)  # no enclosing launcher's variables in Ray's processes
    os.environ.clear()
    os.environ.update(env)
    t = time.monotonic()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": env.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}})
    print("\nray.init(num_cpus=2) in %.1f s" % (time.monotonic() - t))
    yield
    ray.shutdown()
    os.environ.clear()
    os.environ.update(saved)


def train_loop_per_worker(config):
    t0 = time.time()
    import torch
    import torch.distributed as dist
    dist.all_reduce(torch.ones(1))  # Ray Train's group, up before the loop
    plain_s = time.time() - t0
    out = launch_train.train()  # hvd.init() ... hvd.shutdown()
    ctx = ray.train.get_context()
    out.update(plain_s=plain_s, world_rank=ctx.get_world_rank(), world_size=ctx.get_world_size(),
               local_world_rank=ctx.get_local_rank())
    ranks = [None] * ctx.get_world_size()
    dist.all_gather_object(ranks, out)  # Ray Train's group still works after hvd.shutdown()
    with tempfile.TemporaryDirectory() as d:
        checkpoint = None
        if ctx.get_world_rank() == 0:  # Ray Train keeps the metrics that come with a checkpoint
            with open(os.path.join(d, "ranks.json"), "w") as f:
                json.dump(ranks, f)
            checkpoint = ray.train.Checkpoint.from_directory(d)
        ray.train.report({"ranks": ranks}, checkpoint=checkpoint)


def test_torch_trainer(tmp_path):
    trainer = TorchTrainer(train_loop_per_worker, scaling_config=ray.train.ScalingConfig(num_workers=2, use_gpu=False),
                           run_config=ray.train.RunConfig(storage_path=str(tmp_path), name="hvl"))
    t = time.monotonic()
    result = trainer.fit()
    took = time.monotonic() - t
    assert result.error is None, result.error
    ranks = result.metrics["ranks"]
    print("\nRay Train: fit() %.1f s; train_loop_per_worker start -> first torch.distributed all_reduce done "
          "(the group Ray Train made): %s; -> first hvd.allreduce done (after it, hvd.init() included): %s"
          % (took, ", ".join("rank %d %.3f s" % (r["rank"], r["plain_s"]) for r in ranks),
             ", ".join("rank %d %.3f s" % (r["rank"], r["started_s"]) for r in ranks)))
    assert [r["world_rank"] for r in ranks] == [0, 1]
    check_training(ranks)
    for r in ranks:
        assert r["rank"] == r["world_rank"] and r["size"] == r["world_size"] == 2
        assert r["gloo"]
        # Ray Train sets torchrun's variables too (no GROUP_RANK: NODE_RANK).
        assert r["env"]["RANK"] == str(r["rank"]) and r["env"]["WORLD_SIZE"] == "2"
        assert r["local_rank"] == r["local_world_rank"] and str(r["local_rank"]) == r["env"]["LOCAL_RANK"]
        assert (r["local_size"], r["cross_rank"], r["cross_size"]) == (2, 0, 1)
    with open(os.path.join(result.checkpoint.path, "ranks.json")) as f:
        assert [r["weights"] for r in json.load(f)] == [r["weights"] for r in ranks]
