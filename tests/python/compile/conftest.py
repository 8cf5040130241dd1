"""The compile tests run like the tests in ../mpi (every rank of an mpirun job,
horovodlite initialised once per process): they use that directory's conftest,
its hooks and fixtures, rather than a copy of it."""

import importlib.util
import pathlib

_spec = importlib.util.spec_from_file_location(
    "hvl_mpi_conftest", pathlib.Path(__file__).resolve().parent.parent / "mpi" / "conftest.py")
_mpi_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mpi_conftest)

pytest_configure = _mpi_conftest.pytest_configure
pytest_unconfigure = _mpi_conftest.pytest_unconfigure
rank = _mpi_conftest.rank
size = _mpi_conftest.size
