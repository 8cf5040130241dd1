#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs missing
# packages, then
#   1. PyTorch 2.x from PyPI (HVL_TORCH=pypi, ./.venv, ./build): builds
#      everything and runs every GoogleTest and pytest suite through CTest;
#   2. Debian's PyTorch 1.13 (HVL_TORCH=debian, ./build-debian): builds the
#      LibTorch adapter, its tests and the Python module (the core comes from
#      the compiler cache or is rebuilt; benchmarks off) and runs the LibTorch
#      and Python suites: what depends on torch.
# HVL_TEST_TORCH=pypi or =debian runs only that half; with =debian the whole
# suite runs (not only the torch-dependent part).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install_deps.sh
HVL_TORCH=pypi bash ci/setup_venv.sh
bash ci/lint.sh
WHICH="${HVL_TEST_TORCH:-both}"
# The suites that depend on torch: LibTorch adapter, checkpointing, train, Python.
TORCH_SUITES='^(torch_|distributed_optimizer_|broadcast_state_|checkpoint_dp_|train_save_resume|py_)'
t0=$(date +%s)
if [ "$WHICH" != debian ]; then
  echo "== ci/test.sh: PyTorch from PyPI (HVL_TORCH=pypi): whole suite"
  HVL_TORCH=pypi bash ci/build.sh
  (export HVL_TORCH=pypi; source ci/env.sh; ctest --test-dir "$HVL_BUILD" --output-on-failure --timeout 600)
fi
t1=$(date +%s)
if [ "$WHICH" != pypi ]; then
  if [ "$WHICH" = debian ]; then
    echo "== ci/test.sh: Debian's PyTorch 1.13 (HVL_TORCH=debian): whole suite"
    HVL_TORCH=debian bash ci/build.sh
    (export HVL_TORCH=debian; source ci/env.sh; ctest --test-dir "$HVL_BUILD" --output-on-failure --timeout 600)
  else
    echo "== ci/test.sh: Debian's PyTorch 1.13 (HVL_TORCH=debian): LibTorch and Python suites"
    HVL_TORCH=debian bash ci/build.sh -DHVL_BUILD_BENCH=OFF
    (export HVL_TORCH=debian; source ci/env.sh
     ctest --test-dir "$HVL_BUILD" --output-on-failure --timeout 600 -R "$TORCH_SUITES")
  fi
fi
t2=$(date +%s)
# ASan+UBSan over the core and ring suites at 2 ranks (HVL_TEST_SANITIZE=0 skips it).
if [ "${HVL_TEST_SANITIZE:-1}" != 0 ]; then
  echo "== ci/test.sh: ASan+UBSan (ci/sanitize.sh ci)"
  bash ci/sanitize.sh ci
fi
t3=$(date +%s)
echo "== ci/test.sh: passed (PyPI torch $((t1 - t0)) s, Debian torch $((t2 - t1)) s, sanitizers $((t3 - t2)) s)"
