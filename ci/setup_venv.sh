#!/usr/bin/env bash
# Creates the Python venv that the default build (HVL_TORCH=pypi) uses, when it is
# missing or lacks a package: PyTorch from PyPI (its wheel also carries LibTorch:
# headers, libraries and the CMake package) plus what the build and tests need.
# A no-op for HVL_TORCH=debian. Safe to run again.
set -euo pipefail
source "$(dirname "$0")/env.sh"
[ "$HVL_TORCH" = pypi ] || exit 0
# The supported PyTorch 2.x release the default build pins.
HVL_TORCH_VERSION="${HVL_TORCH_VERSION:-2.13.0}"
# pyspark and ray: the engines horovodlite.spark / horovodlite.ray run on (tests/python/engine_spark, engine_ray).
# HVL_VENV_FOR=main (ci/main.sh): only PyTorch, which carries the LibTorch that train links.
if [ "${HVL_VENV_FOR:-tests}" = main ]; then
  EXTRA=()
else
  # ray[train], pandas and pyarrow: Ray Train's TorchTrainer and TorchDistributor's barrier mode
  # (tests/python/launchers); pandas below 3, which PySpark 4.3 does not fully support.
  EXTRA=(numpy pytest pybind11 setuptools wheel mpi4py ruff pyspark cloudpickle "ray[train]" lightning "pandas<3" pyarrow)
fi
PACKAGES=("torch==$HVL_TORCH_VERSION" "${EXTRA[@]}")
BASE_PYTHON="${HVL_BASE_PYTHON:-python3}"
if [ ! -x "$HVL_VENV/bin/python" ]; then
  echo "setup_venv: creating $HVL_VENV with $("$BASE_PYTHON" --version 2>&1) ($(command -v "$BASE_PYTHON"))"
  "$BASE_PYTHON" -m venv "$HVL_VENV"
fi
if "$HVL_VENV/bin/python" - "$HVL_TORCH_VERSION" "${EXTRA[@]}" <<'PY'
import re
import sys
import importlib.metadata as md
want = sys.argv[1]
try:
    ok = md.version("torch").split("+")[0] == want
    for p in sys.argv[2:]:
        md.version(re.split(r"[\[<>=]", p)[0])  # the distribution, without extras or bounds
except md.PackageNotFoundError:
    ok = False
sys.exit(0 if ok else 1)
PY
then
  echo "setup_venv: $HVL_VENV has torch $HVL_TORCH_VERSION${EXTRA[*]:+ and the test packages}"
  exit 0
fi
echo "setup_venv: installing ${PACKAGES[*]} into $HVL_VENV"
"$HVL_VENV/bin/python" -m pip install --quiet "${PACKAGES[@]}"
"$HVL_VENV/bin/python" -c "import torch; print('setup_venv: torch', torch.__version__, 'cxx11 abi', torch._C._GLIBCXX_USE_CXX11_ABI)"
