"""horovodlite-run: launch a horovodlite job through mpirun or, with --gloo (or
where mpirun is missing), without it; horovodrun's flags.

    horovodlite-run -np 4 python3 train.py --epochs 3
    horovodlite-run -np 8 -H host1:4,host2:4 --fusion-threshold-mb 32 ./train
    horovodlite-run -np 8 --hostfile hosts.txt -p 2222 --network-interface eth0 python3 train.py
    horovodlite-run --check-build
    python3 -m horovodlite.run -np 2 python3 script.py
    horovodlite-run --gloo -np 4 -H host1:2,host2:2 --network-interface eth0 python3 train.py

Flags have horovodrun 0.28's names and meanings; each becomes a HOROVODLITE_*
variable that mpirun exports to every rank, or an mpirun argument (the table is
in docs/python.md). horovodrun flags that horovodlite cannot honour, and unknown
flags, are errors. Before starting ranks on other hosts, each one is checked
(through the launch agent: ssh by default) within --start-timeout. The job's
exit code is forwarded (128 + N when mpirun dies of signal N). This file is the
command line and the checks of its flags; the launchers are runner/mpi_run.py
(the mpirun command) and runner/gloo_run.py. A Gloo job serves the rendezvous KV
store itself and starts the ranks with the Gloo-launch contract's HOROVOD_*
variables (runner/worker_env.py); its exit code is the first failing rank's,
and the other ranks are ended when one fails.
"""

import argparse
import os
import shlex
import shutil
import sys

from horovodlite import __version__
from horovodlite.runner import hosts as hosts_util
from horovodlite.runner import mpi_run, reachability
from horovodlite.runner.launch_args import call, host_list, interfaces, ssh_args
from horovodlite.runner.testbed import Testbed, TestbedError

LOG_LEVELS = ["TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"]
DEFAULT_START_TIMEOUT_S = 30

# horovodrun flags that horovodlite-run recognises but cannot honour: a clear
# error instead of "unrecognized arguments" (or, worse, silence).
_UNSUPPORTED = {
    "--jsrun": "horovodlite launches with mpirun only",
    "--config-file": "give the settings as flags or HOROVODLITE_* variables",
    "--mpi-threads-disable": "horovodlite always asks MPI for MPI_THREAD_MULTIPLE",
    "--num-nccl-streams": "horovodlite uses one NCCL stream",
    "--thread-affinity": "horovodlite does not pin its background thread",
}


