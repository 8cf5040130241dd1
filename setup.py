"""Builds and installs the horovodlite Python package through CMake.

    .venv/bin/pip install --no-build-isolation .                # PyTorch 2.x in the venv
    /usr/bin/python3 -m pip install --no-build-isolation .      # Debian's PyTorch 1.13

It builds against the torch of the interpreter that runs it (its LibTorch: see
cmake/HvlTorch.cmake); torch, cmake and pybind11 must be installed first.

The extension module horovodlite/torch/_C is built by the project's CMake build
(with tests and benchmarks off) and installed beside the libhorovodlite and
libhorovodlite_torch shared libraries it needs (found through $ORIGIN).
Environment: HOROVODLITE_CMAKE_ARGS adds CMake arguments; MAX_JOBS sets the
parallel build jobs (default 2).
"""

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
# Keep setuptools' scratch files out of the developers' build/ directory.
BUILD_BASE = os.path.join(HERE, "build-pip")
os.makedirs(BUILD_BASE, exist_ok=True)


def read_version():
    """The version's one source: the three numbers in version.h."""
    with open(os.path.join(HERE, "horovodlite", "include", "horovodlite", "version.h")) as f:
        text = f.read()
    parts = [re.search(r"^#define HVL_VERSION_%s (\d+)$" % p, text, re.M) for p in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise RuntimeError("version.h has no HVL_VERSION_MAJOR/MINOR/PATCH lines")
    return ".".join(m.group(1) for m in parts)


VERSION = read_version()


class BuildPy(build_py):
    """Also writes horovodlite/_version.py (horovodlite.__version__)."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "horovodlite", "_version.py")
        with open(target, "w") as f:
            f.write('__version__ = "%s"\n' % VERSION)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        out_dir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        os.makedirs(build_dir, exist_ok=True)
        os.makedirs(out_dir, exist_ok=True)
        cfg = "Debug" if self.debug else "Release"
        args = [
            "-S", HERE, "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=" + cfg,
            "-DPython_EXECUTABLE=" + sys.executable,
            "-DHVL_BUILD_TESTS=OFF", "-DHVL_BUILD_BENCH=OFF", "-DHVL_WITH_TORCH=ON", "-DHVL_WITH_PYTHON=ON",
            # every library finds its siblings in its own directory once installed
            "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN",
        ] + shlex.split(os.environ.get("HOROVODLITE_CMAKE_ARGS", ""))
        subprocess.check_call(["cmake"] + args)
        jobs = os.environ.get("MAX_JOBS", "2")
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "horovodlite_python", "-j", jobs])
        built = os.path.join(build_dir, "python", "horovodlite", "torch")
        modules = glob.glob(os.path.join(built, "_C*.so"))
        if not modules:
            raise RuntimeError("the CMake build did not produce horovodlite/torch/_C")
        shutil.copy2(modules[0], self.get_ext_fullpath(ext.name))
        # horovodlite/_build.py: what the build holds (the launcher reads it).
        shutil.copy2(os.path.join(build_dir, "python", "horovodlite", "_build.py"), os.path.dirname(out_dir))
        # The libraries under the names the loader looks for (their sonames);
        # wheels cannot hold symlinks, so copy contents rather than links.
        libs = [os.path.join(build_dir, "adapters", "torch", "libhorovodlite_torch.so")]
        libs += [p for p in glob.glob(os.path.join(build_dir, "horovodlite", "libhorovodlite.so.*"))
                 if "." not in p.rsplit(".so.", 1)[1]]
        # The Gloo plugin the core loads from its own directory (when built with Gloo).
        libs += glob.glob(os.path.join(build_dir, "horovodlite", "libhorovodlite_gloo.so"))
        for lib in libs:
            if not os.path.exists(lib):
                raise RuntimeError("the CMake build did not produce " + lib)
            shutil.copy2(lib, os.path.join(out_dir, os.path.basename(lib)))

setup(
    name="horovodlite",
    version=VERSION,
    description="Horovod-style collective communication for PyTorch, on MPI",
    packages=find_packages(where="python"),
    package_dir={"": "python"},
    ext_modules=[CMakeExtension("horovodlite.torch._C")],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPy},
    entry_points={"console_scripts": ["horovodlite-run = horovodlite.run:main"]},
    python_requires=">=3.8",
    # horovodlite.spark / horovodlite.ray: pip install horovodlite[spark] / [ray]
    extras_require={"spark": ["pyspark", "cloudpickle"], "ray": ["ray"]},
    zip_safe=False,
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}},
)
