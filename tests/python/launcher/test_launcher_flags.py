"""horovodlite-run's horovodrun flags on this machine: each reaches the ranks,
hostfiles, unknown and unsupported flags, --check-build, the start-time host
check and the version agreement. Every test starts its own mpirun."""

import os
import re
import subprocess
import sys
import time

import horovodlite.torch as hvd
import pytest
import torch
from horovodlite.runner import mpi_run
from launch_util import MPIRUN, REPO, clean_env, launch, read_reports, report_command

import horovodlite
from horovodlite import run


def test_each_flag_reaches_the_ranks(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# local slots\nlocalhost slots=2\n")
    out_dir = tmp_path / "out"
    timeline = tmp_path / "timeline.json"
    options = [
        "-np", "2", "--hostfile", str(hostfile),
        "--fusion-threshold-mb", "1", "--cycle-time-ms", "2.5", "--cache-capacity", "16",
        "--hierarchical-allreduce", "--hierarchical-allgather",
        "--timeline-filename", str(timeline), "--timeline-mark-cycles",
        "--no-stall-check", "--stall-check-warning-time-seconds", "7", "--stall-check-shutdown-time-seconds", "9",
        "--log-level", "debug", "--output-filename", str(out_dir),
        "--network-interface", "lo", "-p", "2222", "-i", "/nonexistent/id_key",
        "--start-timeout", "5", "--mpi-args=-x HVL_FROM_MPI_ARGS=yes", "--verbose",
        "--autotune", "--autotune-log-file", str(tmp_path / "tune.csv"), "--autotune-warmup-samples", "1",
        "--autotune-steps-per-sample", "4", "--autotune-bayes-opt-max-samples", "6",
        "--autotune-gaussian-process-noise", "0.5",
    ]
    out = launch(options, report_command(tmp_path) + ["--an-arg"])
    assert out.returncode == 0, out.stdout
    reports = read_reports(tmp_path, 2)
    for r, got in enumerate(reports):
        assert (got["rank"], got["size"], got["local_size"], got["sum"]) == (r, 2, 2, 2.0)
        assert got["argv"] == [str(tmp_path), "--an-arg"]
        env = got["env"]
        expected = {
            "HOROVODLITE_FUSION_THRESHOLD": str(1024 * 1024),
            "HOROVODLITE_CYCLE_TIME": "2.5",
            "HOROVODLITE_CACHE_CAPACITY": "16",
            "HOROVODLITE_HIERARCHICAL_ALLREDUCE": "1",
            "HOROVODLITE_HIERARCHICAL_ALLGATHER": "1",
            "HOROVODLITE_TIMELINE": str(timeline),
            "HOROVODLITE_TIMELINE_MARK_CYCLES": "1",
            "HOROVODLITE_STALL_CHECK_DISABLE": "1",
            "HOROVODLITE_STALL_CHECK_TIME_SECONDS": "7.0",
            "HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS": "9.0",
            "HOROVODLITE_LOG_LEVEL": "debug",
            "NCCL_SOCKET_IFNAME": "lo",
            "OMPI_MCA_btl_tcp_if_include": "lo",
            "OMPI_MCA_oob_tcp_if_include": "lo",
            "OMPI_MCA_plm_rsh_args": "-p 2222 -i /nonexistent/id_key",
            "HVL_FROM_MPI_ARGS": "yes",
            "HOROVODLITE_AUTOTUNE": "1",
            "HOROVODLITE_AUTOTUNE_LOG": str(tmp_path / "tune.csv"),
            "HOROVODLITE_AUTOTUNE_WARMUP_SAMPLES": "1",
            "HOROVODLITE_AUTOTUNE_STEPS_PER_SAMPLE": "4",
            "HOROVODLITE_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "6",
            "HOROVODLITE_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "0.5",
        }
        assert {k: env.get(k) for k in expected} == expected
        # --output-filename: each rank's output in its own file; with --log-level
        # debug the library itself says which settings it started with.
        stderr = (out_dir / "1" / ("rank.%d" % r) / "stderr").read_text()
        assert "[horovodlite debug rank %d] started: size 2, fusion threshold 1048576 B, cycle time 2.5 ms, " \
               "cache capacity 16" % r in stderr, stderr
    # rank 0 wrote the timeline, with the cycles marked
    assert '"CYCLE_START"' in timeline.read_text()
    # --verbose prints the mpirun command
    assert "horovodlite-run: " in out.stdout and " -H localhost:2 " in out.stdout


def test_hosts_flag_with_local_slots(tmp_path):
    out = launch(["-np", "2", "-H", "localhost:2"], report_command(tmp_path))
    assert out.returncode == 0, out.stdout
    assert [(g["rank"], g["local_size"], g["sum"]) for g in read_reports(tmp_path, 2)] == [(0, 2, 2.0), (1, 2, 2.0)]


@pytest.mark.parametrize("content, message", [
    ("localhost slots=two\n", "line 1: 'localhost slots=two' is not '<hostname> slots=<n>'"),
    ("# nothing\n\n", "lists no hosts"),
    ("localhost slots=1\nlocalhost slots=1\n", "host 'localhost' is listed twice"),
    ("localhost slots=0\n", "host 'localhost' has 0 slots"),
])
def test_bad_hostfiles_are_clear_errors(tmp_path, content, message):
    hostfile = tmp_path / "hosts"
    hostfile.write_text(content)
    out = launch(["-np", "1", "--hostfile", str(hostfile)], ["true"])
    assert out.returncode == 2 and message in out.stdout, out.stdout


def test_more_ranks_than_slots_is_an_error(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=2\n")
    out = launch(["-np", "3", "--hostfile", str(hostfile)], ["true"])
    assert out.returncode == 2 and "-np 3 is more than the 2 slots" in out.stdout, out.stdout
    out = launch(["-np", "2", "-H", "localhost"], ["true"])
    assert out.returncode == 2 and "'localhost' is not <hostname>:<slots>" in out.stdout, out.stdout


@pytest.mark.parametrize("flags, message", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--fusion-threshold"], "unrecognized arguments: --fusion-threshold"),  # no abbreviations
    (["--autotune-steps-per-sample", "0"], "must be >= 1, got 0"),
    (["--gloo", "--mpi"], "not allowed with argument"),
    (["--min-np", "3"], "-np 2 is outside --min-np 3"),
    (["--min-np", "2", "--max-np", "1"], "--min-np 2 is more than --max-np 1"),
    (["--max-np", "1"], "-np 2 is outside --min-np 2 .. --max-np 1"),
    (["--reset-limit", "1"], "--reset-limit is for elastic jobs"),
    (["--min-np", "1", "--blacklist-cooldown-range", "5", "2"], "lower limit 5 is above the upper limit 2"),
    (["--min-np", "1", "--mpi"], "elastic jobs (--min-np/--max-np/--host-discovery-script) run on Gloo"),
    (["--log-level", "chatty"], "must be one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL"),
    (["-p", "0"], "must be a port number"),
    (["-H", "localhost:2", "--hostfile", "h"], "not allowed with argument"),
])
def test_unknown_and_unsupported_flags_are_errors(tmp_path, flags, message):
    marker = tmp_path / "ran"
    out = launch(["-np", "2"] + flags, [sys.executable, "-c", "open(%r, 'w')" % str(marker)])
    assert out.returncode == 2 and message in out.stdout, out.stdout
    assert not marker.exists()  # nothing was launched


def test_unreachable_host_is_named_within_the_start_timeout(tmp_path):
    # A launch agent that never answers (like ssh to a host that drops packets)
    # and one that fails at once (like ssh to an unknown name).
    hang = tmp_path / "hang_agent.sh"
    hang.write_text("#!/bin/sh\nexec sleep 600\n")
    fail = tmp_path / "fail_agent.sh"
    fail.write_text("#!/bin/sh\necho \"ssh: Could not resolve hostname $1\" >&2\nexit 255\n")
    for agent in (hang, fail):
        agent.chmod(0o755)
    marker = tmp_path / "ran"
    command = [sys.executable, "-c", "open(%r, 'w')" % str(marker)]

    start = time.monotonic()
    out = launch(["-np", "2", "-H", "ghost-1:1,ghost-2:1", "--start-timeout", "2",
                  "--mpi-args=--mca plm_rsh_agent %s" % hang], command)
    elapsed = time.monotonic() - start
    assert out.returncode == 1, out.stdout
    assert "cannot reach 2 of 2 host(s) within --start-timeout 2 s (through hang_agent.sh)" in out.stdout
    assert "ghost-1: no answer within 2 s" in out.stdout and "ghost-2: no answer within 2 s" in out.stdout
    assert elapsed < 60, elapsed  # not a hang (the agent sleeps for 600 s)

    env = clean_env(OMPI_MCA_plm_rsh_agent=str(fail))
    out = launch(["-np", "2", "-H", "localhost:1,ghost-3:1"], command, env=env)
    assert out.returncode == 1, out.stdout
    assert "cannot reach 1 of 1 host(s)" in out.stdout
    assert "ghost-3: ssh: Could not resolve hostname ghost-3" in out.stdout
    assert not marker.exists()


def _expected_thread_level():
    script = ("import horovodlite.torch as hvd\nhvd.init()\n"
              "print('MULTIPLE' if hvd.mpi_threads_supported() else 'BELOW')\nhvd.shutdown()\n")
    out = subprocess.run([MPIRUN, "-np", "1", "--oversubscribe", "--mca", "btl", "^openib,ofi", "--mca", "mtl", "^ofi",
                          sys.executable, "-c", script],
                         env=clean_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"),
                         stdout=subprocess.PIPE, text=True, timeout=120)
    assert out.returncode == 0
    return out.stdout.strip().splitlines()[-1]


def test_check_build_says_what_this_build_has():
    out = launch(["--check-build"], [])
    assert out.returncode == 0, out.stdout
    text = out.stdout
    assert text.startswith("horovodlite v%s:\n" % horovodlite.__version__), text
    # PyTorch: built against the same major.minor that runs here
    built = re.search(r"\[X\] PyTorch: built against LibTorch (\d+)\.(\d+)\.\d+, running torch (\S+)", text)
    assert built and built.group(3) == torch.__version__, text
    assert torch.__version__.startswith("%s.%s." % built.groups()[:2]), text
    # MPI: the library mpi4py reports (an independent reading), and its thread level
    from mpi4py import MPI
    library = MPI.Get_library_version().split("\x00")[0].splitlines()[0].strip().rstrip(",")
    mpi = re.search(r"\[X\] MPI: (.*); MPI (\d\.\d); thread level (MPI_THREAD_\w+)", text)
    assert mpi and mpi.group(1) == library and mpi.group(2) == "%d.%d" % MPI.Get_version(), text
    level = _expected_thread_level()
    assert (mpi.group(3) == "MPI_THREAD_MULTIPLE") == (level == "MULTIPLE"), (text, level)
    # NCCL and CUDA: as the Python API reports them
    if hvd.nccl_built():
        code = hvd.nccl_built()
        assert "[X] NCCL: %d.%d.%d" % (code // 10000, code % 10000 // 100, code % 100) in text, text
    else:
        assert "[ ] NCCL: no" in text, text
    assert ("CUDA: no" in text) == (not hvd.cuda_built()), text
    # the ring and the fp16 path; the vector kernels iff this CPU has AVX2 and F16C
    assert re.search(r"\[X\] Ring: host allreduces from \d+ (MiB|KiB|bytes) \(HOROVODLITE_RING_THRESHOLD\), "
                     r"\d+ (MiB|KiB|bytes) segments", text), text
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    vector = {"avx2", "f16c"} <= flags
    assert ("AVX2/F16C kernels on this CPU" in text) == vector, text
    assert ("portable kernels (no AVX2/F16C on this CPU)" in text) == (not vector), text


def test_version_agrees_everywhere():
    with open(os.path.join(REPO, "horovodlite", "include", "horovodlite", "version.h")) as f:
        header = f.read()
    numbers = [re.search(r"^#define HVL_VERSION_%s (\d+)$" % p, header, re.M).group(1)
               for p in ("MAJOR", "MINOR", "PATCH")]
    version = ".".join(numbers)
    from horovodlite.torch import _C
    assert horovodlite.__version__ == version
    assert _C.version == version
    assert _C.build_info()["version"] == version
    setup = subprocess.run([sys.executable, "setup.py", "--version"], cwd=REPO, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, timeout=120)
    assert setup.returncode == 0 and setup.stdout.strip().splitlines()[-1] == version
    out = launch(["--version"], [])
    assert out.returncode == 0 and out.stdout.strip() == version, out.stdout


def test_options_map_to_mpirun_arguments():
    args = run.make_parser().parse_args(
        ["-np", "4", "-H", "a:2,b:2", "-p", "2200", "-i", "key", "--network-interfaces", "eth0,eth1",
         "--output-filename", "logs", "--no-hierarchical-allreduce", "--no-hierarchical-allgather",
         "--mpi-args=--map-by slot", "prog"])
    env = run.job_environment(args)
    assert env == {"HOROVODLITE_HIERARCHICAL_ALLREDUCE": "0", "HOROVODLITE_HIERARCHICAL_ALLGATHER": "0",
                   "NCCL_SOCKET_IFNAME": "eth0,eth1"}
    cmd = mpi_run.mpirun_command(args, env)
    joined = " ".join(cmd)
    assert cmd[:3] == ["mpirun", "-np", "4"] and cmd[-3:] == ["--map-by", "slot", "prog"]
    assert "-H a:2,b:2" in joined
    assert cmd[cmd.index("plm_rsh_args") + 1] == "-p 2200 -i key"
    assert cmd[cmd.index("btl_tcp_if_include") + 1] == "eth0,eth1"
    assert cmd[cmd.index("oob_tcp_if_include") + 1] == "eth0,eth1"
    assert cmd[cmd.index("--output-filename") + 1] == os.path.abspath("logs")


def test_ofi_components_left_out_unless_the_caller_picks(monkeypatch):
    # Open MPI 4.1's OFI components can hang MPI_Init (docs/reliability.md): left out by default ...
    for name in [n for n in os.environ if n.startswith("OMPI_MCA_")]:
        monkeypatch.delenv(name)
    cmd = mpi_run.mpirun_command(run.make_parser().parse_args(["-np", "2", "prog"]), {})
    assert cmd[cmd.index("btl") + 1] == "^openib,ofi" and cmd[cmd.index("mtl") + 1] == "^ofi"
    assert cmd[cmd.index("btl") - 1] == "--mca" and cmd[cmd.index("mtl") - 1] == "--mca"
    # ... but a choice of the caller's is never joined with ours.
    cmd = mpi_run.mpirun_command(run.make_parser().parse_args(["-np", "2", "--mpi-args=-mca btl tcp,self", "prog"]), {})
    assert cmd.count("btl") == 1 and cmd[cmd.index("btl") + 1] == "tcp,self"
    assert cmd[cmd.index("mtl") + 1] == "^ofi"
    monkeypatch.setenv("OMPI_MCA_mtl", "psm2")
    cmd = mpi_run.mpirun_command(run.make_parser().parse_args(["-np", "2", "prog"]), {})
    assert "mtl" not in cmd and cmd[cmd.index("btl") + 1] == "^openib,ofi"
