"""Helpers for the launcher tests: run horovodlite-run as a user would, and a
rank script that writes what it received to <outdir>/received.<rank>.json."""

import os
import subprocess
import sys

MPIRUN = os.environ.get("HVL_TEST_MPIRUN", "mpirun")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir))

# Each rank reports its environment as the library reads it (HOROVODLITE_*),
# the Open MPI settings that reached it, where it ran and an allreduce result.
# Each rank writes its own file: mpirun may interleave the ranks' stdout.
REPORT_SCRIPT = """\
import json, os, socket, sys, torch
import horovodlite.torch as hvd
hvd.init()
total = hvd.allreduce(torch.ones(1), op=hvd.Sum).item()
received = {
    "rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
    "cross_rank": hvd.cross_rank(), "cross_size": hvd.cross_size(), "sum": total,
    "hostname": socket.gethostname(), "argv": sys.argv[1:],
    "env": {k: v for k, v in os.environ.items()
            if k.startswith(("HOROVODLITE_", "NCCL_", "HVL_")) or k in (
                "OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include", "OMPI_MCA_plm_rsh_args")},
}
with open(os.path.join(sys.argv[1], "received.%d.json" % hvd.rank()), "w") as f:
    json.dump(received, f)
hvd.shutdown()
"""


def clean_env(**extra):
    # Never inherit an enclosing MPI job's variables (or the caller's settings).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "HOROVODLITE_", "HOROVOD_"))}
    env.update(extra)
    return env


def launch(options, command, env=None, timeout=180):
    """horovodlite-run OPTIONS COMMAND; returns the CompletedProcess (output in .stdout)."""
    cmd = [sys.executable, "-m", "horovodlite.run", "--mpirun", MPIRUN] + list(options) + list(command)
    return subprocess.run(cmd, env=env or clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


def report_command(tmp_path):
    script = tmp_path / "report.py"
    script.write_text(REPORT_SCRIPT)
    return [sys.executable, str(script), str(tmp_path)]


def read_reports(tmp_path, np):
    import json
    reports = []
    for r in range(np):
        with open(os.path.join(str(tmp_path), "received.%d.json" % r)) as f:
            reports.append(json.load(f))
    return reports
