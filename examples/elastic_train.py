"""Elastic data-parallel training with horovodlite.torch (Elastic Horovod's API):
the job goes on when a worker dies and takes in workers on new hosts.

    printf '127.0.0.1:2\n' > /tmp/hosts.txt
    horovodlite-run --min-np 1 --max-np 4 --host-discovery-script 'cat /tmp/hosts.txt' \
        python3 examples/elastic_train.py --epochs 20
    # meanwhile: add a "host" (printf '127.0.0.1:2\n127.0.0.2:1\n' > /tmp/hosts.txt),
    # or kill a worker (kill -9 <pid> from the log lines): training continues.

Every worker builds the same synthetic data set; an ElasticSampler hands each
rank its share of what is left of the epoch. The model, the optimizer, the
sampler and the epoch/batch counters live in a hvd.elastic.TorchState committed
every --commit-every batches: after a failure the survivors roll back to the last
commit, the world is re-formed, and new workers receive the state from rank 0.
The learning rate follows the world size through a reset callback. Runs under
mpirun too (no resets there).
"""

import argparse
import os
import socket
import time

import horovodlite.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def parse_args():
    p = argparse.ArgumentParser(description="Elastic training of an MLP on synthetic data with horovodlite")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.01, help="per rank (times the world size)")
    p.add_argument("--commit-every", type=int, default=10, help="batches between state.commit()")
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--batch-sleep", type=float, default=0.0, help="seconds per batch (to watch a job change)")
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 32, generator=g)
    w = torch.randn(32, 10, generator=g)
    y = (x @ w + 0.5 * torch.randn(n, 10, generator=g)).argmax(1)
    return TensorDataset(x, y)


def main():
    args = parse_args()
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    data = make_data(args.samples, args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0, batch=0)

    def on_reset():
        # The learning rate scales with the (new) world size.
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        print("[%s rank %d/%d] reset: generation %s" % (
            os.environ.get("HOROVOD_HOSTNAME", socket.gethostname()), hvd.rank(), hvd.size(),
            os.environ.get("HOROVODLITE_ELASTIC_GENERATION", "-")), flush=True)

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        loss = float("nan")
        while state.epoch < args.epochs:
            model.train()
            total, count = 0.0, 0
            for batch_idx, (x, y) in enumerate(loader, state.batch):
                state.batch = batch_idx
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
                sampler.record_batch(state.batch, args.batch_size)
                total += loss.item()
                count += 1
                if args.batch_sleep:
                    time.sleep(args.batch_sleep)
                if state.batch % args.commit_every == 0:
                    state.commit()
            loss = hvd.allreduce(torch.tensor(total / max(count, 1)), name="epoch_loss").item()
            if hvd.rank() == 0:
                print("epoch %d: loss %.4f on %d worker(s) (host %s, pid %d)" % (
                    state.epoch, loss, hvd.size(), os.environ.get("HOROVOD_HOSTNAME", socket.gethostname()),
                    os.getpid()), flush=True)
            state.batch = 0
            state.epoch += 1
            sampler.set_epoch(state.epoch)
            state.commit()
        return loss

    final = train(state)
    if hvd.rank() == 0:
        print("final loss %.4f" % final, flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
