"""The mpirun arguments every horovodlite job gets: the one place they are written.

JOB_FLAGS: ranks may outnumber cores (tests, small machines): no core binding,
and idle ranks yield the CPU instead of spinning in MPI's progress loops.
EXCLUSIONS: Open MPI's openib and OFI (libfabric) components are left out: Open
MPI 4.1.4 can hang inside MPI_Init in its OFI components (docs/reliability.md).

Read by horovodlite-run (run.py), bench/train_bench.py and the Python tests
(import this module), and by tests/CMakeLists.txt and ci/mpirun_flags.sh, which
parse the two assignments below: keep each on one line, in this form, with
flags that hold no spaces or quotes.
"""

JOB_FLAGS = "--oversubscribe --bind-to none --mca mpi_yield_when_idle 1".split()
EXCLUSIONS = "--mca btl ^openib,ofi --mca mtl ^ofi".split()


def exclusion_pairs():
    """EXCLUSIONS as (MCA parameter, value) pairs: [("btl", "^openib,ofi"), ...]."""
    return [(EXCLUSIONS[i + 1], EXCLUSIONS[i + 2]) for i in range(0, len(EXCLUSIONS), 3)]
