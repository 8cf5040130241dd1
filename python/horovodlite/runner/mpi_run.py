"""horovodlite-run --mpi: the job under mpirun (Horovod 0.28's
horovod/runner/mpi_run.py, our own code), beside runner/gloo_run.py.

Every job gets runner/mpi_flags.py's flags (no binding, idle ranks yield, Open
MPI's openib and OFI components left out unless the caller picks the BTLs or
MTLs), the hosts (-H), the ssh arguments (plm_rsh_args), the network interfaces
(btl_tcp_if_include, oob_tcp_if_include), the job's variables (-x NAME=VALUE)
and the names of worker_env.forwarded_environment (-x NAME: remote ranks get
them too; local ranks inherit mpirun's environment, worker_env.rank_environment).
"""

import os
import shlex

from horovodlite.runner import hosts as hosts_util
from horovodlite.runner import mpi_flags, worker_env
from horovodlite.runner.launch_args import call, host_list, interfaces, ssh_args


def _is_root():
    return hasattr(os, "geteuid") and os.geteuid() == 0


def mpirun_base(args, np, testbed=None):
    """mpirun -np `np` and the arguments every job gets."""
    cmd = (testbed.mpirun_prefix() if testbed else []) + [args.mpirun, "-np", str(np)]
    # Ranks may outnumber cores (tests, small machines): no pinning, and idle
    # ranks yield the CPU instead of spinning in MPI progress loops.
    cmd += mpi_flags.JOB_FLAGS
    if _is_root():
        cmd += ["--allow-run-as-root"]
    if testbed:
        cmd += testbed.mpirun_args(interfaces_given=bool(interfaces(args)))
    cmd += component_exclusions(args, testbed)
    return cmd


def _mca_keys(tokens):
    """The MCA parameter names that mpirun arguments set."""
    return {tokens[i + 1] for i, tok in enumerate(tokens[:-1]) if tok in ("-mca", "--mca", "-gmca", "--gmca")}


def component_exclusions(args, testbed=None):
    """Leave out Open MPI's openib and OFI (libfabric) components, as horovodrun
    leaves out openib: Open MPI 4.1's OFI components can hang MPI_Init itself
    (docs/reliability.md). Not where the caller picks the BTLs or MTLs (in
    --mpi-args, the testbed's settings or OMPI_MCA_btl / OMPI_MCA_mtl): Open MPI
    would join a second value with the first."""
    given = _mca_keys(shlex.split(getattr(args, "mpi_args", "") or ""))
    if testbed:
        given |= {key for key, _ in testbed.mca}
    given |= {name[len("OMPI_MCA_"):] for name in os.environ if name.startswith("OMPI_MCA_")}
    out = []
    for key, value in mpi_flags.mca_settings(mpi_flags.EXCLUSIONS):
        if key not in given:
            out += ["--mca", key, value]
    return out


def mpirun_command(args, job_env, testbed=None, hosts=None, private_names=()):
    """The whole mpirun command line of the job `args` describes;
    `private_names` are exported by name only (-x NAME: the value stays off the
    command line)."""
    cmd = mpirun_base(args, args.np, testbed)
    if hosts is None and (args.hosts or args.hostfile):
        hosts = host_list(args)
    if hosts:
        cmd += ["-H", hosts_util.format_hosts(hosts)]
    if ssh_args(args):
        cmd += ["--mca", "plm_rsh_args", " ".join(shlex.quote(a) for a in ssh_args(args))]
    nics = interfaces(args)
    if nics:
        cmd += ["--mca", "btl_tcp_if_include", nics, "--mca", "oob_tcp_if_include", nics]
    if args.output_filename:
        cmd += ["--output-filename", os.path.abspath(args.output_filename)]
    for name, value in sorted(job_env.items()):
        cmd += ["-x", "%s=%s" % (name, value)]
    # The caller's forwarded variables reach remote hosts too (local ranks
    # inherit them anyway).
    for name in sorted(worker_env.forwarded_environment()):
        if name not in job_env:
            cmd += ["-x", name]
    for name in sorted(private_names):
        cmd += ["-x", name]
    cmd += shlex.split(args.mpi_args)
    cmd += args.command
    return cmd


def launch_mpi(args, job_env, testbed=None, hosts=None, secret=None):
    """Runs the job under mpirun; returns its exit code (128 + N when mpirun
    dies of signal N, 130 when interrupted here). `secret`: a job secret for
    the ranks (HOROVODLITE_SECRET_KEY, exported by name), where the caller
    serves them a store (runner/interactive.py)."""
    private = {worker_env.SECRET_ENV: secret} if secret else {}
    cmd = mpirun_command(args, job_env, testbed, hosts, private_names=private)
    env = worker_env.rank_environment(False, job_env, private)
    if _is_root():
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return call(cmd, env, args.verbose)
