"""Data-parallel training with horovodlite.torch (the Python twin of train.cpp):

    horovodlite-run -np 4 python3 examples/train.py --epochs 5 --optimizer adam
    horovodlite-run -np 4 python3 examples/train.py --cuda      # one GPU per rank
    horovodlite-run -np 4 python3 examples/train.py --use-adasum  # Adasum (2^k ranks)

Every rank builds the same deterministic synthetic data set (10 classes, each a
mixture of two Gaussian clusters in 32 dimensions, so that the classes are not
linearly separable), trains an MLP on its shard (DistributedSampler), and
averages gradients with hvd.DistributedOptimizer (or, with --use-adasum, combines
the ranks' updates with Adasum). Rank 0 reports the loss,
held-out accuracy and throughput per epoch. With --cuda each rank trains on
the GPU of its local rank (torch.cuda.set_device(hvd.local_rank())), and the
gradients are averaged on the GPUs (NCCL, or through the host with
HOROVODLITE_GPU_OPERATIONS=mpi).
"""

import argparse
import os
import time

import horovodlite.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

FEATURES = 32
CLASSES = 10
CLUSTERS_PER_CLASS = 2


def parse_args():
    p = argparse.ArgumentParser(description="Data-parallel training of an MLP on synthetic data with horovodlite")
    p.add_argument("--epochs", type=int, default=5, help="epochs to train")
    p.add_argument("--batch-size", type=int, default=32, help="batch size per rank")
    p.add_argument("--lr", type=float, default=0.0,
                   help="learning rate per rank, multiplied by the number of ranks (0: the optimizer's default)")
    p.add_argument("--optimizer", choices=["sgd", "adam", "adamw", "rmsprop", "adagrad"], default="sgd")
    p.add_argument("--fp16", action="store_true", help="send gradients as float16 (compression)")
    p.add_argument("--use-adasum", action="store_true",
                   help="combine the ranks' updates with Adasum (op=hvd.Adasum; 2^k ranks) instead of averaging "
                        "gradients; the learning rate is then not scaled by the number of ranks")
    p.add_argument("--cuda", action="store_true", help="train on the GPU of each rank's local rank")
    p.add_argument("--accumulation-steps", type=int, default=1,
                   help="backward passes per optimizer step (backward_passes_per_step)")
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op threads per rank (default: cores / ranks on this node)")
    p.add_argument("--seed", type=int, default=42, help="seed of the data set, the model and the shuffling")
    p.add_argument("--train-samples", type=int, default=16384)
    p.add_argument("--test-samples", type=int, default=4096)
    p.add_argument("--noise", type=float, default=1.6)
    args = p.parse_args()
    if args.epochs < 0 or args.batch_size < 1 or args.accumulation_steps < 1 or \
            args.train_samples < 1 or args.test_samples < 1:
        p.error("--epochs must be >= 0; --batch-size, --accumulation-steps and the sample counts >= 1")
    return args


def make_datasets(args):
    """The same on every rank for the same seed (an explicit generator)."""
    gen = torch.Generator().manual_seed(args.seed * 7919 + 17)
    centers = torch.randn(CLASSES * CLUSTERS_PER_CLASS, FEATURES, generator=gen) * 0.9

    def sample(n):
        cluster = torch.randint(CLASSES * CLUSTERS_PER_CLASS, (n,), generator=gen)
        x = centers[cluster] + torch.randn(n, FEATURES, generator=gen) * args.noise
        return TensorDataset(x, cluster % CLASSES)

    return sample(args.train_samples), sample(args.test_samples)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(FEATURES, 128)
        self.fc2 = torch.nn.Linear(128, 64)
        self.fc3 = torch.nn.Linear(64, CLASSES)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def make_optimizer(name, params, lr):
    optim = torch.optim
    if name == "sgd":
        return optim.SGD(params, lr=lr or 0.02, momentum=0.9)
    if name == "adam":
        return optim.Adam(params, lr=lr or 1e-3)
    if name == "adamw":
        return optim.AdamW(params, lr=lr or 1e-3)
    if name == "rmsprop":
        return optim.RMSprop(params, lr=lr or 1e-3)
    return optim.Adagrad(params, lr=lr or 0.02)


