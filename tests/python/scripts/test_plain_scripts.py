"""Plain Horovod scripts (no hvd.shutdown(), as in all of Horovod's examples)
run under mpirun (started here, like the launcher tests) and exit quietly: the
runtime is shut down at interpreter exit, as Horovod does."""

import os
import subprocess
import sys

import pytest
from horovodlite.runner import mpi_flags

MPIRUN = os.environ.get("HVL_TEST_MPIRUN", "mpirun")
# Open MPI 4.1's OFI components can hang MPI_Init (docs/reliability.md): left out, as the suite does.
MPIRUN_FLAGS = mpi_flags.JOB_FLAGS + mpi_flags.EXCLUSIONS


def _clean_env():
    # Never inherit an enclosing MPI job's variables (but keep mpirun's run-as-root permission).
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OMPI_", "PMIX_", "HOROVODLITE_", "HOROVOD_"))
            or k.startswith("OMPI_ALLOW_RUN_AS_ROOT")}


def _run(tmp_path, np, script):
    path = tmp_path / "job.py"
    path.write_text("OUTDIR = %r\n" % str(tmp_path) + script)
    cmd = [MPIRUN, "-np", str(np)] + MPIRUN_FLAGS + [sys.executable, str(path)]
    return subprocess.run(cmd, env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120)


def _outputs(tmp_path, np):
    return [(tmp_path / ("out.%d" % r)).read_text() for r in range(np)]


@pytest.mark.parametrize("np", [2, 3])
def test_script_without_shutdown_exits_quietly(tmp_path, np):
    script = (
        "import os, torch, horovodlite.torch as hvd\n"
        "hvd.init()\n"
        "model = torch.nn.Linear(3, 2)\n"
        "opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),\n"
        "                               named_parameters=model.named_parameters())\n"
        "hvd.broadcast_parameters(model.state_dict(), root_rank=0)\n"
        "model(torch.ones(4, 3)).sum().backward()\n"
        "opt.step()\n"
        "s = hvd.allreduce(torch.ones(1), op=hvd.Sum).item()\n"
        "open(os.path.join(OUTDIR, 'out.%d' % hvd.rank()), 'w').write('sum %s' % s)\n"
        "# no hvd.shutdown(): as in Horovod's examples\n")
    p = _run(tmp_path, np, script)
    assert p.returncode == 0, p.stdout
    assert "exiting without" not in p.stdout, p.stdout
    assert "warning" not in p.stdout.lower(), p.stdout
    assert _outputs(tmp_path, np) == ["sum %s" % float(np)] * np


def test_rank_leaving_early_ends_the_others_ops(tmp_path):
    # The last rank leaves at once; the others' next op fails (it does not hang).
    script = (
        "import os, sys, torch, horovodlite.torch as hvd\n"
        "hvd.init()\n"
        "hvd.allreduce(torch.ones(1), name='first')\n"
        "if hvd.rank() == hvd.size() - 1:\n"
        "    open(os.path.join(OUTDIR, 'out.%d' % hvd.rank()), 'w').write('left')\n"
        "    sys.exit(0)\n"
        "try:\n"
        "    hvd.allreduce(torch.ones(1), name='second')\n"
        "    line = 'no error'\n"
        "except hvd.HorovodInternalError as e:\n"
        "    line = 'error: %s' % e\n"
        "open(os.path.join(OUTDIR, 'out.%d' % hvd.rank()), 'w').write(line)\n")
    p = _run(tmp_path, 3, script)
    assert p.returncode == 0, p.stdout
    out = _outputs(tmp_path, 3)
    assert out[2] == "left"
    for line in out[:2]:
        assert line.startswith("error:") and "2" in line, line
