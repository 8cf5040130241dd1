#!/usr/bin/env bash
# Configures and builds everything (core, LibTorch adapter, examples, Python
# module, benchmarks, tests) into $HVL_BUILD (default ./build).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cmake -S "$HVL_ROOT" -B "$HVL_BUILD" -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$HVL_PYTHON" "$@"
cmake --build "$HVL_BUILD" -j"$HVL_JOBS"
