"""The training function examples/spark_train.py and examples/ray_train.py run
inside their engine (and, for comparison, under mpirun): an MLP on synthetic
MNIST-sized data with hvd.DistributedOptimizer. It reports when it started on
this rank, so the driver can state the engine's start-up overhead, and the time
per training step."""

import time


def train(steps=50, warmup=5, batch=64, hidden=512, lr=0.05, seed=0):
    t_enter = time.time()
    import horovodlite.torch as hvd
    import torch
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(784, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                                torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr * hvd.size()),
                                   named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(seed + hvd.rank())
    x = torch.randn(batch, 784, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    loss = None
    for step in range(warmup + steps):
        if step == warmup:
            t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    step_ms = (time.perf_counter() - t0) / steps * 1e3
    return {"rank": hvd.rank(), "size": hvd.size(), "t_enter": t_enter, "step_ms": step_ms,
            "loss": float(loss.detach()), "controller": "gloo" if hvd.gloo_enabled() else "mpi"}


def enter_only(**_):
    """No training: when this function started on this rank (start-up overhead alone)."""
    import os
    return {"rank": int(os.environ.get("HOROVOD_RANK", 0)), "t_enter": time.time()}


def report(engine, t_call, results):
    starts = [r["t_enter"] - t_call for r in results]
    print("%s: %d ranks, start-up overhead (call -> fn running on every rank): %.2f s" % (
        engine, len(results), max(starts)))
    if "step_ms" not in results[0]:
        return
    print("%s: step time %s ms (ranks 0..%d), loss %.4f, controller %s" % (
        engine, " ".join("%.2f" % r["step_ms"] for r in results), len(results) - 1, results[0]["loss"],
        results[0]["controller"]))


def main_under_mpirun(args):
    """`mpirun -np N python examples/X_train.py --under-mpirun`: the same function, no engine."""
    r = train(steps=args.steps, batch=args.batch, hidden=args.hidden)
    if r["rank"] == 0:
        print("mpirun: step time %.2f ms (rank 0), loss %.4f, controller %s" % (r["step_ms"], r["loss"],
                                                                             r["controller"]))
