#!/usr/bin/env bash
# Runs failure_app under mpirun with one rank failing in a given way and checks
# that the job ends within the bound, with a non-zero exit, naming the lost rank.
#   HVL_MPIRUN_FLAGS="..." run_failure.sh <mpiexec> <np> <failure_app> <mode> <expected text> <bound s> [timeline_check]
# (CTest sets HVL_MPIRUN_FLAGS from tests/CMakeLists.txt.)
# A hang fails the test through the time limit (bound + 60 s). Prints the
# measured time from the failure (and from the error reaching a survivor, for apps
# that print ERROR_AT) to the end of the job (the figures docs/reliability.md quotes).
set -u
MPIEXEC=$1 NP=$2 APP=$3 MODE=$4 EXPECT=$5 BOUND=$6 CHECK=${7:-}
LOG=$(mktemp /tmp/hvl_failure_XXXXXX.log)
TIMELINE=""
if [ -n "$CHECK" ]; then
  TIMELINE=$(mktemp /tmp/hvl_failure_timeline_XXXXXX.json)
  export HOROVODLITE_TIMELINE=$TIMELINE
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
: "${HVL_MPIRUN_FLAGS:?set it to the mpirun flags (tests/CMakeLists.txt, HVL_MPIRUN_FLAGS)}"
# mpirun in a session of its own, so that a hang (the test failing) leaves no
# process behind: on the time limit mpirun gets SIGTERM first (it then removes its
# session directory: a stale one can trip a later job given the same pid), then the
# whole session is killed.
# shellcheck disable=SC2086  # one word per flag
setsid "$MPIEXEC" -np "$NP" $HVL_MPIRUN_FLAGS "$APP" "$MODE" >"$LOG" 2>&1 &
PID=$!
(for ((i = 0; i < BOUND + 60; i++)); do sleep 1; kill -0 "$PID" || exit 0; done
 kill -TERM "$PID"; sleep 10; pkill -KILL -s "$PID") >/dev/null 2>&1 &
wait "$PID"
RC=$?
END=$(date +%s.%N)
pkill -KILL -s "$PID" 2>/dev/null  # ranks left waiting after mpirun was killed
cat "$LOG"
FAILED_AT=$(grep -m1 -o 'FAILING_AT [0-9.]*' "$LOG" | awk '{print $2}')
ok=1
if [ "$RC" -eq 0 ]; then echo "FAIL: the job exited 0"; ok=0; fi
if [ "$RC" -eq 137 ] && [ -z "$FAILED_AT" ]; then echo "FAIL: killed by timeout (a hang)"; ok=0; fi
if [ -z "$FAILED_AT" ]; then echo "FAIL: the failing rank never reached its failure point"; ok=0; fi
if ! grep -qF -- "$EXPECT" "$LOG"; then echo "FAIL: no message containing: $EXPECT"; ok=0; fi
if [ -n "$FAILED_AT" ]; then
  ELAPSED=$(awk -v a="$END" -v b="$FAILED_AT" 'BEGIN{printf "%.1f", a-b}')
  echo "MEASURED: mode $MODE np $NP: job ended ${ELAPSED} s after the failure (exit $RC, bound ${BOUND} s)"
  if awk -v e="$ELAPSED" -v b="$BOUND" 'BEGIN{exit !(e > b)}'; then echo "FAIL: over the bound"; ok=0; fi
fi
# Apps that print "ERROR_AT <unix seconds>" when the failure reaches a survivor.
ERROR_AT=$(grep -m1 -o 'ERROR_AT [0-9.]*' "$LOG" | awk '{print $2}')
if [ -n "$ERROR_AT" ]; then
  echo "MEASURED: mode $MODE np $NP: job ended $(awk -v a="$END" -v b="$ERROR_AT" 'BEGIN{printf "%.1f", a-b}') s after the error reached a rank"
fi
if [ -n "$CHECK" ]; then
  "$CHECK" "$TIMELINE" || ok=0
  rm -f "$TIMELINE"
fi
rm -f "$LOG"
[ "$ok" -eq 1 ] && echo PASS && exit 0
exit 1
