"""torchrun across simulated hosts (ci/hosts.sh: a network namespace per
host, 198.18.0.0/24): one agent per host meeting through a c10d
rendezvous on the first host, two ranks each; hvd's topology is torchrun's and
training crosses the link. Needs root; skipped elsewhere."""

import os
import shlex
import subprocess
import sys

import pytest
from conftest import HERE, WORKER, check_training, clean_env, read_ranks, require_torchrun

sys.path.insert(0, os.path.join(HERE, os.pardir, "launcher"))
from launch_util import simulated_hosts  # noqa: E402


@pytest.fixture(scope="module")
def testbed():
    yield from simulated_hosts("t", 2, "2gbit")


def _on_host(host, argv):
    """argv run in `host`'s network namespace. The machine's hostname stays (torchrun's
    c10d rendezvous resolves it; the testbed's names are not in any resolver):
    GROUP_RANK alone tells the hosts apart, as for two agents on one machine."""
    return ["ip", "netns", "exec", host] + argv


def test_two_hosts_two_ranks_each(testbed, tmp_path):
    require_torchrun()
    env = clean_env(HVL_TEST_OUT=tmp_path)
    rdzv = "198.18.0.11:29400"  # the first host (ci/hosts.sh: hI is 198.18.0.(10+I))
    # The hostname resolves outside the testbed (as in many containers): --local_addr
    # gives each agent its own address and is_host tells the first it serves the rendezvous.
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "2",
            "--rdzv_backend", "c10d", "--rdzv_endpoint", rdzv, "--rdzv_id", "hvl-hosts"]
    agents = []
    for i in (1, 2):
        own = ["--local_addr", "198.18.0.%d" % (10 + i), "--rdzv_conf", "is_host=%d,join_timeout=60" % (i == 1)]
        agents.append(subprocess.Popen(_on_host("%s-h%d" % (testbed, i), argv + own + [WORKER]), env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [a.communicate(timeout=240)[0] for a in agents]
    for a, out in zip(agents, outs):
        assert a.returncode == 0, "%s\n%s" % (shlex.join(a.args), out[-6000:])
    results = read_ranks(tmp_path, 4)
    check_training(results)
    for res in results:
        assert str(res["local_rank"]) == res["env"]["LOCAL_RANK"]
        assert (res["local_size"], res["cross_size"]) == (2, 2)
        assert str(res["cross_rank"]) == res["env"]["GROUP_RANK"]


def test_cpp_train_two_hosts(testbed, tmp_path):
    """The LibTorch example across the hosts: its ranks meet in torchrun's store."""
    require_torchrun()
    train = os.environ.get("HVL_TRAIN_BIN")
    if not train:
        pytest.skip("HVL_TRAIN_BIN (the C++ train example) not given")
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
            "--rdzv_backend", "c10d", "--rdzv_endpoint", "198.18.0.11:29401", "--rdzv_id", "hvl-hosts-cc"]
    agents = []
    for i in (1, 2):
        own = ["--local_addr", "198.18.0.%d" % (10 + i), "--rdzv_conf", "is_host=%d,join_timeout=60" % (i == 1)]
        agents.append(subprocess.Popen(_on_host("%s-h%d" % (testbed, i), argv + own + ["--no_python", train,
                                                                                         "--epochs", "1"]),
                                       env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [a.communicate(timeout=240)[0] for a in agents]
    for a, out in zip(agents, outs):
        assert a.returncode == 0, "%s\n%s" % (shlex.join(a.args), out[-6000:])
    both = "".join(outs)
    assert "train: 2 ranks" in both and "weights identical on all 2 ranks: yes" in both, both[-4000:]
