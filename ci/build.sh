#!/usr/bin/env bash
# Configures and builds everything (core, LibTorch adapter, examples, Python
# module, benchmarks, tests) into $HVL_BUILD against the PyTorch that
# HVL_TORCH picks (ci/env.sh; default: PyTorch 2.x from PyPI in ./.venv, which
# ci/setup_venv.sh creates when missing). Extra arguments go to cmake.
# HVL_TARGETS (space-separated) builds only those targets and what they need.
set -euo pipefail
source "$(dirname "$0")/env.sh"
bash "$HVL_ROOT/ci/setup_venv.sh"
# The two torch builds share the core's object files through ccache.
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
fi
# HVL_WERROR=OFF builds with warnings allowed (a newer compiler may warn where this one does not).
cmake -S "$HVL_ROOT" -B "$HVL_BUILD" -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$HVL_PYTHON" \
  -DHVL_WERROR="${HVL_WERROR:-ON}" "$@"
read -ra targets <<<"${HVL_TARGETS:-}"
cmake --build "$HVL_BUILD" -j"$HVL_JOBS" ${targets[@]:+--target "${targets[@]}"}
