"""Horovod's synthetic PyTorch benchmark (examples/pytorch/pytorch_synthetic_benchmark.py)
with horovodlite in place of horovod, and the same protocol under DDP (gloo) for
comparison (issue 29):

    OMP_NUM_THREADS=1 mpirun -np 2 --bind-to none python bench/pytorch_synthetic_benchmark.py \\
        --model resnet18 --batch-size 16 --no-cuda
    OMP_NUM_THREADS=1 mpirun -np 2 --bind-to none python bench/pytorch_synthetic_benchmark.py \\
        --model resnet18 --batch-size 16 --no-cuda --ddp

Same options, defaults and output as Horovod's script: fixed random 224x224
images and labels, SGD with lr 0.01 x size, DistributedOptimizer (Average,
--fp16-allreduce: Compression.fp16), parameters and optimizer state broadcast
from rank 0; --num-warmup-batches untimed batches, then --num-iters iterations of
--num-batches-per-iter batches, each iteration's img/sec printed, then the mean
+-1.96 std per process and in total. --ddp: DistributedDataParallel over gloo
(default 25 MB buckets), the same model, data and optimizer; ranks meet through
a file store named after the mpirun job. Also printed (not by Horovod's
script): the CPU time per batch of the process's threads other than the
training thread (horovodlite's background thread; gloo's threads under DDP).

The model is torchvision's when torchvision imports, else bench/resnet.py's
resnet18/resnet50 (the same layers parameter for parameter): PyPI's torchvision
does not import beside the torch 2.13.0 CPU wheel. Horovod's current script
builds the model with norm_layer=hvd.SyncBatchNorm; Horovod 0.28's and this
one use plain BatchNorm (torch's SyncBatchNorm, DDP's counterpart, runs on GPUs
only).
"""

import argparse
import os
import resource
import sys
import time
import timeit

import torch
import torch.nn.functional as F
import torch.optim as optim


def parse_args():
    p = argparse.ArgumentParser(description="PyTorch Synthetic Benchmark",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--fp16-allreduce", action="store_true", default=False,
                   help="send gradients as fp16 (Compression.fp16)")
    p.add_argument("--model", type=str, default="resnet50",
                   help="resnet18, resnet50 (any torchvision model when torchvision imports)")
    p.add_argument("--batch-size", type=int, default=32, help="images per batch, per rank")
    p.add_argument("--num-warmup-batches", type=int, default=10,
                   help="untimed batches first")
    p.add_argument("--num-batches-per-iter", type=int, default=10, help="batches per timed iteration")
    p.add_argument("--num-iters", type=int, default=10, help="timed iterations")
    p.add_argument("--no-cuda", action="store_true", default=False, help="train on the CPU")
    p.add_argument("--use-adasum", action="store_true", default=False, help="reduce with hvd.Adasum")
    p.add_argument("--ddp", action="store_true", default=False,
                   help="DistributedDataParallel (gloo; nccl with CUDA) instead of horovodlite")
    args = p.parse_args()
    args.cuda = not args.no_cuda and torch.cuda.is_available()
    return args


def build_model(name):
    try:
        from torchvision import models
        return getattr(models, name)()
    except ImportError:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import resnet
        if not hasattr(resnet, name):
            sys.exit("pytorch_synthetic_benchmark: without torchvision only resnet18 and resnet50 are defined")
        return getattr(resnet, name)()


class Horovodlite:
    def __init__(self, args, model):
        import horovodlite.torch as hvd
        self.hvd = hvd
        hvd.init()
        if args.cuda:
            torch.cuda.set_device(hvd.local_rank())
            model.cuda()
        self.rank, self.size = hvd.rank(), hvd.size()
        lr_scaler = self.size if not args.use_adasum else 1
        if args.cuda and args.use_adasum and hvd.nccl_built():
            lr_scaler = hvd.local_size()
        optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler)
        compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
        self.optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                                  compression=compression,
                                                  op=hvd.Adasum if args.use_adasum else hvd.Average)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(self.optimizer, root_rank=0)
        self.model = model

    def done(self):
        self.hvd.shutdown()


class Ddp:
    def __init__(self, args, model):
        import torch.distributed as dist
        self.dist = dist
        self.rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
        self.size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
        job = os.environ.get("PMIX_NAMESPACE", os.environ.get("OMPI_MCA_orte_ess_jobid", str(os.getppid())))
        store = "/tmp/pytorch_synthetic_benchmark.%s" % "".join(c if c.isalnum() else "_" for c in job)
        backend = "nccl" if args.cuda else "gloo"
        dist.init_process_group(backend, init_method="file://" + store, rank=self.rank, world_size=self.size)
        if args.cuda:
            torch.cuda.set_device(int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
            model.cuda()
        self.model = torch.nn.parallel.DistributedDataParallel(model)
        self.optimizer = optim.SGD(self.model.parameters(), lr=0.01 * self.size)
        self.store = store

    def done(self):
        self.dist.barrier()
        if self.rank == 0:
            try:
                os.remove(self.store)
            except OSError:
                pass


def main():
    args = parse_args()
    torch.manual_seed(1234)
    model = build_model(args.model)
    job = Ddp(args, model) if args.ddp else Horovodlite(args, model)
    model, optimizer = job.model, job.optimizer

    data = torch.randn(args.batch_size, 3, 224, 224)
    target = torch.LongTensor(args.batch_size).random_() % 1000
    if args.cuda:
        data, target = data.cuda(), target.cuda()

    def benchmark_step():
        optimizer.zero_grad()
        output = model(data)
        loss = F.cross_entropy(output, target)
        loss.backward()
        optimizer.step()

    def log(s):
        if job.rank == 0:
            print(s, flush=True)

    device = "GPU" if args.cuda else "CPU"
    log("Model: %s" % args.model)
    log("Batch size: %d" % args.batch_size)
    log("Number of %ss: %d (%s, torch %s, OMP threads %d)" % (device, job.size,
                                                             "DDP " + ("nccl" if args.cuda else "gloo") if args.ddp
                                                             else "horovodlite", torch.__version__,
                                                             torch.get_num_threads()))
    log("Running warmup...")
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)

    log("Running benchmark...")
    img_secs = []
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    main0 = time.thread_time()
    for x in range(args.num_iters):
        t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / t
        log("Iter #%d: %.1f img/sec per %s" % (x, img_sec, device))
        img_secs.append(img_sec)
    main_cpu = time.thread_time() - main0
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    total_cpu = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
    batches = args.num_iters * args.num_batches_per_iter

    n = len(img_secs)
    mean = sum(img_secs) / n
    conf = 1.96 * (sum((v - mean) ** 2 for v in img_secs) / n) ** 0.5
    log("Img/sec per %s: %.1f +-%.1f" % (device, mean, conf))
    log("Total img/sec on %d %s(s): %.1f +-%.1f" % (job.size, device, job.size * mean, job.size * conf))
    log("CPU per batch on rank 0: training thread %.1f ms, other threads %.1f ms" % (
        main_cpu * 1e3 / batches, (total_cpu - main_cpu) * 1e3 / batches))
    job.done()


if __name__ == "__main__":
    main()
