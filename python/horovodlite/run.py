"""horovodlite-run: launch a horovodlite job through mpirun.

    horovodlite-run -np 4 python3 train.py --epochs 3
    horovodlite-run -np 8 -H host1:4,host2:4 --fusion-threshold-mb 32 ./train
    python3 -m horovodlite.run -np 2 python3 script.py

Options map to HOROVODLITE_* variables that mpirun exports to every rank; the
job's exit code is forwarded (128 + N when mpirun dies of signal N).
"""

import argparse
import os
import shlex
import shutil
import subprocess
import sys


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


def make_parser():
    parser = argparse.ArgumentParser(
        prog="horovodlite-run",
        description="Run a horovodlite program on N processes with mpirun.")
    parser.add_argument("-np", "--num-proc", dest="np", type=_positive_int, required=True,
                        help="number of processes")
    parser.add_argument("-H", "--hosts", dest="hosts", default=None,
                        help="host:slots,... (default: this machine)")
    parser.add_argument("--fusion-threshold-mb", type=_non_negative_float, default=None,
                        help="largest fused allreduce batch in MiB (0 disables fusion)")
    parser.add_argument("--cycle-time-ms", type=_non_negative_float, default=None,
                        help="longest wait of the background thread between cycles, in ms")
    parser.add_argument("--cache-capacity", type=_non_negative_int, default=None,
                        help="response cache entries (0 disables the cache)")
    parser.add_argument("--timeline-filename", default=None,
                        help="write a Chrome-tracing timeline to this file")
    parser.add_argument("--verbose", action="store_true", help="debug logging; print the mpirun command")
    parser.add_argument("--mpirun", default=os.environ.get("HOROVODLITE_MPIRUN", "mpirun"),
                        help="the mpirun to use (default: $HOROVODLITE_MPIRUN or mpirun)")
    parser.add_argument("--mpi-args", default="", help="extra arguments for mpirun, as one string")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments")
    return parser


def job_environment(args):
    """The HOROVODLITE_* variables the options ask for."""
    env = {}
    if args.fusion_threshold_mb is not None:
        env["HOROVODLITE_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1024 * 1024))
    if args.cycle_time_ms is not None:
        env["HOROVODLITE_CYCLE_TIME"] = repr(args.cycle_time_ms)
    if args.cache_capacity is not None:
        env["HOROVODLITE_CACHE_CAPACITY"] = str(args.cache_capacity)
    if args.timeline_filename:
        env["HOROVODLITE_TIMELINE"] = os.path.abspath(args.timeline_filename)
    if args.verbose:
        env["HOROVODLITE_LOG_LEVEL"] = "debug"
    return env


def mpirun_command(args, job_env):
    cmd = [args.mpirun, "-np", str(args.np)]
    if args.hosts:
        cmd += ["-H", args.hosts]
    # Ranks may outnumber cores (tests, small machines): no pinning, and idle
    # ranks yield the CPU instead of spinning in MPI progress loops.
    cmd += ["--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd += ["--allow-run-as-root"]
    for name, value in sorted(job_env.items()):
        cmd += ["-x", "%s=%s" % (name, value)]
    # Forward the caller's search paths and any HOROVODLITE_/HOROVOD_ settings
    # to remote hosts too (local ranks inherit them anyway).
    for name in sorted(os.environ):
        if name in job_env:
            continue
        if name in ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH") or name.startswith(("HOROVODLITE_", "HOROVOD_")):
            cmd += ["-x", name]
    cmd += shlex.split(args.mpi_args)
    cmd += args.command
    return cmd


def main(argv=None):
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command to run")
    if shutil.which(args.mpirun) is None:
        parser.error("cannot find '%s' (install Open MPI or pass --mpirun)" % args.mpirun)

    job_env = job_environment(args)
    cmd = mpirun_command(args, job_env)
    env = dict(os.environ)
    env.update(job_env)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    if args.verbose:
        print("horovodlite-run: " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    try:
        rc = subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 130
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main())
