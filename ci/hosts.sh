#!/usr/bin/env bash
# Simulated hosts on one machine: network namespaces joined by a bridge, each
# with its own address (198.18.0.0/24, the benchmarking range, never routed out
# of the testbed), its own hostname and an egress link shaped with tc tbf. Open
# MPI reaches them through its rsh launch agent (ci/hosts_agent.sh), which plays
# ssh with `ip netns exec`. Needs root and iproute2.
#
#   ci/hosts.sh up N [RATE]   hosts <tb>-h1..<tb>-hN; RATE is a tc rate (2gbit,
#                             500mbit) or none (default: unshaped)
#   ci/hosts.sh down          removes the testbed (idempotent)
#   ci/hosts.sh run CMD...    runs CMD (e.g. mpirun) in the launch namespace with
#                             the Open MPI settings the testbed needs (OMPI_MCA_*)
#   ci/hosts.sh link HOST up|down   takes a host's link down or up (failure tests)
#   ci/hosts.sh status        what exists
#   ci/hosts.sh gc            removes testbeds whose owner process has exited
#
# <tb> is $HVL_TESTBED (default hvl; 1-8 characters of [a-z0-9]), so that several
# testbeds can exist at once. Each has a bridge <tb>-br, a launch namespace <tb>-h0
# (198.18.0.1: mpirun runs here, no ranks) and hosts <tb>-hI at 198.18.0.(10+I),
# with no address in the root namespace: nothing leaves the testbed. Its state
# (the agent, the host list, the Open MPI settings) is in /run/hvl-testbed/<tb>/.
# `up` records $HVL_TESTBED_OWNER (a pid, default: none) so that `gc` can remove a
# testbed left behind by a killed test. Examples:
#
#   ci/hosts.sh up 2 2gbit
#   ci/hosts.sh run mpirun -np 4 -H hvl-h1:2,hvl-h2:2 build/tests/core/core_tests
#   build/horovodlite-run --hosts-netns hvl -np 4 -H hvl-h1:2,hvl-h2:2 /usr/bin/python3 examples/train.py
#   ci/hosts.sh down
set -euo pipefail

TB="${HVL_TESTBED:-hvl}"
UP_DONE=0
STATE_ROOT=/run/hvl-testbed
STATE="$STATE_ROOT/$TB"
SUBNET=198.18.0.0/24
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# HVL_MPIRUN_JOB_FLAGS and hvl_mpirun_mca.
source "$HERE/mpirun_flags.sh"

die() { echo "hosts.sh: $*" >&2; exit 1; }

check_name() {
  [[ "$TB" =~ ^[a-z0-9]{1,8}$ ]] || die "HVL_TESTBED must be 1-8 characters of [a-z0-9], got '$TB'"
}

check_tools() {
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
  command -v ip >/dev/null || die "needs iproute2 (ip)"
}

# The Open MPI settings every launch into the testbed needs: the agent, no tree
# spawn (every daemon is started from the launch namespace), TCP on the testbed's
# subnet only, the job flags of ci/mpirun_flags.sh (among them no binding, which
# the testbed needs too: each namespace looks like a whole machine, so binding
# would put one rank of every host on core 0), and TCP keepalive on the
# daemons' control connections (Linux's default sends the first probe after
# 300 s): when a host becomes unreachable, mpirun says so ("ORTE has lost
# communication with a remote daemon ... on node <host>") and ends the job
# within about 10 s instead of waiting for that host for minutes.
write_mpi_env() {
  local job
  job=$(hvl_mpirun_mca "$HVL_MPIRUN_JOB_FLAGS") || die "cannot write the mpirun flags as OMPI_MCA_* settings"
  {
    cat <<EOF
OMPI_MCA_plm_rsh_agent=$STATE/agent
OMPI_MCA_plm_rsh_no_tree_spawn=1
OMPI_MCA_oob_tcp_if_include=$SUBNET
OMPI_MCA_btl_tcp_if_include=$SUBNET
OMPI_MCA_btl=tcp,vader,self
EOF
    sed 's/^/OMPI_MCA_/' <<<"$job"
    cat <<EOF
OMPI_MCA_oob_tcp_keepalive_time=4
OMPI_MCA_oob_tcp_keepalive_intvl=2
OMPI_MCA_oob_tcp_keepalive_probes=3
EOF
  } >"$STATE/mpi.env"
}

