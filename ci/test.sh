#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs missing
# packages, builds, and runs every GoogleTest and pytest suite (multi-process
# ones under mpirun) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install_deps.sh
bash ci/build.sh
source ci/env.sh
ctest --test-dir "$HVL_BUILD" --output-on-failure --timeout 600
