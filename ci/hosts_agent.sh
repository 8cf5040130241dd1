#!/bin/sh
# Open MPI's rsh launch agent for the simulated hosts of ci/hosts.sh, standing in
# for ssh:  AGENT [ssh options] HOST COMMAND...
#
# Like ssh it fails (exit 255, a message naming the host) when HOST is not a host
# of a testbed or its link is down, and runs COMMAND (words joined, through a
# shell) with a fresh login-like environment, so that only what mpirun forwards
# (-x) reaches the ranks. Inside, the hostname is HOST (its own UTS namespace).
# ssh options (-p PORT, -i FILE, -o OPT, ...) have no meaning here; they are
# passed to COMMAND as HVL_AGENT_SSH_OPTIONS so that tests can see them arrive.
opts=""
while [ $# -gt 0 ]; do
  case "$1" in
    -p | -i | -o | -l | -F | -E | -b | -c | -m | -J) opts="$opts $1 $2"; shift 2 ;;
    -*) opts="$opts $1"; shift ;;
    *) break ;;
  esac
done
host="$1"
[ $# -ge 2 ] || { echo "hosts_agent: usage: AGENT [ssh options] HOST COMMAND..." >&2; exit 255; }
shift
# HOST is <tb>-h<I>; its testbed's host list is /run/hvl-testbed/<tb>/hosts.
tb="${host%-h*}"
if [ "$tb" = "$host" ] || ! grep -qx -- "$host" "/run/hvl-testbed/$tb/hosts" 2>/dev/null; then
  echo "hosts_agent: cannot reach host '$host': not a host of any simulated-hosts testbed" >&2
  exit 255
fi
link="$(ip -n "$host" -o link show eth0 2>/dev/null)" || {
  echo "hosts_agent: cannot reach host '$host': its network namespace is gone" >&2
  exit 255
}
case "$link" in
  *"state UP"*) ;;
  *) echo "hosts_agent: cannot reach host '$host': its network link is down" >&2; exit 255 ;;
esac
exec ip netns exec "$host" unshare --uts env -i HOME="${HOME:-/root}" USER="${USER:-root}" LOGNAME="${USER:-root}" \
  SHELL=/bin/sh LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HVL_AGENT_SSH_OPTIONS="${opts# }" \
  sh -c 'hostname "$0" && eval "$*"' "$host" "$@"
