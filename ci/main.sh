#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs missing packages,
# builds against PyTorch 2.x from PyPI (HVL_TORCH=debian: Debian's 1.13; see
# ci/env.sh), and trains the `train` example on its built-in synthetic data with
# NP ranks (default 2). Extra arguments go to train (e.g. --epochs 5 --fp16).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install_deps.sh
bash ci/build.sh
source ci/env.sh
NP="${NP:-2}"
exec mpirun -np "$NP" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
  "$HVL_BUILD/examples/train" "$@"
