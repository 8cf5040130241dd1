"""What horovodlite-run's flags say about where and how the ranks start, read
the same way by both launchers (runner/mpi_run.py and runner/gloo_run.py, through
run.py): the host list, the network interfaces and the ssh arguments; and how
a launcher runs the command it built."""

import shlex
import subprocess
import sys

from horovodlite.runner import hosts as hosts_util


def call(cmd, env, verbose):
    """Runs `cmd` (printed first when `verbose`) and returns its exit code:
    128 + N when it dies of signal N, 130 when interrupted here."""
    if verbose:
        print("horovodlite-run: " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    try:
        rc = subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 130
    return 128 - rc if rc < 0 else rc


def interfaces(args):
    """--network-interface values, comma-joined ("" when none)."""
    names = []
    for value in args.nics or []:
        names += [n.strip() for n in value.split(",") if n.strip()]
    return ",".join(names)


def host_list(args):
    """[(host, slots)] from -H or --hostfile; None for this machine only."""
    if args.hostfile:
        hosts = hosts_util.parse_hostfile(args.hostfile)
    elif args.hosts:
        hosts = hosts_util.parse_hosts(args.hosts)
    else:
        return None
    hosts_util.check_duplicates(hosts)
    return hosts


def ssh_args(args):
    """What horovodrun hands to ssh (-p, -i): through Open MPI's plm_rsh_args
    under mpirun, to the launch agent in a Gloo job."""
    out = []
    if args.ssh_port:
        out += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        out += ["-i", args.ssh_identity_file]
    return out
