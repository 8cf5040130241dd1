#!/usr/bin/env bash
# A host fails in the middle of a job, on 2 simulated hosts x 2 ranks:
#
#   tests/multihost/failure_test.sh link|kill WORKER
#
# link: the second host's network link goes down (ci/hosts.sh link ... down);
# kill: the second host's ranks are killed (SIGKILL). Passes when every rank of
# the surviving host has ended within 30 s, mpirun has exited non-zero, and the
# job's output names the lost host or its ranks. The watchdog's timeout
# (HOROVODLITE_PEER_TIMEOUT_SECONDS) is 4 s, so that in link mode it fires before
# mpirun's keepalive (at least 3 probes 2 s apart) ends the job, and its message
# is checked: when the survivors were stuck in the ring of the 4 MiB allreduce
# ('big', nearly all of the time), it must name the peer rank (2 or 3) and the
# lost host it waited for. A stall inside an MPI collective (a negotiation
# round, the 4 KiB allreduce) names no peer: MPI does not say which rank it
# waits for. Exit 77 (skip) without root.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HOSTS_SH="$ROOT/ci/hosts.sh"
mode="${1:-}" worker="${2:-}"
[ "$mode" = link ] || [ "$mode" = kill ] || { echo "usage: $0 link|kill WORKER" >&2; exit 2; }
[ -x "$worker" ] || { echo "$0: no worker '$worker'" >&2; exit 2; }
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1 || ! command -v tc >/dev/null; then
  echo "SKIP: multi-host tests need root, iproute2 network namespaces and tc; not available here"
  exit 77
fi
"$HOSTS_SH" gc
export HVL_TESTBED="f$(printf '%07d' $$ | tail -c 7)"
export HVL_TESTBED_OWNER=$$
log="$(mktemp)"
mpirun_pid=""
cleanup() {
  [ -n "$mpirun_pid" ] && kill -9 "$mpirun_pid" 2>/dev/null
  "$HOSTS_SH" down
  rm -f "$log"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
"$HOSTS_SH" up 2 2gbit || exit 1
h1="$HVL_TESTBED-h1" h2="$HVL_TESTBED-h2"

# Worker processes (by executable name) in a host's namespace.
workers_on() {
  local pid
  for pid in $(ip netns pids "$1" 2>/dev/null); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$(basename "$worker" | cut -c1-15)" ] && echo "$pid"
  done
}

export HOROVODLITE_PEER_TIMEOUT_SECONDS=4
# The testbed's Open MPI settings (ci/hosts.sh) include a short TCP keepalive
# on the daemons' control connections: mpirun learns within about 10 s that a
# host's daemon is unreachable, says which, and ends the job; without it mpirun
# waits for that daemon for minutes after the watchdog has ended the survivors.
"$HOSTS_SH" run mpirun -np 4 -H "$h1:2,$h2:2" --bind-to none --allow-run-as-root \
  -x HOROVODLITE_PEER_TIMEOUT_SECONDS "$worker" >"$log" 2>&1 &
mpirun_pid=$!
for _ in $(seq 600); do  # at most 60 s to start
  [ "$(grep -c ' ready$' "$log")" -ge 4 ] && break
  kill -0 "$mpirun_pid" 2>/dev/null || break
  sleep 0.1
done
if [ "$(grep -c ' ready$' "$log")" -lt 4 ]; then
  cat "$log"
  echo "FAIL: the job did not start" >&2
  exit 1
fi
survivors="$(workers_on "$h1" | xargs)"
echo "job running; survivors on $h1: pids $survivors; failing $h2 ($mode)"
t0=$(date +%s.%N)
if [ "$mode" = link ]; then
  "$HOSTS_SH" link "$h2" down
else
  workers_on "$h2" | xargs -r kill -9
fi

ended=""
for _ in $(seq 400); do  # 40 s
  if [ -z "$(workers_on "$h1")" ]; then
    ended=$(echo "$(date +%s.%N) - $t0" | bc)
    break
  fi
  sleep 0.1
done
rc=""
for _ in $(seq 200); do  # mpirun: 20 s more to exit
  if ! kill -0 "$mpirun_pid" 2>/dev/null; then
    wait "$mpirun_pid"
    rc=$?
    mpirun_pid=""
    break
  fi
  sleep 0.1
done
echo "----- job output"
cat "$log"
echo "-----"
fail=0
if [ -z "$ended" ]; then
  echo "FAIL: ranks on $h1 still running 40 s after $h2 failed" >&2
  fail=1
else
  echo "the ranks on $h1 ended ${ended} s after $h2 failed"
  if [ "$(echo "$ended > 30" | bc)" = 1 ]; then echo "FAIL: that is more than 30 s" >&2; fail=1; fi
fi
if [ -z "$rc" ]; then
  echo "FAIL: mpirun still running 20 s after the ranks ended" >&2
  fail=1
elif [ "$rc" = 0 ]; then
  echo "FAIL: mpirun exited 0" >&2
  fail=1
else
  echo "mpirun exited $rc"
fi
if ! grep -Eq "$h2|rank [23]\b|ranks? [^a-z]*[23]\b" "$log"; then
  echo "FAIL: the output names neither $h2 nor its ranks (2, 3)" >&2
  fail=1
fi
if [ "$mode" = link ]; then
  # A survivor waiting in the ring names its peer on the lost host; one waiting
  # inside a collective (the hierarchical allreduce's in-host steps wait on a local
  # rank that is itself stuck in the ring) has no peer to name. So: no message may
  # name a wrong peer, and while the job was in 'big' at least one names rank 2/3.
  named="$(grep -Eo "of 'big' waiting for rank [23] on host $h2:" "$log" | head -1)"
  if ! grep -q "no progress for" "$log"; then
    echo "FAIL: the watchdog did not report the stall" >&2
    fail=1
  elif [ "$(grep -Ec "of 'big' waiting for rank" "$log")" != "$(grep -Ec "of 'big' waiting for rank [23] on host $h2:" "$log")" ]; then
    echo "FAIL: a watchdog message names a peer other than rank 2/3 on $h2:" >&2
    grep "no progress for" "$log" >&2
    fail=1
  elif grep -Eq "of 'big'" "$log" && [ -z "$named" ]; then
    echo "FAIL: no watchdog message for the ring names rank 2/3 on $h2:" >&2
    grep "no progress for" "$log" >&2
    fail=1
  elif [ -n "$named" ]; then
    echo "the watchdog named the peer: $named"
  else
    echo "note: the watchdog fired inside an MPI collective (no peer to name): $(grep -m1 "no progress for" "$log")"
  fi
fi
exit $fail
