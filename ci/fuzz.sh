#!/usr/bin/env bash
# Fuzzes the negotiation wire format (decode_requests / decode_responses) with
# libFuzzer + AddressSanitizer + UBSan for a bounded time, starting from the seed
# corpus in fuzz/corpus (needs clang; 14 is what CI has), then the rendezvous
# store's request parser and handler (fuzz/fuzz_rendezvous.py) with atheris for
# as long, from fuzz/corpus_rendezvous (atheris is pip-installed into the venv
# when missing).
#   ci/fuzz.sh [seconds=60] [build-dir=build-fuzz]
# Findings (crash-*, leak-*, oom-*) are written to the build dir and fail the run;
# add the input to fuzz/corpus once fixed, so that the CTest replay keeps it fixed.
set -euo pipefail
SECONDS_TO_RUN=${1:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${2:-$ROOT/build-fuzz}
CXX=${FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}
if [ -z "$CXX" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "ci/fuzz.sh: installing clang-14 (libFuzzer)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang-14 >/dev/null
  CXX=$(command -v clang++-14 || true)
fi
if [ -z "$CXX" ]; then
  echo "ci/fuzz.sh: needs clang++ with libFuzzer (apt-get install clang-14, or FUZZ_CXX=...)" >&2
  exit 2
fi
mkdir -p "$OUT/corpus"
"$CXX" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$ROOT/horovodlite/include" -I"$ROOT/horovodlite/src" \
  "$ROOT/fuzz/fuzz_messages.cc" "$ROOT/horovodlite/src/message.cc" "$ROOT/horovodlite/src/common.cc" \
  -o "$OUT/fuzz_messages"
# fuzz NAME COMMAND...: runs a libFuzzer-style target over $OUT/corpus_NAME (new
# inputs; the checked-in seeds stay read-only) and the seeds given in COMMAND,
# printing libFuzzer's summary lines; a finding fails the script.
fuzz() {
  local name=$1 status
  shift
  # Not `|| true`: under pipefail that would run and reset PIPESTATUS, hiding a finding.
  set +e
  "$@" -max_total_time="$SECONDS_TO_RUN" -max_len=4096 -print_final_stats=1 2>&1 | tee "$OUT/$name.log" |
    grep -E "^#[0-9]+ +(INITED|DONE)|stat::|ERROR|SUMMARY|Uncaught|AssertionError"
  status=${PIPESTATUS[0]}
  set -e
  if [ "$status" -ne 0 ]; then
    echo "$name failed (exit $status); see $OUT/$name.log and the crash-* / oom-* files in $OUT" >&2
    exit "$status"
  fi
  echo "$name: no findings in ${SECONDS_TO_RUN} s"
}
cd "$OUT"
# -rss_limit_mb / -malloc_limit_mb: an allocation driven by a corrupt count fails the run.
fuzz fuzz_messages "$OUT/fuzz_messages" -rss_limit_mb=512 -malloc_limit_mb=64 "$OUT/corpus" "$ROOT/fuzz/corpus"

source "$ROOT/ci/env.sh"
bash "$ROOT/ci/setup_venv.sh"
"$HVL_PYTHON" -c "import atheris" 2>/dev/null || "$HVL_PYTHON" -m pip install -q atheris
mkdir -p "$OUT/corpus_rendezvous"
fuzz fuzz_rendezvous "$HVL_PYTHON" "$ROOT/fuzz/fuzz_rendezvous.py" -rss_limit_mb=1024 "$OUT/corpus_rendezvous" \
  "$ROOT/fuzz/corpus_rendezvous"
