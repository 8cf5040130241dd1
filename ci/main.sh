#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs missing packages,
# builds the `train` example and what it needs (the core and the LibTorch
# adapter: no tests, benchmarks, Python module or Gloo plugin) into its own build
# directory and trains `train` on scikit-learn's handwritten digits
# (python3-sklearn's digits.csv.gz, 20 % held out) with NP ranks (default 2).
# It links Debian's LibTorch 1.13 (libtorch-dev, which ci/install_deps.sh
# installs for the test suite anyway) into ./build-main: no venv to create, no
# wheel to install. HVL_TORCH=pypi builds against PyTorch 2.13 from PyPI instead
# (./build-main-pypi, with a venv holding only torch). Extra arguments go to
# train (e.g. --epochs 5 --fp16, or --data synthetic for its synthetic data).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install_deps.sh
export HVL_TORCH="${HVL_TORCH:-debian}"
case "$HVL_TORCH" in
  debian) export HVL_BUILD="${HVL_BUILD:-$PWD/build-main}" ;;
  *) export HVL_BUILD="${HVL_BUILD:-$PWD/build-main-pypi}" ;;
esac
HVL_VENV_FOR=main HVL_TARGETS=train bash ci/build.sh -DHVL_BUILD_TESTS=OFF -DHVL_BUILD_BENCH=OFF -DHVL_WITH_PYTHON=OFF \
  -DHVL_WITH_GLOO=OFF
source ci/env.sh
NP="${NP:-2}"
read -ra JOB_FLAGS <<<"$HVL_MPIRUN_JOB_FLAGS"  # from ci/env.sh
exec mpirun -np "$NP" "${JOB_FLAGS[@]}" "$HVL_BUILD/examples/train" "$@"
