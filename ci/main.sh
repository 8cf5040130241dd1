#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs missing packages,
# builds the `train` example and what it needs (the core and the LibTorch
# adapter: no tests, benchmarks or Python module) into its own build directory
# (./build-main; ./build-main-debian with HVL_TORCH=debian, against Debian's
# PyTorch 1.13; see ci/env.sh), and trains `train` on scikit-learn's handwritten
# digits (python3-sklearn's digits.csv.gz, 20 % held out) with NP ranks
# (default 2). Extra arguments go to train (e.g. --epochs 5 --fp16, or
# --data synthetic for its built-in synthetic data).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install_deps.sh
case "${HVL_TORCH:-pypi}" in
  debian) export HVL_BUILD="${HVL_BUILD:-$PWD/build-main-debian}" ;;
  *) export HVL_BUILD="${HVL_BUILD:-$PWD/build-main}" ;;
esac
HVL_VENV_FOR=main HVL_TARGETS=train bash ci/build.sh -DHVL_BUILD_TESTS=OFF -DHVL_BUILD_BENCH=OFF -DHVL_WITH_PYTHON=OFF
source ci/env.sh
NP="${NP:-2}"
read -ra JOB_FLAGS <<<"$HVL_MPIRUN_JOB_FLAGS"  # from ci/env.sh
exec mpirun -np "$NP" "${JOB_FLAGS[@]}" "$HVL_BUILD/examples/train" "$@"
