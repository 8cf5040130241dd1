#!/usr/bin/env bash
# Builds the core and its multi-process suites with AddressSanitizer+UBSan
# (build-asan) and ThreadSanitizer (build-tsan), and runs them under mpirun with
# 2 and 3 ranks. Suppressions for Open MPI's internals: ci/sanitizers/*.supp
# (each entry explained there and in docs/reliability.md).
#   ci/sanitize.sh [address|thread|all|ci]   (default: all)
# address/thread/all: the full runs (core and reliability suites at 2 and 3 ranks).
# ci: the pass CI runs (ci/test.sh, through .ci/run): ASan+UBSan only, over the
#   core suite (MPI and ring allreduce paths) and the ring suite at 2 ranks, plus
#   the message tests and the fuzz corpus replay. Measured times: docs/reliability.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WHICH=${1:-all}
JOBS=${JOBS:-2}
SUPP=$ROOT/ci/sanitizers
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The watchdog must not mistake a slow sanitized rank for a dead one.
export HOROVODLITE_PEER_TIMEOUT_SECONDS=120
# fast_unwind_on_malloc=0: Open MPI is built without frame pointers, so the fast
# unwinder stops inside it and leak stacks never reach libmpi.so to be suppressed.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0:detect_stack_use_after_return=1:strict_string_checks=1"
export LSAN_OPTIONS="suppressions=$SUPP/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="suppressions=$SUPP/tsan.supp:halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0"
# The mpirun flags from their one source (python/horovodlite/runner/mpi_flags.py);
# the component exclusions only where noted below.
source "$ROOT/ci/mpirun_flags.sh"
read -ra JOB_FLAGS <<<"$HVL_MPIRUN_JOB_FLAGS"
read -ra EXCLUSIONS <<<"$HVL_MPIRUN_EXCLUSIONS"
MPIRUN=(mpirun "${JOB_FLAGS[@]}"
        -x ASAN_OPTIONS -x LSAN_OPTIONS -x UBSAN_OPTIONS -x TSAN_OPTIONS -x HOROVODLITE_PEER_TIMEOUT_SECONDS)
# Suites: the core's, and the reliability suite (stall, timeline, bad input).
RELIABILITY_FILTER='Stall.*:Timeline.*:BadInput.*:Config.*'

# Configures and builds the sanitized targets into $ROOT/<dir>.
build_kind() {
  local kind=$1 dir=$2
  shift 2
  cmake -S "$ROOT" -B "$ROOT/$dir" -DHVL_SANITIZE="$kind" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHVL_WITH_TORCH=OFF -DHVL_WITH_PYTHON=OFF -DHVL_BUILD_BENCH=OFF >/dev/null
  cmake --build "$ROOT/$dir" -j"$JOBS" --target "$@"
}

run_kind() {
  local kind=$1 dir=$2 t0 t1
  # Under TSan, Open MPI 4.1's MPI_Init segfaults (inside Open MPI) when run with
  # "--mca btl ^openib"; the default BTL selection works. ASan is fine with it.
  if [ "$kind" = address ]; then MPIRUN+=("${EXCLUSIONS[@]}"); fi
  t0=$(date +%s)
  build_kind "$kind" "$dir" core_tests message_tests reliability_tests fuzz_messages_replay
  t1=$(date +%s)
  echo "== $kind: build took $((t1 - t0)) s"
  "$ROOT/$dir/tests/core/message_tests" >/dev/null
  "$ROOT/$dir/tests/reliability/fuzz_messages_replay" "$ROOT/fuzz/corpus"
  for np in 2 3; do
    echo "== $kind: core_tests np $np"
    "${MPIRUN[@]}" -np "$np" "$ROOT/$dir/tests/core/core_tests" --gtest_brief=1
    echo "== $kind: reliability_tests np $np"
    "${MPIRUN[@]}" -np "$np" "$ROOT/$dir/tests/reliability/reliability_tests" --gtest_brief=1 \
      --gtest_filter="$RELIABILITY_FILTER"
  done
  echo "== $kind: clean; tests took $(( $(date +%s) - t1 )) s"
}

# The CI pass: ASan+UBSan, 2 ranks, the core suite on both host allreduce paths
# (MPI, and every allreduce on the pipelined ring with small segments, as CTest's
# core_ring_np2) and the ring suite.
run_ci() {
  local dir=build-asan t0 t1
  MPIRUN+=("${EXCLUSIONS[@]}")
  t0=$(date +%s)
  build_kind address "$dir" core_tests ring_tests message_tests fuzz_messages_replay
  t1=$(date +%s)
  echo "== ci (address): build took $((t1 - t0)) s"
  "$ROOT/$dir/tests/core/message_tests" >/dev/null
  "$ROOT/$dir/tests/reliability/fuzz_messages_replay" "$ROOT/fuzz/corpus"
  echo "== ci (address): core_tests np 2"
  "${MPIRUN[@]}" -np 2 "$ROOT/$dir/tests/core/core_tests" --gtest_brief=1
  echo "== ci (address): core_tests np 2, ring allreduce"
  HOROVODLITE_RING_THRESHOLD=0 HOROVODLITE_RING_SEGMENT_BYTES=4096 \
    "${MPIRUN[@]}" -x HOROVODLITE_RING_THRESHOLD -x HOROVODLITE_RING_SEGMENT_BYTES -np 2 \
    "$ROOT/$dir/tests/core/core_tests" --gtest_brief=1
  echo "== ci (address): ring_tests np 2"
  "${MPIRUN[@]}" -np 2 "$ROOT/$dir/tests/ring/ring_tests" --gtest_brief=1
  echo "== ci (address): clean; tests took $(( $(date +%s) - t1 )) s"
}

case "$WHICH" in
  ci) run_ci ;;
  address) run_kind address build-asan ;;
  thread) run_kind thread build-tsan ;;
  all) run_kind address build-asan; run_kind thread build-tsan ;;
  *) echo "usage: $0 [address|thread|all|ci]" >&2; exit 2 ;;
esac
