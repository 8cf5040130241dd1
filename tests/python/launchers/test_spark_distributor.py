"""hvd.init() under Spark's TorchDistributor (pyspark.ml.torch.distributor) on a
real local Spark: one SparkSession for the module, local[2] (HVL_TEST_SPARK_MASTER
names another, e.g. local-cluster[2,1,1024]). TorchDistributor starts torchrun
itself: local_mode=True on the driver (torchrun --standalone, 2 processes);
local_mode=False in a barrier stage whose every task is one torchrun node
(--nnodes 2 --node_rank <partition>, rendezvous at the first task's address).
train_fn trains with launch_train.train(): TorchDistributor returns rank 0's
result, and every rank leaves its own in rank<R>.json."""

import json
import os
import shutil
import sys
import time

import pytest
from conftest import check_training, clean_env, read_ranks

pytest.importorskip("pyspark", reason="pyspark is not installed (ci/setup_venv.sh installs it)")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("pyspark needs Java (no java on PATH, no JAVA_HOME)", allow_module_level=True)

import launch_train  # noqa: E402
from pyspark import cloudpickle  # noqa: E402  (the copy TorchDistributor pickles train_fn with)

# torchrun's processes cannot import this directory's modules: send them whole.
cloudpickle.register_pickle_by_value(launch_train)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession
    saved = dict(os.environ)
    # TorchDistributor's torchrun inherits the driver's environment (and Spark's
    # executors the JVM's): no enclosing launcher's variables; the tasks' Python
    # is the one with this build's horovodlite; Spark on the loopback address.
    env = clean_env(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    os.environ.clear()
    os.environ.update(env)
    master = os.environ.get("HVL_TEST_SPARK_MASTER") or "local[2]"
    t = time.monotonic()
    session = (SparkSession.builder.master(master).appName("horovodlite-torch-distributor-tests")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    print("\nSparkSession(%s) in %.1f s" % (master, time.monotonic() - t))
    yield session
    session.stop()
    os.environ.clear()
    os.environ.update(saved)


def train_fn(out_dir):
    t0 = time.time()
    import torch  # noqa: F401  (timed apart: the rest of started_s is horovodlite's)
    import_torch_s = time.time() - t0
    out = launch_train.train()
    out["import_torch_s"] = import_torch_s
    with open(os.path.join(out_dir, "rank%d.json" % out["rank"]), "w") as f:
        json.dump(out, f)
    return out


def run(tmp_path, local_mode):
    from pyspark.ml.torch.distributor import TorchDistributor
    t = time.monotonic()
    returned = TorchDistributor(num_processes=2, local_mode=local_mode, use_gpu=False).run(train_fn, str(tmp_path))
    took = time.monotonic() - t
    results = read_ranks(tmp_path, 2)
    print("\nTorchDistributor(local_mode=%s): run() %.1f s; train_fn start -> first hvd.allreduce done: %s"
          % (local_mode, took, ", ".join("rank %d %.3f s (import torch %.3f s, then %.3f s)"
                                          % (r["rank"], r["import_torch_s"] + r["started_s"], r["import_torch_s"],
                                             r["started_s"]) for r in results)))
    # What TorchDistributor returns is rank 0's train_fn result.
    assert returned["rank"] == 0 and returned["size"] == 2, returned
    assert returned["gloo"]
    check_training([returned])
    assert returned["weights"] == results[0]["weights"]
    check_training(results)
    for res in results:
        assert res["gloo"]
        assert str(res["rank"]) == res["env"]["RANK"]
        assert str(res["local_rank"]) == res["env"]["LOCAL_RANK"]
    return results


def test_local_mode(spark, tmp_path):
    """torchrun --standalone --nproc_per_node 2 on the driver: one node of two."""
    for res in run(tmp_path, local_mode=True):
        assert res["env"]["GROUP_RANK"] == "0"
        assert (res["local_size"], res["cross_rank"], res["cross_size"]) == (2, 0, 1)


def test_barrier_tasks(spark, tmp_path):
    """A barrier stage of two tasks, each one torchrun node of one process."""
    from pyspark.sql.pandas.utils import require_minimum_pandas_version, require_minimum_pyarrow_version
    try:
        require_minimum_pandas_version()
        require_minimum_pyarrow_version()
    except ImportError as e:
        pytest.skip("TorchDistributor(local_mode=False) runs its barrier tasks through DataFrame.mapInArrow, which "
                    "needs pandas and pyarrow: %s" % e)
    for res in run(tmp_path, local_mode=False):
        # Two torchrun nodes (GROUP_RANK = the task's partition), one process each.
        assert res["local_rank"] == 0 and res["local_size"] == 1
        assert res["cross_size"] == 2 and str(res["cross_rank"]) == res["env"]["GROUP_RANK"]
