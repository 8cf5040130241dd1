#!/usr/bin/env bash
# Fuzzes the negotiation wire format (decode_requests / decode_responses) with
# libFuzzer + AddressSanitizer + UBSan for a bounded time, starting from the seed
# corpus in fuzz/corpus. Needs clang (14 is what CI has).
#   ci/fuzz.sh [seconds=60] [build-dir=build-fuzz]
# Findings (crash-*, leak-*, oom-*) are written to the build dir and fail the run;
# add the input to fuzz/corpus once fixed, so that the CTest replay keeps it fixed.
set -euo pipefail
SECONDS_TO_RUN=${1:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${2:-$ROOT/build-fuzz}
CXX=${FUZZ_CXX:-$(command -v clang++-14 || command -v clang++)}
mkdir -p "$OUT/corpus"
"$CXX" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$ROOT/horovodlite/include" -I"$ROOT/horovodlite/src" \
  "$ROOT/fuzz/fuzz_messages.cc" "$ROOT/horovodlite/src/message.cc" "$ROOT/horovodlite/src/common.cc" \
  -o "$OUT/fuzz_messages"
# New inputs go to $OUT/corpus (the checked-in seeds stay read-only).
# -rss_limit_mb / -malloc_limit_mb: an allocation driven by a corrupt count fails the run.
cd "$OUT"
"$OUT/fuzz_messages" -max_total_time="$SECONDS_TO_RUN" -rss_limit_mb=512 -malloc_limit_mb=64 -max_len=4096 \
  -print_final_stats=1 "$OUT/corpus" "$ROOT/fuzz/corpus" 2>&1 | tee "$OUT/fuzz.log" | grep -E "^#[0-9]+ +(INITED|DONE)|stat::|ERROR|SUMMARY" || true
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
  echo "fuzz_messages failed (exit $status); see $OUT/fuzz.log and the crash-* / oom-* files in $OUT" >&2
  exit "$status"
fi
echo "fuzz_messages: no findings in ${SECONDS_TO_RUN} s"