add_ns() {  # add_ns NAME ADDRESS RATE
  local ns="$1" addr="$2" rate="$3"
  ip netns add "$ns"
  ip link add "$ns" type veth peer name eth0 netns "$ns"
  ip link set "$ns" master "$TB-br" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  # A connection with unacknowledged data to a host that has become unreachable
  # (mpirun telling a lost daemon to kill its ranks after MPI_Abort) is given up
  # after tcp_retries2 retransmissions: Linux's default 15 is about 15 minutes,
  # 5 is about 13 s. Keepalive (mpi.env) covers idle connections only.
  ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2=5
  if [ "$rate" != none ]; then
    # Egress of each host; netem is not available in every kernel, tbf is.
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 5ms
  fi
}

cmd_up() {
  local n="${1:-}" rate="${2:-none}"
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "usage: hosts.sh up N [RATE] (1 <= N <= 200)"
  check_tools
  [ -e "$STATE" ] && die "testbed '$TB' exists already ($STATE); 'hosts.sh down' first or set HVL_TESTBED"
  if [ "$rate" != none ]; then command -v tc >/dev/null || die "RATE needs tc (iproute2)"; fi
  mkdir -p "$STATE"
  # Anything that fails from here on (set -e) leaves nothing behind.
  trap 'if [ "$UP_DONE" != 1 ]; then cmd_down >/dev/null 2>&1 || true; fi' EXIT
  echo "${HVL_TESTBED_OWNER:-}" >"$STATE/owner"
  ip link add "$TB-br" type bridge
  ip link set "$TB-br" up
  add_ns "$TB-h0" 198.18.0.1 none
  : >"$STATE/hosts"
  local i
  for i in $(seq 1 "$n"); do
    add_ns "$TB-h$i" "198.18.0.$((10 + i))" "$rate"
    echo "$TB-h$i" >>"$STATE/hosts"
  done
  install -m 0755 "$HERE/hosts_agent.sh" "$STATE/agent"
  echo "$TB-h0" >"$STATE/launch_ns"
  echo "$rate" >"$STATE/rate"
  write_mpi_env
  UP_DONE=1
  echo "testbed $TB: hosts $(paste -sd' ' "$STATE/hosts") (rate $rate); agent $STATE/agent"
}

cmd_down() {
  check_name
  local ns
  # Namespaces of this testbed, whether or not the state directory survived.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$TB-h[0-9]+$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    ip link del "$ns" 2>/dev/null || true  # the root end of its veth, if still there
  done
  ip link del "$TB-br" 2>/dev/null || true
  rm -rf "$STATE"
}

cmd_run() {
  [ -f "$STATE/mpi.env" ] || die "no testbed '$TB' (ci/hosts.sh up N first)"
  [ $# -ge 1 ] || die "usage: hosts.sh run CMD..."
  local -a envs
  mapfile -t envs <"$STATE/mpi.env"
  exec ip netns exec "$(cat "$STATE/launch_ns")" env "${envs[@]}" "$@"
}

cmd_link() {
  local host="${1:-}" state="${2:-}"
  [ -f "$STATE/hosts" ] && grep -qx -- "$host" "$STATE/hosts" || die "'$host' is not a host of testbed $TB"
  [ "$state" = up ] || [ "$state" = down ] || die "usage: hosts.sh link HOST up|down"
  ip link set "$host" "$state"  # the bridge end: the host's eth0 loses its carrier
  if [ "$state" = up ]; then  # until the carrier is back (at most 5 s)
    local i
    for i in $(seq 50); do
      ip -n "$host" -o link show eth0 | grep -q "state UP" && return 0
      sleep 0.1
    done
    die "$host: eth0 is not up 5 s after its link was set up"
  fi
}

cmd_status() {
  if [ -d "$STATE" ]; then
    echo "testbed $TB: hosts $(paste -sd' ' "$STATE/hosts") rate $(cat "$STATE/rate") owner '$(cat "$STATE/owner")'"
  else
    echo "testbed $TB: none"
  fi
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$TB-h[0-9]+$" || true
}

cmd_gc() {
  local dir owner
  for dir in "$STATE_ROOT"/*; do
    [ -d "$dir" ] || continue
    owner="$(cat "$dir/owner" 2>/dev/null || true)"
    if [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null; then
      echo "hosts.sh: removing testbed $(basename "$dir") (owner $owner has exited)"
      HVL_TESTBED="$(basename "$dir")" "$0" down
    fi
  done
}

check_name
case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  run) shift; cmd_run "$@" ;;
  link) shift; cmd_link "$@" ;;
  status) cmd_status ;;
  gc) cmd_gc ;;
  *) sed -n '2,28p' "$0" >&2; exit 2 ;;
esac
