"""One rank's part of a launcher test: hvd.init() under whatever launcher
started this process, its place in the world, and a few steps of
DistributedOptimizer on this rank's rows of a fixed global batch. Imported by
train_fn-style launchers (TorchDistributor, Ray Train) and run as a script by
the others (then it writes rank<R>.json to HVL_TEST_OUT)."""

import json
import os
import sys
import time

ROWS_PER_RANK = 4
STEPS = 3
LR = 0.1


def data(size):
    import torch
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(ROWS_PER_RANK * size, 6, generator=g)
    y = torch.randn(ROWS_PER_RANK * size, 2, generator=g)
    return x, y


def model():
    import torch
    torch.manual_seed(7)
    return torch.nn.Linear(6, 2)


def reference(size):
    """One process on the concatenated batch: the weights every rank must reach."""
    import torch
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    x, y = data(size)
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return [p.detach().reshape(-1).tolist() for p in m.parameters()]


def train():
    t0 = time.time()
    import horovodlite.torch as hvd
    import torch
    torch.set_num_threads(1)
    hvd.init()
    first = hvd.allreduce(torch.ones(1), name="first", op=hvd.Sum)  # launch to the first allreduce done
    started_s = time.time() - t0
    rank, size = hvd.rank(), hvd.size()
    m = model()
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=LR), named_parameters=m.named_parameters())
    x, y = data(size)
    rows = slice(rank * ROWS_PER_RANK, (rank + 1) * ROWS_PER_RANK)
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x[rows]), y[rows]).backward()
        opt.step()
    out = {
        "rank": rank, "size": size, "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
        "cross_rank": hvd.cross_rank(), "cross_size": hvd.cross_size(), "gloo": hvd.gloo_enabled(),
        "first_sum": float(first.item()), "started_s": started_s,
        "weights": [p.detach().reshape(-1).tolist() for p in m.parameters()],
        "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                               "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
                                               "TORCHELASTIC_RESTART_COUNT")},
    }
    hvd.shutdown()
    return out


def main():
    out = train()
    d = os.environ.get("HVL_TEST_OUT")
    if d:
        with open(os.path.join(d, "rank%d.json" % out["rank"]), "w") as f:
            json.dump(out, f)
    print("rank %d of %d done" % (out["rank"], out["size"]), flush=True)


if __name__ == "__main__":
    sys.exit(main())
