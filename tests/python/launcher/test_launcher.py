"""horovodlite-run: option mapping and exit-code forwarding (runs mpirun itself)."""

import os
import subprocess
import sys

import pytest
from horovodlite.runner import mpi_flags, mpi_run

from horovodlite import run

MPIRUN = os.environ.get("HVL_TEST_MPIRUN", "mpirun")


def _clean_env():
    # Never inherit an enclosing MPI job's variables.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "HOROVODLITE_"))}
    return env


def _launch(tmp_path, script, *options):
    path = tmp_path / "job.py"
    path.write_text(script)
    cmd = [sys.executable, "-m", "horovodlite.run", "-np", "2", "--mpirun", MPIRUN] + list(options) + \
          [sys.executable, str(path)]
    return subprocess.run(cmd, env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120)


def test_options_map_to_environment():
    args = run.make_parser().parse_args(
        ["-np", "3", "--fusion-threshold-mb", "2", "--cycle-time-ms", "2.5", "--cache-capacity", "7",
         "--timeline-filename", "tl.json", "--verbose", "python3", "x.py", "--flag"])
    env = run.job_environment(args)
    assert env["HOROVODLITE_FUSION_THRESHOLD"] == str(2 * 1024 * 1024)
    assert env["HOROVODLITE_CYCLE_TIME"] == "2.5"
    assert env["HOROVODLITE_CACHE_CAPACITY"] == "7"
    assert env["HOROVODLITE_TIMELINE"] == os.path.abspath("tl.json")
    assert env["HOROVODLITE_LOG_LEVEL"] == "debug"
    cmd = mpi_run.mpirun_command(args, env)
    assert cmd[:3] == ["mpirun", "-np", "3"] and cmd[-3:] == ["python3", "x.py", "--flag"]
    flags = mpi_flags.JOB_FLAGS  # --oversubscribe, --bind-to none, yield when idle
    assert any(cmd[i:i + len(flags)] == flags for i in range(len(cmd))), cmd
    assert "HOROVODLITE_CACHE_CAPACITY=7" in cmd


def test_bad_options_fail():
    with pytest.raises(SystemExit):
        run.make_parser().parse_args(["-np", "0", "true"])
    with pytest.raises(SystemExit):
        run.main(["-np", "2", "--mpirun", MPIRUN])


def test_job_runs_and_sees_options(tmp_path):
    # each rank writes its own file: mpirun may interleave the ranks' stdout
    script = (
        "import os, torch, horovodlite.torch as hvd\n"
        "hvd.init()\n"
        "s = hvd.allreduce(torch.ones(1), op=hvd.Sum).item()\n"
        "line = 'rank %d of %d sum %s cache %s fusion %s' % (hvd.rank(), hvd.size(), s,\n"
        "    os.environ['HOROVODLITE_CACHE_CAPACITY'], os.environ['HOROVODLITE_FUSION_THRESHOLD'])\n"
        "open(os.path.join(OUTDIR, 'out.%d' % hvd.rank()), 'w').write(line)\n"
        "hvd.shutdown()\n").replace("OUTDIR", repr(str(tmp_path)))
    out = _launch(tmp_path, script, "--cache-capacity", "16", "--fusion-threshold-mb", "1")
    assert out.returncode == 0, out.stdout
    for r in range(2):
        text = (tmp_path / ("out.%d" % r)).read_text()
        assert text == "rank %d of 2 sum 2.0 cache 16 fusion 1048576" % r, text


def test_exit_code_is_forwarded(tmp_path):
    script = (
        "import sys, horovodlite.torch as hvd\n"
        "hvd.init()\n"
        "code = 3 if hvd.rank() == 1 else 0\n"
        "hvd.shutdown()\n"
        "sys.exit(code)\n")
    out = _launch(tmp_path, script)
    assert out.returncode == 3, out.stdout