class _Unsupported(argparse.Action):
    def __init__(self, option_strings, dest, nargs=None, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error("horovodrun's %s is not supported: %s" % (option_string, _UNSUPPORTED[option_string]))


class _CheckBuild(argparse.Action):
    """-cb makes -np optional (as in horovodrun)."""

    def __init__(self, option_strings, dest, np_action=None, **kwargs):
        self.np_action = np_action
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        self.np_action.required = False
        namespace.check_build = True


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1, got %s" % text)
    return value


def _non_negative_float(text):
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0, got %s" % text)
    return value


def _non_negative_int(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0, got %s" % text)
    return value


def _port(text):
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be a port number (1-65535), got %s" % text)
    return value


def _log_level(text):
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError("must be one of %s, got %s" % (", ".join(LOG_LEVELS), text))
    return text.upper()


def make_parser():
    parser = argparse.ArgumentParser(
        prog="horovodlite-run", allow_abbrev=False,
        description="Run a horovodlite program on N processes with mpirun; horovodrun's flags.")
    _add_job_arguments(parser)
    _add_ssh_arguments(parser)
    _add_tuneable_arguments(parser)
    _add_autotune_arguments(parser)
    _add_timeline_arguments(parser)
    _add_stall_check_arguments(parser)
    _add_library_arguments(parser)
    _add_elastic_arguments(parser)
    _add_logging_arguments(parser)
    _add_host_arguments(parser)
    _add_unsupported_arguments(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments")
    return parser


def _add_job_arguments(parser):
    """-np, -cb, the controller (--mpi / --gloo) and what every job takes."""
    parser.add_argument("-v", "--version", action="version", version=__version__, help="print the version")
    np_action = parser.add_argument("-np", "--num-proc", dest="np", type=_positive_int, default=None,
                                    help="number of processes (elastic: to start with; default --min-np)")
    parser.add_argument("-cb", "--check-build", dest="check_build", action=_CheckBuild, np_action=np_action,
                        default=False, help="print what this build of horovodlite has, and exit")
    parser.add_argument("--start-timeout", type=_positive_int, default=None,
                        help="seconds within which every host must answer before the job starts "
                             "(default: $HOROVOD_START_TIMEOUT or %d)" % DEFAULT_START_TIMEOUT_S)
    parser.add_argument("--network-interface", "--network-interfaces", dest="nics", action="append", default=None,
                        help="network interface(s) (comma-separated, or the flag repeated) for MPI's TCP "
                             "traffic (btl_tcp_if_include and oob_tcp_if_include); in a Gloo job the first one is "
                             "the ranks' HOROVOD_GLOO_IFACE")
    parser.add_argument("--output-filename", default=None,
                        help="mpirun --output-filename: each rank's output under this directory")
    parser.add_argument("--verbose", action="store_true",
                        help="print the mpirun command and the host checks; debug logging unless --log-level")
    parser.add_argument("--mpirun", default=os.environ.get("HOROVODLITE_MPIRUN", "mpirun"),
                        help="the mpirun to use (default: $HOROVODLITE_MPIRUN or mpirun)")
    controller = parser.add_mutually_exclusive_group()
    controller.add_argument("--mpi", dest="use_mpi", action="store_true",
                            help="launch with mpirun (the default where mpirun is found)")
    controller.add_argument("--gloo", dest="use_gloo", action="store_true",
                            help="launch without mpirun: ranks started directly or through ssh, Gloo rendezvous "
                                 "through the launcher (the default where mpirun is missing)")
    parser.add_argument("--gloo-timeout-seconds", type=_positive_int, default=None,
                        help="Gloo job: seconds within which the ranks must meet at the rendezvous and connect "
                             "(HOROVOD_GLOO_TIMEOUT_SECONDS; default 30)")


def _add_ssh_arguments(parser):
    """-p and -i: how ssh reaches the hosts."""
    ssh = parser.add_argument_group("SSH arguments")
    ssh.add_argument("-p", "--ssh-port", type=_port, default=None, help="SSH port on all the hosts")
    ssh.add_argument("-i", "--ssh-identity-file", default=None,
                     help="file from which the identity (private key) is read")


def _add_tuneable_arguments(parser):
    """Fusion, cycle time, cache and the hierarchical switches."""
    params = parser.add_argument_group("tuneable parameter arguments")
    params.add_argument("--fusion-threshold-mb", type=_non_negative_float, default=None,
                        help="largest fused allreduce batch in MiB (0 disables fusion)")
    params.add_argument("--cycle-time-ms", type=_non_negative_float, default=None,
                        help="longest wait of the background thread between cycles, in ms")
    params.add_argument("--cache-capacity", type=_non_negative_int, default=None,
                        help="response cache entries (0 disables the cache)")
    hier = params.add_mutually_exclusive_group()
    hier.add_argument("--hierarchical-allreduce", dest="hierarchical_allreduce", action="store_const", const=True,
                      default=None, help="allreduce inside each host, then across hosts, then inside again")
    hier.add_argument("--no-hierarchical-allreduce", dest="hierarchical_allreduce", action="store_const",
                      const=False, help="never use the hierarchical allreduce")
    hier_ag = params.add_mutually_exclusive_group()
    hier_ag.add_argument("--hierarchical-allgather", dest="hierarchical_allgather", action="store_const", const=True,
                         default=None, help="allgather across hosts rank by rank, then inside each host")
    hier_ag.add_argument("--no-hierarchical-allgather", dest="hierarchical_allgather", action="store_const",
                         const=False, help="never use the hierarchical allgather")


def _add_autotune_arguments(parser):
    """--autotune and its settings."""
    autotune = parser.add_argument_group("autotune arguments")
    autotune.add_argument("--autotune", action="store_true", default=None,
                          help="tune the fusion threshold, cycle time, eager-allreduce size (and, across hosts, "
                               "the hierarchical switches) by Bayesian optimisation while training; values set "
                               "by hand are kept")
    autotune.add_argument("--autotune-log-file", default=None, help="CSV log of the autotuner's samples (rank 0)")
    autotune.add_argument("--autotune-warmup-samples", type=_non_negative_int, default=None,
                          help="samples discarded first (default 3)")
    autotune.add_argument("--autotune-steps-per-sample", type=_positive_int, default=None,
                          help="training steps per sample (default 10)")
    autotune.add_argument("--autotune-bayes-opt-max-samples", type=_positive_int, default=None,
                          help="samples scored before the best parameters are kept (default 20)")
    autotune.add_argument("--autotune-gaussian-process-noise", type=_non_negative_float, default=None,
                          help="noise variance of the Gaussian process, in standardised units (default 0.8)")


def _add_timeline_arguments(parser):
    """--timeline-filename and --timeline-mark-cycles."""
    timeline = parser.add_argument_group("timeline arguments")
    timeline.add_argument("--timeline-filename", default=None, help="write a Chrome-tracing timeline to this file")
    timeline.add_argument("--timeline-mark-cycles", action="store_true", default=None,
                          help="mark the background thread's cycles on the timeline")


def _add_stall_check_arguments(parser):
    """The stall check's switch and times."""
    stall = parser.add_argument_group("stall check arguments")
    stall.add_argument("--no-stall-check", action="store_true", default=None, help="disable the stall check")
    stall.add_argument("--stall-check-warning-time-seconds", type=_non_negative_float, default=None,
                       help="seconds until a stall warning is logged (default 60)")
    stall.add_argument("--stall-check-shutdown-time-seconds", type=_non_negative_float, default=None,
                       help="seconds until stalled tensors fail and horovodlite shuts down (default 0: never)")


def _add_library_arguments(parser):
    """--mpi-args, passed to mpirun as they are."""
    library = parser.add_argument_group("library arguments")
    library.add_argument("--mpi-args", default="",
                         help='extra mpirun arguments, as one string: --mpi-args="--map-by ppr:2:node"')


def _add_elastic_arguments(parser):
    """--min-np, --max-np, discovery and the elastic job's bounds."""
    elastic = parser.add_argument_group("elastic arguments (a Gloo job that survives lost workers and takes in "
                                        "new hosts: horovodlite.torch.elastic)")
    elastic.add_argument("--min-np", "--min-num-proc", dest="min_np", type=_positive_int, default=None,
                         help="fewest processes to train with (default -np)")
    elastic.add_argument("--max-np", "--max-num-proc", dest="max_np", type=_positive_int, default=None,
                         help="most processes to train with (default: no limit)")
    elastic.add_argument("--slots-per-host", "--slots", dest="slots", type=_positive_int, default=None,
                         help="slots of a host the discovery script lists without ':<slots>' (default 1)")
    elastic.add_argument("--host-discovery-script", dest="discovery_script", default=None,
                         help="run every second; prints the available hosts, one '<host>[:<slots>]' a line")
    elastic.add_argument("--elastic-timeout", type=_positive_int, default=None,
                         help="seconds to wait for --min-np slots and for every worker to report after a "
                              "failure (default: $HOROVOD_ELASTIC_TIMEOUT or 600)")
    elastic.add_argument("--reset-limit", type=_non_negative_int, default=None,
                         help="most times the world is re-formed before the job fails (default: no limit)")
    elastic.add_argument("--blacklist-cooldown-range", type=_positive_int, nargs=2, default=None,
                         metavar=("LOW", "HIGH"),
                         help="seconds a failed host stays blacklisted: LOW*2^n+U(0,LOW) for its n-th "
                              "failure, clamped to [LOW, HIGH] (default: for good)")


def _add_logging_arguments(parser):
    """--log-level."""
    logging = parser.add_argument_group("logging arguments")
    logging.add_argument("--log-level", type=_log_level, default=None,
                         help="minimum level logged to stderr: %s (default WARNING)" % ", ".join(LOG_LEVELS))


def _add_host_arguments(parser):
    """-H or --hostfile, and --hosts-netns."""
    host_group = parser.add_argument_group("host arguments").add_mutually_exclusive_group()
    host_group.add_argument("-H", "--hosts", dest="hosts", default=None,
                            help="<hostname>:<slots>,... (default: this machine)")
    host_group.add_argument("-hostfile", "--hostfile", dest="hostfile", default=None,
                            help="a file of '<hostname> slots=<slots>' lines")
    parser.add_argument("--hosts-netns", metavar="TESTBED", default=None,
                        help="run on the simulated hosts of ci/hosts.sh's testbed TESTBED (network namespaces; root)")


def _add_unsupported_arguments(parser):
    """horovodrun flags that horovodlite-run recognises and refuses (_UNSUPPORTED)."""
    unsupported = parser.add_argument_group("horovodrun arguments that are errors here")
    for flag in sorted(_UNSUPPORTED):
        nargs = 0 if flag in ("--jsrun", "--mpi-threads-disable") else "?"
        unsupported.add_argument(flag, action=_Unsupported, nargs=nargs, help=argparse.SUPPRESS)


def job_environment(args):
    """The HOROVODLITE_* variables (and NCCL's) the flags ask for."""
    env = {}
    if args.fusion_threshold_mb is not None:
        env["HOROVODLITE_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1024 * 1024))
    if args.cycle_time_ms is not None:
        env["HOROVODLITE_CYCLE_TIME"] = repr(args.cycle_time_ms)
    if args.cache_capacity is not None:
        env["HOROVODLITE_CACHE_CAPACITY"] = str(args.cache_capacity)
    if args.hierarchical_allreduce is not None:
        env["HOROVODLITE_HIERARCHICAL_ALLREDUCE"] = "1" if args.hierarchical_allreduce else "0"
    if args.hierarchical_allgather is not None:
        env["HOROVODLITE_HIERARCHICAL_ALLGATHER"] = "1" if args.hierarchical_allgather else "0"
    if args.autotune:
        env["HOROVODLITE_AUTOTUNE"] = "1"
    if args.autotune_log_file:
        env["HOROVODLITE_AUTOTUNE_LOG"] = os.path.abspath(args.autotune_log_file)
    for flag in ("warmup_samples", "steps_per_sample", "bayes_opt_max_samples", "gaussian_process_noise"):
        value = getattr(args, "autotune_" + flag)
        if value is not None:
            env["HOROVODLITE_AUTOTUNE_" + flag.upper()] = repr(value)
    if args.timeline_filename:
        env["HOROVODLITE_TIMELINE"] = os.path.abspath(args.timeline_filename)
    if args.timeline_mark_cycles:
        env["HOROVODLITE_TIMELINE_MARK_CYCLES"] = "1"
    if args.no_stall_check:
        env["HOROVODLITE_STALL_CHECK_DISABLE"] = "1"
    if args.stall_check_warning_time_seconds is not None:
        env["HOROVODLITE_STALL_CHECK_TIME_SECONDS"] = repr(args.stall_check_warning_time_seconds)
    if args.stall_check_shutdown_time_seconds is not None:
        env["HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS"] = repr(args.stall_check_shutdown_time_seconds)
    if args.log_level:
        env["HOROVODLITE_LOG_LEVEL"] = args.log_level.lower()
    elif args.verbose:
        env["HOROVODLITE_LOG_LEVEL"] = "debug"
    nics = interfaces(args)
    if nics:
        env["NCCL_SOCKET_IFNAME"] = nics
    return env


def start_timeout(args):
    if args.start_timeout is not None:
        return args.start_timeout
    text = os.environ.get("HOROVODLITE_START_TIMEOUT", os.environ.get("HOROVOD_START_TIMEOUT"))
    if text is None:
        return DEFAULT_START_TIMEOUT_S
    try:
        value = int(text)
        if value >= 1:
            return value
    except ValueError:
        pass
    raise ValueError("HOROVOD_START_TIMEOUT must be a whole number of seconds >= 1, got '%s'" % text)


def check_hosts(args, hosts, testbed):
    """Every remote host answers through the launch agent within the start
    timeout; otherwise an error message naming the ones that did not."""
    remote = [name for name, _ in hosts if testbed or not hosts_util.is_local(name)]
    if not remote:
        return None
    timeout_s = start_timeout(args)
    agent = reachability.launch_agent(shlex.split(args.mpi_args), testbed.agent if testbed else None)
    if agent is None:
        return "no launch agent to reach %s: install ssh, or name one with --mpi-args='--mca plm_rsh_agent ...'" % (
            ", ".join(remote))
    if args.verbose:
        print("horovodlite-run: checking %s through %s (--start-timeout %d s)" % (
            ", ".join(remote), agent[0], timeout_s), file=sys.stderr, flush=True)
    failed = reachability.unreachable_hosts(remote, agent, ssh_args(args), timeout_s)
    if not failed:
        return None
    lines = ["cannot reach %d of %d host(s) within --start-timeout %d s (through %s):" % (
        len(failed), len(remote), timeout_s, os.path.basename(agent[0]))]
    lines += ["  %s: %s" % (host, reason) for host, reason in failed]
    return "\n".join(lines)


def _fail(message, code=1):
    print("horovodlite-run: error: " + message, file=sys.stderr, flush=True)
    return code


def is_elastic(args):
    return args.min_np is not None or args.max_np is not None or args.discovery_script is not None


def elastic_sizes(parser, args):
    """(np, min_np, max_np) of an elastic job, or a usage error."""
    min_np = args.min_np if args.min_np is not None else args.np
    if min_np is None:
        parser.error("an elastic job needs --min-np or -np")
    max_np = args.max_np
    if args.min_np is not None and max_np is not None and min_np > max_np:
        parser.error("--min-np %d is more than --max-np %d" % (min_np, max_np))
    np = args.np if args.np is not None else min_np
    if np < min_np or (max_np is not None and np > max_np):
        parser.error("-np %d is outside --min-np %d .. --max-np %s" % (np, min_np, max_np if max_np else "(none)"))
    return np, min_np, max_np if max_np is not None else 1 << 30


def elastic_timeout(args):
    if args.elastic_timeout is not None:
        return args.elastic_timeout
    text = os.environ.get("HOROVODLITE_ELASTIC_TIMEOUT", os.environ.get("HOROVOD_ELASTIC_TIMEOUT", "600"))
    try:
        value = int(text)
        if value >= 1:
            return value
    except ValueError:
        pass
    raise ValueError("HOROVOD_ELASTIC_TIMEOUT must be a whole number of seconds >= 1, got '%s'" % text)


def built_with_mpi():
    """Whether the installed horovodlite has its MPI backend (HVL_WITH_MPI); read
    from the file the build writes, so that choosing the transport loads no torch.
    A source tree that was never built says nothing: assume it has."""
    try:
        from horovodlite._build import MPI
    except ImportError:
        return True
    return bool(MPI)


def wants_gloo(args):
    """--gloo, or neither --gloo nor --mpi and either no mpirun to be found or a
    build without MPI (elastic jobs always run on Gloo)."""
    if args.use_gloo or is_elastic(args):
        return True
    return not args.use_mpi and (shutil.which(args.mpirun) is None or not built_with_mpi())


def hosts_and_testbed(parser, args):
    """-H/--hostfile and --hosts-netns, checked (MPI and Gloo launches alike); a usage error otherwise."""
    try:
        hosts = host_list(args)
        testbed = Testbed(args.hosts_netns) if args.hosts_netns else None
        start_timeout(args)
    except (hosts_util.HostsError, TestbedError, ValueError) as e:
        parser.error(str(e))
    if testbed and not hosts and not getattr(args, "discovery_script", None):
        parser.error("--hosts-netns %s needs -H, --hostfile or --host-discovery-script with the testbed's "
                     "hosts (%s)" % (testbed.name, ", ".join(testbed.hosts)))
    return hosts, testbed


def gloo_main(parser, args, argv, extra_env=None, secret=None):
    from horovodlite.runner import gloo_run

    if args.mpi_args:
        parser.error("--mpi-args has no meaning in a Gloo job (no mpirun)")
    elastic = is_elastic(args)
    if elastic:
        if args.use_mpi:
            parser.error("elastic jobs (--min-np/--max-np/--host-discovery-script) run on Gloo, not --mpi")
        if args.discovery_script and (args.hosts or args.hostfile):
            parser.error("--host-discovery-script and -H/--hostfile cannot be combined")
        if args.blacklist_cooldown_range:
            from horovodlite.runner.elastic.discovery import validate_cooldown_range
            try:
                validate_cooldown_range(args.blacklist_cooldown_range)
            except ValueError as e:
                parser.error(str(e))
        np, min_np, max_np = elastic_sizes(parser, args)
        try:
            timeout_s = elastic_timeout(args)
        except ValueError as e:
            parser.error(str(e))

    hosts, testbed = hosts_and_testbed(parser, args)
    if elastic and not args.discovery_script and hosts is None:
        hosts = [("localhost", max_np if max_np < (1 << 30) else np)]
    if hosts is None:
        hosts = [("localhost", args.np)]
    if not elastic and sum(slots for _, slots in hosts) < args.np:
        parser.error("-np %d is more than the %d slots of the hosts given" % (
            args.np, sum(slots for _, slots in hosts)))
    if testbed and os.environ.get("HVL_LAUNCH_NS") != testbed.launch_ns:
        # The rendezvous server must be reachable from the simulated hosts: the
        # launcher itself runs in the testbed's launch namespace.
        env = dict(os.environ, HVL_LAUNCH_NS=testbed.launch_ns)
        cmd = testbed.mpirun_prefix() + [sys.executable, "-m", "horovodlite.run"] + list(argv)
        return call(cmd, env, args.verbose)

    is_local = (lambda name: False) if testbed else hosts_util.is_local
    remote = [name for name, _ in hosts if not is_local(name)] if not (elastic and args.discovery_script) else []
    agent = reachability.launch_agent([], testbed.agent if testbed else None)
    if remote:
        problem = check_hosts(args, hosts, testbed)
        if problem:
            return _fail(problem)
    nics = interfaces(args)
    if elastic:
        from horovodlite.runner.elastic.launch import launch_elastic, make_discovery
        discovery = make_discovery(args.discovery_script, hosts, args.slots)
        return launch_elastic(
            args.command, discovery, np, min_np, max_np, job_environment(args), timeout_s=timeout_s,
            reset_limit=args.reset_limit, cooldown_range=args.blacklist_cooldown_range,
            iface=nics.split(",")[0] if nics else None, gloo_timeout_s=args.gloo_timeout_seconds,
            agent=agent, ssh_args=ssh_args(args), is_local=is_local,
            log_level=args.log_level or ("DEBUG" if args.verbose else "INFO"))
    try:
        return gloo_run.launch_gloo(
            args.command, hosts, args.np, dict(job_environment(args), **(extra_env or {})),
            iface=nics.split(",")[0] if nics else None, timeout_s=args.gloo_timeout_seconds,
            agent=agent, ssh_args=ssh_args(args),
            output_dir=os.path.abspath(args.output_filename) if args.output_filename else None,
            verbose=args.verbose, is_local=is_local, secret=secret)
    except (RuntimeError, ValueError) as e:
        return _fail(str(e))


def main(argv=None, parser=None, extra_env=None, secret=None):
    """horovodlite-run's exit code. horovodlite.runner.run calls it with a
    `parser` whose errors raise, the variables of its own store (`extra_env`)
    and the job's `secret` (both Gloo's and MPI's ranks get it)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = parser or make_parser()
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if args.check_build:
        from horovodlite.runner.check_build import check_build
        # Without mpirun the report still says what is built; MPI's thread level stays unknown.
        return check_build(mpi_run.mpirun_base(args, 1) if shutil.which(args.mpirun) else None)
    if not args.command:
        parser.error("no command to run")
    if args.np is None and not is_elastic(args):
        parser.error("the following arguments are required: -np/--num-proc")
    if not is_elastic(args):
        for flag, value in (("--slots-per-host", args.slots), ("--elastic-timeout", args.elastic_timeout),
                            ("--reset-limit", args.reset_limit),
                            ("--blacklist-cooldown-range", args.blacklist_cooldown_range)):
            if value is not None:
                parser.error("%s is for elastic jobs (--min-np/--max-np/--host-discovery-script)" % flag)
    if wants_gloo(args):
        return gloo_main(parser, args, argv, extra_env, secret)
    if args.gloo_timeout_seconds is not None:
        parser.error("--gloo-timeout-seconds is for Gloo jobs (--gloo)")
    if not built_with_mpi():
        parser.error("--mpi: this horovodlite was built without MPI (HVL_WITH_MPI=OFF); launch with --gloo")
    if shutil.which(args.mpirun) is None:
        parser.error("cannot find '%s' (install Open MPI or pass --mpirun)" % args.mpirun)
    hosts, testbed = hosts_and_testbed(parser, args)
    if hosts and sum(slots for _, slots in hosts) < args.np:
        parser.error("-np %d is more than the %d slots of the hosts given" % (
            args.np, sum(slots for _, slots in hosts)))

    if hosts:
        problem = check_hosts(args, hosts, testbed)
        if problem:
            return _fail(problem)

    return mpi_run.launch_mpi(args, dict(job_environment(args), **(extra_env or {})), testbed, hosts, secret)


if __name__ == "__main__":
    sys.exit(main())
