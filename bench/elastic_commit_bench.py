"""Time of hvd.elastic.TorchState.commit() for a model of --params parameters
with SGD momentum (the issue's target: <= 50 ms for 25M parameters).

    mpirun -np 2 python3 bench/elastic_commit_bench.py --params 25000000

Prints the median and min over --repeats commits, and the save() part alone
(the in-memory copy; commit adds check_host_updates' broadcast)."""

import argparse
import statistics
import time

import horovodlite.torch as hvd
import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--params", type=int, default=25_000_000)
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args()
    hvd.init()
    width = 2500
    layers = max(1, round(args.params / (width * width + width)))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.randn(2, width)).sum().backward()
    opt.step()
    n = sum(p.numel() for p in model.parameters())
    state = hvd.elastic.TorchState(model, opt, epoch=0)
    commits, saves = [], []
    for _ in range(args.repeats):
        hvd.barrier()
        t = time.perf_counter()
        state.commit()
        commits.append(time.perf_counter() - t)
        t = time.perf_counter()
        state.save()
        saves.append(time.perf_counter() - t)
    if hvd.rank() == 0:
        print("params %d (%.0f MB + momentum), np %d: commit median %.1f ms min %.1f ms; save median %.1f ms" % (
            n, n * 4 / 1e6, hvd.size(), 1e3 * statistics.median(commits), 1e3 * min(commits),
            1e3 * statistics.median(saves)))


if __name__ == "__main__":
    main()
