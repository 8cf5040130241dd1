#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs missing
# packages, then
#   1. PyTorch 2.x from PyPI (HVL_TORCH=pypi, ./.venv, ./build): builds
#      everything and runs every GoogleTest and pytest suite through CTest;
#   2. Debian's PyTorch 1.13 (HVL_TORCH=debian, ./build-debian): builds the
#      LibTorch adapter, its tests and the Python module (the core comes from
#      the compiler cache or is rebuilt; benchmarks off) and runs the LibTorch
#      and Python suites: what depends on torch;
#   3. the Gloo world built without MPI (./build-nompi);
#   4. ASan+UBSan over the core and ring suites.
# HVL_TEST_TORCH=pypi or =debian runs only that half; with =debian the whole
# suite runs (not only the torch-dependent part).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install_deps.sh
HVL_TORCH=pypi bash ci/setup_venv.sh
bash ci/lint.sh
WHICH="${HVL_TEST_TORCH:-both}"
# The suites that depend on torch: LibTorch adapter, checkpointing, sharding, train, Python.
TORCH_SUITES='^(torch_|distributed_optimizer_|broadcast_state_|checkpoint_dp_|train_save_resume|zero_|fully_shard_|py_)'
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
# The Gloo world built without MPI (HVL_WITH_MPI=OFF, ./build-nompi): no libmpi
# in the libraries, mpi_built() false, the Gloo launcher's suites and the C++
# Gloo worker through horovodlite-run (HVL_TEST_NOMPI=0 skips it).
if [ "${HVL_TEST_NOMPI:-1}" != 0 ]; then
  echo "== ci/test.sh: the Gloo world without MPI (HVL_WITH_MPI=OFF)"
  HVL_TORCH=pypi HVL_BUILD="$PWD/build-nompi" HVL_TARGETS="horovodlite_python gloo_worker elastic_train" \
    bash ci/build.sh -DHVL_WITH_MPI=OFF -DHVL_WITH_CUDA=OFF -DHVL_BUILD_BENCH=OFF
  if ldd build-nompi/horovodlite/libhorovodlite.so build-nompi/python/horovodlite/torch/_C*.so | grep -i libmpi; then
    echo "ci/test.sh: the build without MPI links libmpi" >&2
    exit 1
  fi
  (export HVL_TORCH=pypi; source ci/env.sh
   ctest --test-dir "$PWD/build-nompi" --output-on-failure --timeout 600 -R "^(py_launcher_gloo|launcher_gloo_worker_np[23])$")
fi
t3=$(date +%s)
# ASan+UBSan over the core and ring suites at 2 ranks (HVL_TEST_SANITIZE=0 skips it).
if [ "${HVL_TEST_SANITIZE:-1}" != 0 ]; then
  echo "== ci/test.sh: ASan+UBSan (ci/sanitize.sh ci)"
  bash ci/sanitize.sh ci
fi
t4=$(date +%s)
echo "== ci/test.sh: passed (PyPI torch $((t1 - t0)) s, Debian torch $((t2 - t1)) s, without MPI $((t3 - t2)) s, sanitizers $((t4 - t3)) s)"
