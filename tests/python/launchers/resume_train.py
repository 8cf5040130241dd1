"""launch_train's steps with a checkpoint after each: in torchrun's first
attempt rank 1 dies after step 2's checkpoint; the restarted group resumes."""

import json
import os

import horovodlite.torch as hvd
import launch_train
import torch


def main():
    torch.set_num_threads(1)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    ckpt = os.environ["HVL_TEST_CKPT"]
    m = launch_train.model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=launch_train.LR),
                                   named_parameters=m.named_parameters())
    start = 0
    if rank == 0 and os.path.exists(ckpt):
        state = torch.load(ckpt)
        m.load_state_dict(state["model"])
        start = state["step"]
    start = int(hvd.broadcast_object(start, root_rank=0))
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    x, y = launch_train.data(size)
    rows = slice(rank * launch_train.ROWS_PER_RANK, (rank + 1) * launch_train.ROWS_PER_RANK)
    for step in range(start, launch_train.STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x[rows]), y[rows]).backward()
        opt.step()
        if rank == 0:
            torch.save({"model": m.state_dict(), "step": step + 1}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        hvd.barrier()
        if step + 1 == 2 and rank == 1 and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
            os._exit(3)
    out = {"rank": rank, "size": size, "first_sum": float(hvd.allreduce(torch.ones(1), op=hvd.Sum).item()),
           "resumed_from": start, "weights": [p.detach().reshape(-1).tolist() for p in m.parameters()],
           "env": {"TORCHELASTIC_RESTART_COUNT": os.environ.get("TORCHELASTIC_RESTART_COUNT")}}
    hvd.shutdown()
    with open(os.path.join(os.environ["HVL_TEST_OUT"], "rank%d.json" % rank), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
