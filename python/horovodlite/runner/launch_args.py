"""What horovodlite-run's flags say about where and how the ranks start, read
the same way by both launchers (runner/mpi_run.py and runner/gloo_run.py, through
run.py): the host list, the network interfaces and the ssh arguments."""

from horovodlite.runner import hosts as hosts_util


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
