"""Ray Train + horovodlite, on a local Ray of 2 CPUs:

    PYTHONPATH=build/python .venv/bin/python examples/ray_torch_trainer.py

ray.train.torch.TorchTrainer starts the workers and their torch.distributed
group; hvd.init() inside the loop joins that group (its rank, size and store:
hvd.rank() is Ray Train's world rank) and DistributedOptimizer averages the
gradients over horovodlite's Gloo transport. Rank 0 reports the averaged loss
with a checkpoint of the model. Needs ray[train] (pandas, pyarrow, pydantic).
"""

import os
import tempfile

import horovodlite.torch as hvd
import ray
import ray.train
import torch
from ray.train.torch import TorchTrainer


def train_loop_per_worker(config):
    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=config["lr"] * hvd.size()),
                                   named_parameters=model.named_parameters())
    data = torch.Generator().manual_seed(hvd.rank())  # each rank its own batches
    for _ in range(config["steps"]):
        x = torch.randn(32, 8, generator=data)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        loss.backward()
        opt.step()
    metrics = {"loss": hvd.allreduce(loss.detach(), name="loss").item(), "size": hvd.size(), "rank": hvd.rank()}
    with tempfile.TemporaryDirectory() as d:
        checkpoint = None
        if hvd.rank() == 0:  # Ray Train keeps rank 0's metrics, with its checkpoint
            torch.save(model.state_dict(), os.path.join(d, "model.pt"))
            checkpoint = ray.train.Checkpoint.from_directory(d)
        ray.train.report(metrics, checkpoint=checkpoint)
    hvd.shutdown()


def main():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,  # logs: /tmp/ray/session_latest/logs
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    trainer = TorchTrainer(train_loop_per_worker, train_loop_config={"lr": 0.01, "steps": 200},
                           scaling_config=ray.train.ScalingConfig(num_workers=2, use_gpu=False),
                           run_config=ray.train.RunConfig(storage_path=tempfile.mkdtemp(prefix="hvl-ray-train-")))
    result = trainer.fit()
    print("%d workers, loss averaged over them %.4f, rank 0's model in %s"
          % (result.metrics["size"], result.metrics["loss"], result.checkpoint.path))
    ray.shutdown()


if __name__ == "__main__":
    main()
