"""The environments Kubernetes' training operators give their pods, played on
one machine (docs/launchers.md#kubernetes gives the manifests):

- Kubeflow's PyTorchJob without torchrun in the image's command: each pod gets
  RANK, WORLD_SIZE, MASTER_ADDR (the master pod's service) and MASTER_PORT and
  runs `python train.py`;
- PyTorchJob with torchrun as the command: the operator sets PET_NNODES,
  PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT, which
  torchrun reads as its arguments;
- MPIJob: the launcher pod runs mpirun (or horovodlite-run) with
  --hostfile /etc/mpi/hostfile, whose lines are "<pod>.<svc> slots=<n>"."""

import subprocess
import sys

from conftest import WORKER, check_training, clean_env, free_port, read_ranks, require_torchrun, run
from horovodlite.runner import hosts


def test_pytorchjob_plain_python(tmp_path):
    env = clean_env(HVL_TEST_OUT=tmp_path, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port())
    pods = [subprocess.Popen([sys.executable, WORKER], env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True) for r in (1, 0)]  # any start order
    outs = [p.communicate(timeout=120)[0] for p in pods]
    assert all(p.returncode == 0 for p in pods), "\n".join(o[-4000:] for o in outs)
    results = read_ranks(tmp_path, 2)
    check_training(results)
    assert all(r["gloo"] for r in results)


def test_pytorchjob_torchrun_pet_variables(tmp_path):
    require_torchrun()
    env = clean_env(HVL_TEST_OUT=tmp_path, PET_NNODES=1, PET_NPROC_PER_NODE=2, PET_NODE_RANK=0,
                    PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=free_port())
    run([sys.executable, "-m", "torch.distributed.run", WORKER], env)
    results = read_ranks(tmp_path, 2)
    check_training(results)
    assert [r["env"]["LOCAL_RANK"] for r in results] == ["0", "1"]


def test_mpijob_hostfile(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("train-worker-0.train-worker.default.svc slots=2\n"
                        "train-worker-1.train-worker.default.svc slots=2\n")
    assert hosts.parse_hostfile(str(hostfile)) == [("train-worker-0.train-worker.default.svc", 2),
                                                   ("train-worker-1.train-worker.default.svc", 2)]
