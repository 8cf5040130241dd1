#!/usr/bin/env bash
# Builds horovodlite's Python module (with the core and the LibTorch adapter it
# links) with -static-libstdc++ in a build tree of its own, then runs a script
# under mpirun -np 2 that initialises, allreduces and exits without shutdown().
# Such a build carries its own libstdc++ beside torch's; nothing on horovodlite's
# shutdown path may depend on that copy's static state at exit (issue 29: every
# process crashed in the background thread's shutdown message). Must exit 0.
#
# usage: static_runtime_test.sh SRC_DIR BUILD_DIR PYTHON MPIRUN TORCH_DIR PYBIND11_DIR CXX [MPIRUN_FLAGS...]
set -euo pipefail
src=$1 build=$2 python=$3 mpirun=$4 torch_dir=$5 pybind11_dir=$6 cxx=$7
shift 7
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# Only the Python module (and what it links); no LTO (pybind11 would add it):
# the link is the slow part, and LTO is not what is tested.
# The compiler through CXX (read at the first configure only: a build tree
# configured by another compiler path is reused as it is, not wiped).
CXX="$cxx" cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
  -DHVL_WERROR="${HVL_WERROR:-OFF}" -DPython_EXECUTABLE="$python" -DTorch_DIR="$torch_dir" -Dpybind11_DIR="$pybind11_dir" \
  -DHVL_WITH_CUDA=OFF -DHVL_BUILD_TESTS=OFF -DHVL_BUILD_BENCH=OFF -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF \
  -DCMAKE_SHARED_LINKER_FLAGS=-static-libstdc++ -DCMAKE_MODULE_LINKER_FLAGS=-static-libstdc++ >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build" --target horovodlite_python -j"${HVL_JOBS:-1}" >"$build.build.log" 2>&1 ||
  { tail -50 "$build.build.log"; exit 1; }
so=$(find "$build/python/horovodlite/torch" -name '_C*.so' | head -1)
core=$(find "$build/horovodlite" -name 'libhorovodlite.so*' | head -1)
# The point of the test: the libraries must not need the shared libstdc++.
for lib in "$so" "$core"; do
  if readelf -d "$lib" | grep NEEDED | grep -q 'libstdc++'; then
    echo "FAIL: $lib needs libstdc++.so; -static-libstdc++ did not take" >&2
    exit 1
  fi
done
echo "built with -static-libstdc++: $so"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
PYTHONPATH="$build/python" timeout 240 "$mpirun" -np 2 "$@" "$python" \
  "$(dirname "$0")/exit_without_shutdown.py" >"$out" 2>&1
rc=$?
set -e
cat "$out"
if [ "$rc" -ne 0 ]; then
  echo "FAIL: mpirun exited $rc" >&2
  exit 1
fi
if grep -Eiq 'segmentation fault|on signal [0-9]+|core dumped|terminate called' "$out"; then
  echo "FAIL: a rank crashed at exit" >&2
  exit 1
fi
# One check per rank: mpirun forwards the ranks' output in chunks of its own,
# and two ranks' lines can arrive joined on one line (seen in CI), so lines
# are not counted.
for r in 0 1; do
  if ! grep -q "rank $r: allreduce ok" "$out"; then
    echo "FAIL: rank $r did not report 'allreduce ok'" >&2
    exit 1
  fi
done
echo "PASS: both ranks exited cleanly"
