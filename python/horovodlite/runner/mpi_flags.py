"""The mpirun arguments every horovodlite job gets: the one place they are written.

JOB_FLAGS: ranks may outnumber cores (tests, small machines): no core binding,
and idle ranks yield the CPU instead of spinning in MPI's progress loops.
EXCLUSIONS: Open MPI's openib and OFI (libfabric) components are left out: Open
MPI 4.1.4 can hang inside MPI_Init in its OFI components (docs/reliability.md).

Read by horovodlite-run (runner/mpi_run.py), the simulated-hosts testbed
(runner/testbed.py), the benchmarks and the Python tests (import this module),
and by tests/CMakeLists.txt and ci/mpirun_flags.sh, which parse the two
assignments below: keep each on one line, in this form, with flags that hold no
spaces or quotes.
"""

JOB_FLAGS = "--oversubscribe --bind-to none --mca mpi_yield_when_idle 1".split()
EXCLUSIONS = "--mca btl ^openib,ofi --mca mtl ^ofi".split()


def mca_settings(flags):
    """The (MCA parameter, value) pairs that mpirun `flags` of these forms set:
    mca_settings(EXCLUSIONS) == [("btl", "^openib,ofi"), ("mtl", "^ofi")];
    --oversubscribe is rmaps_base_oversubscribe 1, --bind-to X
    hwloc_base_binding_policy X (ci/mpirun_flags.sh's hvl_mpirun_mca does the
    same for the shell)."""
    out, i = [], 0
    while i < len(flags):
        if flags[i] == "--oversubscribe":
            out.append(("rmaps_base_oversubscribe", "1"))
            i += 1
        elif flags[i] == "--bind-to":
            out.append(("hwloc_base_binding_policy", flags[i + 1]))
            i += 2
        elif flags[i] == "--mca":
            out.append((flags[i + 1], flags[i + 2]))
            i += 3
        else:
            raise ValueError("mpi_flags: no MCA parameter for the mpirun flag '%s'" % flags[i])
    return out
