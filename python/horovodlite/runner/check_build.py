"""horovodlite-run --check-build: what this build has, in horovodrun's layout.

The MPI thread level is only known once MPI is initialised, so it comes from a
one-rank job started with the same mpirun (python -m horovodlite.runner.check_build
--thread-level prints it)."""

import subprocess
import sys
import textwrap

_MARK = "HVL_THREAD_LEVEL="


def _check(value):
    return "X" if value else " "


def _version_code(code, digits):
    """22809 -> "2.28.9" (NCCL: 4 digits major*10000), 12040 -> "12.4" (CUDA)."""
    if digits == "nccl":
        return "%d.%d.%d" % (code // 10000, (code % 10000) // 100, code % 100)
    return "%d.%d" % (code // 1000, (code % 1000) // 10)


def _bytes(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return "%d %s" % (n // size, unit)
    return "%d bytes" % n


def thread_level(mpirun_argv, timeout_s=120):
    """Runs a one-rank job that initialises horovodlite and reports MPI's thread
    level. `mpirun_argv`: the mpirun command up to (without) the program."""
    cmd = list(mpirun_argv) + [sys.executable, "-m", "horovodlite.runner.check_build", "--thread-level"]
    try:
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             timeout=timeout_s, text=True)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "unknown (a one-rank job failed: %s)" % e
    for line in out.stdout.splitlines():
        if line.startswith(_MARK):
            return line[len(_MARK):].strip()
    tail = out.stdout.strip().splitlines()[-1:] or ["exit code %d" % out.returncode]
    return "unknown (a one-rank job failed: %s)" % tail[0]


def report(info, torch_version, level):
    """The text --check-build prints. `info`: horovodlite.torch._C.build_info()."""
    ring_threshold = info["ring_threshold_bytes"]
    if ring_threshold < 0:
        ring = "off by default (HOROVODLITE_RING_THRESHOLD=-1)"
    else:
        ring = "host allreduces from %s (HOROVODLITE_RING_THRESHOLD), %s segments" % (
            _bytes(ring_threshold), _bytes(info["ring_segment_bytes"]))
    wire = "/".join(info.get("compressions", "fp16").split(","))
    fp16 = "%s on the wire, %s" % (wire, "AVX2/F16C kernels on this CPU" if info["cpu_avx2_f16c"]
                                   else "portable kernels (no AVX2/F16C on this CPU)")
    nccl = _version_code(info["nccl_version"], "nccl") if info["nccl_version"] else "no"
    cuda = _version_code(info["cuda_runtime_version"], "cuda") if info["cuda"] else "no"
    if info["mpi"]:
        mpi = "%s; MPI %s; thread level %s" % (info["mpi_library"], info["mpi_version"], level)
    else:
        mpi = "not built (HVL_WITH_MPI=OFF): jobs run on Gloo"
    text = """\
        horovodlite v{version}:

        Available Frameworks:
            [ ] TensorFlow
            [X] PyTorch: built against LibTorch {torch_built}, running torch {torch_running}
            [ ] MXNet

        Available Controllers:
            [{mpi_check}] MPI: {mpi}
            [{gloo_check}] Gloo

        Available Tensor Operations:
            [{nccl_check}] NCCL: {nccl}
            [ ] DDL
            [ ] CCL
            [{mpi_check}] MPI
            [{gloo_check}] Gloo
            [X] Ring: {ring}
            [X] fp16 compression: {fp16}

        CUDA: {cuda}
        """.format(version=info["version"], torch_built=info["torch_built_against"], torch_running=torch_version,
                   mpi_check=_check(info["mpi"]), mpi=mpi, gloo_check=_check(info["gloo"]),
                   nccl_check=_check(info["nccl_version"]), nccl=nccl, ring=ring, fp16=fp16, cuda=cuda)
    return textwrap.dedent(text)


def check_build(mpirun_argv):
    """Prints the report; returns the exit code. `mpirun_argv`: None without mpirun."""
    try:
        import torch

        from horovodlite.torch import _C
    except ImportError as e:
        print("horovodlite-run --check-build: cannot import horovodlite.torch (%s); is it built and on "
              "PYTHONPATH?" % e, file=sys.stderr)
        return 1
    info = _C.build_info()
    level = None
    if info["mpi"]:
        level = thread_level(mpirun_argv) if mpirun_argv else "unknown (no mpirun to start a one-rank job)"
    print(report(info, torch.__version__, level), end="")
    return 0


def _print_thread_level():
    import horovodlite.torch as hvd
    from horovodlite.torch import _C
    hvd.init()
    print(_MARK + _C.mpi_thread_level_name(), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    if sys.argv[1:] == ["--thread-level"]:
        _print_thread_level()
    else:
        sys.exit("usage: python -m horovodlite.runner.check_build --thread-level")
