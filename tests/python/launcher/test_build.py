"""What the build holds, as the launcher, horovodlite.torch and --check-build
see it. ctest sets HVL_EXPECT_MPI from CMake's HVL_HAVE_MPI, so that the build
without MPI (HVL_WITH_MPI=OFF) and the default one are each checked against
what CMake decided."""

import os
import subprocess
import sys

import pytest

from horovodlite import run

EXPECT_MPI = os.environ.get("HVL_EXPECT_MPI")
pytestmark = pytest.mark.skipif(EXPECT_MPI is None, reason="HVL_EXPECT_MPI is set by ctest")


def test_the_launcher_reads_what_the_build_wrote():
    import horovodlite._build as build

    assert build.MPI is (EXPECT_MPI == "1")
    assert run.built_with_mpi() is (EXPECT_MPI == "1")


def test_the_module_says_the_same():
    import horovodlite.torch as hvd

    assert hvd.mpi_built() is (EXPECT_MPI == "1")
    assert hvd.gloo_built()


def test_check_build_marks_mpi_as_built_or_not():
    out = subprocess.run([sys.executable, "-m", "horovodlite.run", "--check-build"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    controller = next(line for line in out.stdout.splitlines() if "MPI:" in line)
    assert controller.strip().startswith("[X] MPI:" if EXPECT_MPI == "1" else "[ ] MPI:"), out.stdout
    if EXPECT_MPI != "1":
        assert "HVL_WITH_MPI=OFF" in controller
    assert "[X] Gloo" in out.stdout
