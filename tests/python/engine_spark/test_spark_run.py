"""horovodlite.spark.run on a real local Spark (pyspark from PyPI, Java 17): one
SparkSession (local[3]) for the module; every job is a real barrier stage whose
tasks start their ranks with the Gloo-launch contract's environment."""

import os
import shutil
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "engines"))
import engine_training as et  # noqa: E402

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (ci/setup_venv.sh installs it)")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("pyspark needs Java (no java on PATH, no JAVA_HOME)", allow_module_level=True)

import horovodlite.spark  # noqa: E402

cloudpickle = pytest.importorskip("cloudpickle", reason="cloudpickle is not installed (ci/setup_venv.sh installs it)")

cloudpickle.register_pickle_by_value(et)

SLOTS = 3


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the tasks' Python: the one with this build's horovodlite
    session = (SparkSession.builder.master("local[%d]" % SLOTS).appName("horovodlite-spark-tests")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.mark.parametrize("np", [2, 3])
def test_ranks_and_contract_env(spark, np):
    results = horovodlite.spark.run(et.identity, num_proc=np, env={"HVL_TEST_EXTRA": "x"}, verbose=0)
    assert [int(r["HOROVOD_RANK"]) for r in results] == list(range(np))
    for rank, r in enumerate(results):
        assert r["HOROVOD_CONTROLLER"] == "gloo" and r["HOROVOD_CPU_OPERATIONS"] == "gloo"
        assert r["HOROVOD_SIZE"] == str(np) and r["HOROVOD_LOCAL_SIZE"] == str(np)
        assert r["HOROVOD_LOCAL_RANK"] == str(rank)
        assert r["HOROVOD_CROSS_RANK"] == "0" and r["HOROVOD_CROSS_SIZE"] == "1"
        assert r["HOROVOD_GLOO_RENDEZVOUS_ADDR"] and int(r["HOROVOD_GLOO_RENDEZVOUS_PORT"]) > 0
        assert r["HVL_TEST_EXTRA"] == "x"


def test_default_num_proc_and_args(spark):
    def fn(a, b=0):
        return int(os.environ["HOROVOD_RANK"]) * 10 + a + b
    assert horovodlite.spark.run(fn, args=(1,), kwargs={"b": 2}, verbose=0) == [3 + 10 * r for r in range(SLOTS)]


@pytest.mark.parametrize("np", [2, 3])
def test_distributed_optimizer_training(spark, np):
    reason = et.gloo_core_missing()
    if reason:
        pytest.skip(reason)
    results = horovodlite.spark.run(et.train, kwargs={"steps": 5}, num_proc=np, verbose=0)
    et.check_training(results, np, steps=5)


def test_exception_names_rank_and_ends_the_others(spark, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(horovodlite.spark.SparkJobError) as info:
        horovodlite.spark.run(et.fail_on, args=(1, str(tmp_path)), num_proc=3, verbose=0)
    err = info.value
    assert err.ranks == [1], str(err)
    assert "rank 1" in str(err) and "injected failure on rank 1" in str(err)
    assert isinstance(err.__cause__, ValueError)
    assert time.monotonic() - t0 < 120
    assert et.wait_pids_gone(str(tmp_path)) == [], "ranks left running after the failure"
    # The session is usable for the next job.
    assert [r["HOROVOD_RANK"] for r in horovodlite.spark.run(et.identity, num_proc=2, verbose=0)] == ["0", "1"]


def test_rank_dying_without_exception_is_named(spark, tmp_path):
    with pytest.raises(horovodlite.spark.SparkJobError, match=r"rank 0 .*exited with exit code 7") as info:
        horovodlite.spark.run(et.fail_on, args=(0, str(tmp_path), "exit"), num_proc=2, verbose=0)
    assert info.value.ranks == [0]
    assert et.wait_pids_gone(str(tmp_path)) == [], "ranks left running after the failure"


def test_start_timeout_says_how_many_started(spark):
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"0 of %d started" % (SLOTS + 1)):
        horovodlite.spark.run(et.identity, num_proc=SLOTS + 1, start_timeout=3, verbose=0)
    assert time.monotonic() - t0 < 60
    # The stage that never got its slots was cancelled: the next job runs.
    assert len(horovodlite.spark.run(et.identity, num_proc=SLOTS, verbose=0)) == SLOTS


def test_output_forwarded_by_rank(spark):
    import io
    out, err = io.StringIO(), io.StringIO()

    def fn():
        print("hello from %s" % os.environ["HOROVOD_RANK"])
        print("warning from %s" % os.environ["HOROVOD_RANK"], file=sys.stderr)
    horovodlite.spark.run(fn, num_proc=2, stdout=out, stderr=err, verbose=0)
    assert "[0]<stdout>:hello from 0" in out.getvalue() and "[1]<stdout>:hello from 1" in out.getvalue()
    assert "[1]<stderr>:warning from 1" in err.getvalue()


def test_mpi_refused(spark):
    with pytest.raises(ValueError, match="Gloo"):
        horovodlite.spark.run(et.identity, num_proc=2, use_mpi=True)
    with pytest.raises(ValueError, match="Gloo"):
        horovodlite.spark.run(et.identity, num_proc=2, extra_mpi_args="-x FOO")


class _Opens:
    """Unpickling this creates the file: the proof that a record was loaded."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_unsigned_records_are_refused_and_never_unpickled(spark, tmp_path):
    import pickle
    marker = tmp_path / "unpickled"

    def _knock(payload):
        # Rank 0 plays someone on the network who knows the store's address but not
        # the job's secret: unsigned PUTs of a pickle where the driver and the ranks
        # look for results and fn.
        import http.client
        statuses = []
        if os.environ["HOROVOD_RANK"] == "0":
            for path in ("/spark/result/0", "/spark/result/1", "/spark/fn", "/spark/failed/1"):
                conn = http.client.HTTPConnection(os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
                                                  int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]), timeout=10)
                conn.request("PUT", path, body=payload)
                statuses.append(conn.getresponse().status)
                conn.close()
        return int(os.environ["HOROVOD_RANK"]), statuses

    results = horovodlite.spark.run(_knock, args=(pickle.dumps(_Opens(str(marker))),), num_proc=2, verbose=0)
    assert results == [(0, [401, 401, 401, 401]), (1, [])], results
    assert not marker.exists()


_STUB_CLOUDPICKLE = '''
import pickle
__version__ = "0.0-stub"
dumps = pickle.dumps
def loads(data):
    raise AttributeError("Can't get attribute '_function_setstate' on <module 'cloudpickle.cloudpickle'>")
'''


def test_ranks_run_the_drivers_python(tmp_path):
    """Horovod's executable= default: a driver started as <venv>/bin/python whose
    Spark workers run PATH's python3 (another interpreter, without this venv's
    cloudpickle) still runs fn; an executable missing on the workers, or one that
    cannot unpickle what the driver pickled, is an error naming both."""
    other = "/usr/bin/python3"
    if not os.path.exists(other) or os.path.realpath(other) == os.path.realpath(sys.executable):
        pytest.skip("needs a python3 other than this one at %s" % other)
    import json
    import subprocess
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(other)
    stub = tmp_path / "stub"
    (stub / "cloudpickle").mkdir(parents=True)
    (stub / "cloudpickle" / "__init__.py").write_text(_STUB_CLOUDPICKLE)
    stub_python = tmp_path / "stub-python"
    stub_python.write_text('#!/bin/sh\nPYTHONPATH="%s:$PYTHONPATH" exec %s "$@"\n' % (stub, other))
    stub_python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = "%s:%s" % (bin_dir, env.get("PATH", "/usr/bin:/bin"))
    out = tmp_path / "report.json"
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver_python_job.py")
    proc = subprocess.run([sys.executable, job, str(out), str(stub_python)], env=env, timeout=300,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0 and out.exists(), proc.stdout[-4000:]
    report = json.loads(out.read_text())
    assert report["worker"] == "python3", report
    assert report["default"] == {"ok": [sys.executable, sys.executable]}, report
    missing = report["missing"]["error"]
    assert "no-such-python does not exist" in missing, missing
    assert "whose Spark worker runs %s (Python" % (bin_dir / "python3") in missing, missing
    assert "the driver runs %s (Python" % sys.executable in missing, missing
    mismatch = report["mismatch"]["error"]
    assert "_function_setstate" in mismatch and "cannot unpickle the function that the driver's Python" in mismatch
    assert sys.executable in mismatch and "cloudpickle 0.0-stub" in mismatch, mismatch
