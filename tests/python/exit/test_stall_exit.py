"""A rank stuck in user code must not hang the job (issue 15).

Runs stall_job.py under its own mpirun (3 ranks) with a 6 s stall shutdown: the
waiting ranks get HorovodInternalError naming the tensor and the missing rank,
and then, whether the exception propagates or the script catches it and ends
normally, the whole job must end, non-zero, with the message on stderr. Before
the fix, the waiting ranks blocked at exit in MPI_Finalize until the sleeping
rank woke up (600 s), so mpirun never ended the job.
"""

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from horovodlite.runner import mpi_flags

MPIRUN = os.environ.get("HVL_TEST_MPIRUN", "mpirun")
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stall_job.py")
# From the rank falling asleep: 6 s of stall shutdown, then the job must end.
# Generous for a loaded machine; without the fix the job runs for 600 s.
BOUND_S = 60
STALL_TEXT = "tensor 'grad.stalled' was submitted by ranks [0, 1] but not by ranks [2]"


def _run_job(mode):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "HOROVODLITE_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1",
               HOROVODLITE_STALL_CHECK_TIME_SECONDS="2", HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS="6")
    cmd = [MPIRUN, "-np", "3"] + mpi_flags.JOB_FLAGS + mpi_flags.EXCLUSIONS + [sys.executable, JOB, mode]
    # A session of its own: on a hang, every process of the job is killed, not just mpirun.
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=BOUND_S + 120)
        hung = False
    except subprocess.TimeoutExpired:
        # SIGTERM first: mpirun then removes its session directory (a stale one can
        # trip a later job given the same pid); then whatever is left.
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        hung = True
    end = time.time()
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # ranks left behind, if any
    except ProcessLookupError:
        pass
    return proc.returncode, out, end, hung


@pytest.mark.parametrize("mode", ["propagate", "catch"])
def test_stuck_rank_ends_the_job(mode):
    rc, out, end, hung = _run_job(mode)
    assert not hung, "the job did not end:\n" + out
    assert rc != 0, out
    assert STALL_TEXT in out, out
    # The exit path says why it ends the job instead of exiting normally.
    assert "ending the whole job (MPI_Abort" in out, out
    asleep = re.search(r"FAILING_AT ([0-9.]+)", out)
    assert asleep, out
    elapsed = end - float(asleep.group(1))
    print("MEASURED: mode %s: job ended %.1f s after the rank fell asleep (exit %d)" % (mode, elapsed, rc))
    assert elapsed < BOUND_S, out
