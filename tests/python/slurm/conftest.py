"""The Slurm suite's fixtures: one cluster for the session (slurm_cluster.py),
and the launcher tests' helpers (../launchers/conftest.py, loaded as
launchers_conftest so that its name does not clash with this file's)."""

import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

_spec = importlib.util.spec_from_file_location("launchers_conftest",
                                               os.path.join(HERE, os.pardir, "launchers", "conftest.py"))
launchers_conftest = importlib.util.module_from_spec(_spec)
sys.modules["launchers_conftest"] = launchers_conftest
_spec.loader.exec_module(launchers_conftest)

import slurm_cluster  # noqa: E402


@pytest.fixture(scope="session")
def slurm():
    """A running one-node Slurm (a SlurmCluster); skips, saying why, where it cannot run."""
    reason = slurm_cluster.unavailable()
    if reason:
        pytest.skip(reason)
    with slurm_cluster.SlurmCluster() as cluster:
        yield cluster
