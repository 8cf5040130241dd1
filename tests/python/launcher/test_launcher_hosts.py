"""horovodlite-run across simulated hosts (ci/hosts.sh: network namespaces on a
bridge, 198.18.0.0/24, Open MPI's rsh agent through `ip netns exec`): -H and
--hostfile across hosts, the flags reaching remote ranks (whose environment
holds only what mpirun forwards), and unreachable hosts named at start. Needs
root; skipped elsewhere. The module's testbed is removed whatever happens."""

import time

import pytest
from launch_util import hosts_sh, launch, read_reports, report_command, simulated_hosts


@pytest.fixture(scope="module")
def testbed():
    yield from simulated_hosts("p", 3, "2gbit")


def test_hosts_across_the_testbed(testbed, tmp_path):
    h1, h2 = testbed + "-h1", testbed + "-h2"
    out = launch(["-np", "4", "-H", "%s:2,%s:2" % (h1, h2), "--hosts-netns", testbed,
                  "--network-interface", "eth0", "-p", "2222", "-i", "/nonexistent/id_key",
                  "--fusion-threshold-mb", "2", "--cache-capacity", "8", "--log-level", "info",
                  "--no-stall-check", "--start-timeout", "20"],
                 report_command(tmp_path))
    assert out.returncode == 0, out.stdout
    reports = read_reports(tmp_path, 4)
    placed = [(g["rank"], g["hostname"], g["local_rank"], g["local_size"], g["cross_rank"], g["cross_size"])
              for g in reports]
    assert placed == [(0, h1, 0, 2, 0, 2), (1, h1, 1, 2, 0, 2), (2, h2, 0, 2, 1, 2), (3, h2, 1, 2, 1, 2)]
    for got in reports:
        assert got["sum"] == 4.0
        env = got["env"]
        # The agent starts each host's daemon with a fresh environment, like ssh:
        # these arrived through mpirun's -x and --mca.
        assert env["HOROVODLITE_FUSION_THRESHOLD"] == str(2 * 1024 * 1024)
        assert env["HOROVODLITE_CACHE_CAPACITY"] == "8"
        assert env["HOROVODLITE_LOG_LEVEL"] == "info"
        assert env["HOROVODLITE_STALL_CHECK_DISABLE"] == "1"
        assert env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert env["OMPI_MCA_btl_tcp_if_include"] == "eth0"
        # -p/-i went to the launch agent (ssh's place), which hands them on.
        assert env["HVL_AGENT_SSH_OPTIONS"] == "-p 2222 -i /nonexistent/id_key"


def test_hostfile_across_the_testbed(testbed, tmp_path):
    h1, h3 = testbed + "-h1", testbed + "-h3"
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("%s slots=1\n%s slots=2\n" % (h1, h3))
    out = launch(["-np", "3", "--hostfile", str(hostfile), "--hosts-netns", testbed, "--cycle-time-ms", "3"],
                 report_command(tmp_path))
    assert out.returncode == 0, out.stdout
    reports = read_reports(tmp_path, 3)
    assert [(g["hostname"], g["local_size"], g["cross_size"] if g["local_rank"] == 0 else None) for g in reports] \
        == [(h1, 1, 2), (h3, 2, 2), (h3, 2, None)]
    assert all(g["sum"] == 3.0 and g["env"]["HOROVODLITE_CYCLE_TIME"] == "3.0" for g in reports)
    assert all(g["env"]["HVL_AGENT_SSH_OPTIONS"] == "" for g in reports)


def test_host_not_in_the_testbed_is_named(testbed, tmp_path):
    marker = tmp_path / "ran"
    start = time.monotonic()
    out = launch(["-np", "2", "-H", "%s-h1:1,%s-h9:1" % (testbed, testbed), "--hosts-netns", testbed,
                  "--start-timeout", "10"], ["touch", str(marker)])
    assert out.returncode == 1, out.stdout
    assert "cannot reach 1 of 2 host(s) within --start-timeout 10 s (through agent)" in out.stdout, out.stdout
    assert "%s-h9: hosts_agent: cannot reach host '%s-h9': not a host of any simulated-hosts testbed" % (
        testbed, testbed) in out.stdout, out.stdout
    assert time.monotonic() - start < 60
    assert not marker.exists()


def test_host_whose_link_is_down_is_named(testbed, tmp_path):
    h2 = testbed + "-h2"
    marker = tmp_path / "ran"
    down = hosts_sh(testbed, "link", h2, "down")
    assert down.returncode == 0, down.stdout
    try:
        out = launch(["-np", "2", "-H", "%s-h1:1,%s:1" % (testbed, h2), "--hosts-netns", testbed,
                      "--start-timeout", "10"], ["touch", str(marker)])
    finally:
        up = hosts_sh(testbed, "link", h2, "up")
    assert up.returncode == 0, up.stdout
    assert out.returncode == 1, out.stdout
    assert "%s: hosts_agent: cannot reach host '%s': its network link is down" % (h2, h2) in out.stdout, out.stdout
    assert not marker.exists()


def test_unknown_testbed_is_a_clear_error(tmp_path):
    out = launch(["-np", "1", "-H", "zz-h1:1", "--hosts-netns", "nosuchtb"], ["true"])
    assert out.returncode == 2, out.stdout
    assert "--hosts-netns nosuchtb: no simulated-hosts testbed 'nosuchtb'" in out.stdout, out.stdout
