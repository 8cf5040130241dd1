"""The simulated hosts of ci/hosts.sh, as horovodlite-run --hosts-netns NAME sees
them: its state lives in /run/hvl-testbed/NAME (the launch agent, the host list,
the launch namespace and the Open MPI settings, mpi.env)."""

import os

from horovodlite.runner import mpi_flags

STATE_ROOT = "/run/hvl-testbed"

# Settings the launcher passes anyway (mpi_flags.JOB_FLAGS): not repeated, since
# Open MPI joins repeated --mca values with commas.
_ALREADY_SET = {key for key, _ in mpi_flags.mca_settings(mpi_flags.JOB_FLAGS)}
_INTERFACE_PARAMS = {"oob_tcp_if_include", "btl_tcp_if_include"}


class TestbedError(RuntimeError):
    pass


class Testbed:
    def __init__(self, name, state_root=STATE_ROOT):
        self.name = name
        self.dir = os.path.join(state_root, name)
        if not os.path.isfile(os.path.join(self.dir, "mpi.env")):
            raise TestbedError("--hosts-netns %s: no simulated-hosts testbed '%s' (%s); start one with "
                               "'HVL_TESTBED=%s ci/hosts.sh up N [RATE]'" % (name, name, self.dir, name))
        self.agent = os.path.join(self.dir, "agent")
        self.launch_ns = self._read("launch_ns").strip()
        self.hosts = self._read("hosts").split()
        self.mca = []
        for line in self._read("mpi.env").splitlines():
            key, _, value = line.partition("=")
            if key.startswith("OMPI_MCA_"):
                self.mca.append((key[len("OMPI_MCA_"):], value))

    def _read(self, name):
        with open(os.path.join(self.dir, name)) as f:
            return f.read()

    def mpirun_prefix(self):
        """mpirun runs in the testbed's launch namespace (the only place with a
        route to the hosts)."""
        return ["ip", "netns", "exec", self.launch_ns]

    def mpirun_args(self, interfaces_given):
        args = []
        for key, value in self.mca:
            if key in _ALREADY_SET or (interfaces_given and key in _INTERFACE_PARAMS):
                continue
            args += ["--mca", key, value]
        return args
