#!/usr/bin/env bash
# Runs a command on simulated hosts (ci/hosts.sh) and removes them afterwards,
# whatever happens (success, failure, timeout, Ctrl-C):
#
#   tests/multihost/run_on_hosts.sh HOSTS RANKS_PER_HOST RATE [--timeout S] -- PROGRAM [ARGS...]
#
# starts HOSTS hosts with links shaped to RATE (a tc rate, or none) and runs
# `mpirun -np HOSTS*RANKS_PER_HOST -H <tb>-h1:R,...` PROGRAM in them (Open MPI
# settings from the testbed; --bind-to none). Exits 77 (CTest: skipped) when the
# machine cannot make network namespaces (not root, no iproute2); testbeds left
# by killed runs are removed first (ci/hosts.sh gc).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HOSTS_SH="$ROOT/ci/hosts.sh"

[ $# -ge 5 ] || { echo "usage: $0 HOSTS RANKS_PER_HOST RATE [--timeout S] -- PROGRAM [ARGS...]" >&2; exit 2; }
hosts="$1" per_host="$2" rate="$3"
shift 3
limit=500
if [ "$1" = --timeout ]; then limit="$2"; shift 2; fi
[ "$1" = -- ] || { echo "$0: expected -- before the program" >&2; exit 2; }
shift

if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
  echo "SKIP: multi-host tests need root and iproute2 network namespaces (ip netns); not available here"
  exit 77
fi
if [ "$rate" != none ] && ! command -v tc >/dev/null; then
  echo "SKIP: multi-host tests with a shaped link need tc (iproute2)"
  exit 77
fi

"$HOSTS_SH" gc
export HVL_TESTBED="t$(printf '%07d' $$ | tail -c 7)"
export HVL_TESTBED_OWNER=$$
cleanup() { "$HOSTS_SH" down; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
"$HOSTS_SH" up "$hosts" "$rate" || exit 1

host_list=""
for i in $(seq 1 "$hosts"); do host_list="$host_list${host_list:+,}$HVL_TESTBED-h$i:$per_host"; done
# timeout (not CTest's kill) ends a hung job, so that the trap still runs.
timeout --signal=TERM --kill-after=10 "$limit" \
  "$HOSTS_SH" run mpirun -np $((hosts * per_host)) -H "$host_list" --bind-to none --allow-run-as-root "$@"
rc=$?
[ $rc = 124 ] && echo "$0: the job ran past ${limit} s and was stopped" >&2
exit $rc