def evaluate(model, data, device):
    """Held-out accuracy over the whole test set: each rank scores its shard."""
    model.eval()
    sampler = DistributedSampler(data, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    correct = total = 0
    with torch.no_grad():
        for x, y in DataLoader(data, batch_size=512, sampler=sampler):
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(1) == y).sum().item()
            total += y.numel()
    counts = hvd.allreduce(torch.tensor([correct, total], dtype=torch.float64, device=device), op=hvd.Sum,
                           name="eval.counts")
    model.train()
    return (counts[0] / counts[1]).item()


def main():
    args = parse_args()
    hvd.init()
    device = torch.device("cpu")
    if args.cuda:
        if not torch.cuda.is_available():
            raise SystemExit("train.py --cuda: this PyTorch sees no CUDA device (torch.cuda.is_available() is False)")
        if not hvd.cuda_built():
            raise SystemExit("train.py --cuda: horovodlite was built without CUDA (configure with -DHVL_WITH_CUDA=ON)")
        # One GPU per rank: the local rank's (NCCL needs each rank on its own GPU).
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    threads = args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size())
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)

    train_set, test_set = make_datasets(args)
    sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True,
                                 seed=args.seed, drop_last=True)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    model = Net().to(device)
    # Scale the learning rate by the number of ranks (the global batch grows with it);
    # with Adasum not (Horovod's guide; Horovod scales by the local size on GPUs, where
    # it sums within a node with NCCL first: horovodlite's Adasum of CUDA tensors
    # combines every rank's update with Adasum, as on CPU).
    lr_scaler = 1 if args.use_adasum else hvd.size()
    base = make_optimizer(args.optimizer, model.parameters(), 0.0).defaults["lr"]
    lr = (args.lr or base) * lr_scaler
    optimizer = make_optimizer(args.optimizer, model.parameters(), lr)
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if args.fp16 else hvd.Compression.none,
        backward_passes_per_step=args.accumulation_steps,
        op=hvd.Adasum if args.use_adasum else hvd.Average)
    # Start from rank 0's model and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    if hvd.rank() == 0:
        print("horovodlite train.py: %d ranks, %d threads each, %s lr=%g, batch %d x %d accumulation, fp16=%s, "
              "%s, device %s" % (hvd.size(), threads, args.optimizer, lr, args.batch_size, args.accumulation_steps,
                                 args.fp16, "Adasum" if args.use_adasum else "Average", device.type), flush=True)

    steps_per_epoch = len(loader) // args.accumulation_steps
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        start = time.perf_counter()
        loss_sum = torch.zeros(2, dtype=torch.float64, device=device)  # summed loss, batches
        batches = iter(loader)
        for _ in range(steps_per_epoch):
            optimizer.zero_grad()
            for _ in range(args.accumulation_steps):
                x, y = next(batches)
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                loss = F.cross_entropy(model(x), y)
                (loss / args.accumulation_steps).backward()
                loss_sum[0] += loss.detach().double()  # no host sync per batch on a GPU
                loss_sum[1] += 1.0
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        totals = hvd.allreduce(loss_sum, op=hvd.Sum, name="epoch.loss")
        samples = steps_per_epoch * args.accumulation_steps * args.batch_size * hvd.size()
        accuracy = evaluate(model, test_set, device)
        if hvd.rank() == 0:
            print("epoch %d  loss %.4f  accuracy %.4f  samples/s %.0f  (%.2f s)"
                  % (epoch, (totals[0] / max(totals[1], 1)).item(), accuracy, samples / elapsed, elapsed),
                  flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
