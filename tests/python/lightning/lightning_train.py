"""One rank's part of the Lightning tests: several fits of a small LightningModule
on a fixed data set under HorovodStrategy, run as a script by each launcher
(mpirun, horovodlite-run --gloo, torchrun). Each rank writes rank<R>.json to
HVL_TEST_OUT with its final weights per case, the rows it was given, what the
strategy's collectives returned and the warnings it saw; test_lightning.py
compares them with reference(), one plain-PyTorch process on the global batches.
Every global batch has BATCH rows of each rank, so the mean of the ranks' mean
losses is the global batch's mean loss.

    python lightning_train.py [case,case,...]    (default: every case but "pl")
"""

import json
import os
import sys
import warnings

ROWS = 20           # 5 batches per rank per epoch at 2 ranks
BATCH = 2           # per rank; the global batch is BATCH * world size
LR = 0.1
MOMENTUM = 0.9
GAMMA = 0.5         # StepLR(step_size=1): the lr halves after every epoch
SEED = 100          # rank r makes its modules with SEED + r

CASES = ("plain", "accumulate", "checkpoint", "refit", "manual", "refusals", "accumulate_schedule", "pl")


def data():
    import torch
    g = torch.Generator().manual_seed(1234)
    return torch.randn(ROWS, 4, generator=g), torch.randn(ROWS, 2, generator=g)


def make_model(seed):
    import torch
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 2)


def weights(model):
    return [p.detach().reshape(-1).tolist() for p in model.parameters()]


def shard(rank, epoch, size=2):
    """The rows rank `rank` trains on in `epoch`, in order: Lightning 2.x gives
    the training dataloader DistributedSampler(shuffle=True, seed=PL_GLOBAL_SEED
    or 0) with set_epoch(epoch), whatever the loader's own shuffle."""
    from torch.utils.data import DistributedSampler
    sampler = DistributedSampler(range(ROWS), num_replicas=size, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return list(sampler)


def reference(epochs, accumulate=1, size=2, fits=1):
    """One process on the global batches (batch k of epoch e: rows k*BATCH ..
    (k+1)*BATCH - 1 of every rank's shard), with Lightning's rules: the loss
    divided by the accumulation, a step after each window and on the epoch's
    last batch, the scheduler stepped after each epoch. `accumulate`: an int
    or a function of the epoch; `fits`: fits of `epochs` one after the other,
    each with a new optimizer. Returns (weights, per-batch losses)."""
    model = make_model(SEED)
    losses = []
    for _ in range(fits):
        losses += train_reference(model, epochs, accumulate, size)
    return weights(model), losses


def train_reference(model, epochs, accumulate, size):
    import torch
    x, y = data()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=GAMMA)
    losses = []
    for epoch in range(epochs):
        acc = accumulate(epoch) if callable(accumulate) else accumulate
        shards = [shard(r, epoch, size) for r in range(size)]
        batches = -(-len(shards[0]) // BATCH)
        for i in range(batches):
            if i % acc == 0:
                opt.zero_grad()
            rows = torch.tensor([row for s in shards for row in s[i * BATCH:(i + 1) * BATCH]])
            loss = torch.nn.functional.mse_loss(model(x[rows]), y[rows])
            losses.append(loss.item())
            (loss / acc).backward()
            if (i + 1) % acc == 0 or i == batches - 1:
                opt.step()
        sched.step()
    return losses


def module_classes(pl):
    import torch

    class Net(pl.LightningModule):
        def __init__(self, seed):
            super().__init__()
            self.net = make_model(seed)
            self.seen = []

        def training_step(self, batch, batch_idx):
            index, x, y = batch
            self.seen.extend(index.tolist())
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("loss", loss, sync_dist=True, on_step=True, on_epoch=False)
            return loss

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=LR, momentum=MOMENTUM)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=GAMMA)]

    class ManualNet(Net):
        def __init__(self, seed):
            super().__init__(seed)
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            opt.zero_grad()
            index, x, y = batch
            self.seen.extend(index.tolist())
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.manual_backward(loss)
            opt.step()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=LR, momentum=MOMENTUM)

    return Net, ManualNet


def loader():
    import torch
    x, y = data()
    dataset = torch.utils.data.TensorDataset(torch.arange(ROWS), x, y)
    return torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=False)


def collectives(strategy):
    """What the strategy's collectives give on this rank."""
    import torch
    rank = strategy.global_rank
    out = {
        "mean": strategy.reduce(torch.tensor([rank + 1.0])).tolist(),
        "sum": strategy.reduce(torch.tensor([rank + 1.0]), reduce_op="sum").tolist(),
        "max": strategy.reduce(torch.tensor([rank + 1.0]), reduce_op="max").tolist(),
        "reduceop_sum": strategy.reduce(torch.tensor([rank + 1.0]),
                                        reduce_op=torch.distributed.ReduceOp.SUM).tolist(),
        "int_mean": strategy.reduce(torch.tensor([rank])).tolist(),
        "not_tensor": strategy.reduce(3),
        "all_gather": strategy.all_gather(torch.tensor([rank, 10 + rank])).tolist(),
        "all_gather_scalar": strategy.all_gather(torch.tensor(float(rank))).tolist(),
        "broadcast": strategy.broadcast({"from": rank}, src=1),
        "all": strategy.reduce_boolean_decision(rank == 0, all=True),
        "any": strategy.reduce_boolean_decision(rank == 0, all=False),
    }
    x = torch.tensor([rank + 1.0], requires_grad=True)
    gathered = strategy.all_gather(x, sync_grads=True)
    (gathered.reshape(-1) * torch.tensor([1.0, 2.0])).sum().backward()
    out["sync_grads"] = x.grad.tolist()
    strategy.barrier("collectives")
    return out


def run(cases, out_dir):
    import horovodlite.torch as hvd
    import lightning.pytorch as pl
    from horovodlite.lightning import HorovodStrategy

    Net, ManualNet = module_classes(pl)
    common = dict(accelerator="cpu", enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1,
                  num_sanity_val_steps=0)
    result = {"fits": {}}

    def fit(name, module, ckpt_path=None, **kwargs):
        kwargs = {**common, "logger": False, "enable_checkpointing": False, **kwargs}
        trainer = pl.Trainer(strategy=kwargs.pop("strategy", None) or HorovodStrategy(), **kwargs)
        trainer.fit(module, train_dataloaders=loader(), ckpt_path=ckpt_path)
        result["fits"][name] = {"weights": weights(module.net), "seen": module.seen}
        return trainer

    seed = SEED + int(os.environ.get("HVL_SEED_RANK", "0"))  # rank 0's weights must win: see main()
    if "plain" in cases:
        with warnings.catch_warnings(record=True) as seen_warnings:
            warnings.simplefilter("always")
            logger = pl.loggers.CSVLogger(os.path.join(out_dir, "logs"))
            trainer = fit("plain", Net(seed), max_epochs=2, logger=logger)
        result["warnings"] = sorted({str(w.message).splitlines()[0] for w in seen_warnings})
        s = trainer.strategy
        result["place"] = {"global_rank": trainer.global_rank, "world_size": trainer.world_size,
                           "local_rank": trainer.local_rank, "node_rank": trainer.node_rank,
                           "num_nodes": trainer.num_nodes, "is_global_zero": trainer.is_global_zero,
                           "root_device": str(s.root_device), "sampler": s.distributed_sampler_kwargs,
                           "hvd": [hvd.rank(), hvd.size()]}
        result["collectives"] = collectives(s)
    if "accumulate" in cases:  # also the strategy by its registry name
        fit("accumulate", Net(seed), max_epochs=2, accumulate_grad_batches=2, strategy="horovodlite")
    if "checkpoint" in cases:
        cb = pl.callbacks.ModelCheckpoint(dirpath=os.path.join(out_dir, "ckpt"))
        fit("checkpoint", Net(seed), max_epochs=1, callbacks=[cb], enable_checkpointing=True)
        result["checkpoint"] = cb.best_model_path
        trainer = fit("resumed", Net(seed + 50), max_epochs=2, ckpt_path=cb.best_model_path)
        result["resumed_epoch"] = trainer.current_epoch
    if "refit" in cases:
        # The same module fitted again: the first fit's DistributedOptimizer
        # must have left its parameters (teardown), horovodlite still running.
        module = Net(seed)
        fit("refit", module, max_epochs=1)
        fit("refit", module, max_epochs=1)
    if "manual" in cases:
        fit("manual", ManualNet(seed), max_epochs=1)
    if "refusals" in cases:
        try:
            fit("sync_batchnorm", Net(seed), max_epochs=1, sync_batchnorm=True)
        except ValueError as e:
            result["sync_batchnorm"] = str(e)
    if "accumulate_schedule" in cases:
        schedule = pl.callbacks.GradientAccumulationScheduler(scheduling={0: 1, 1: 2})
        fit("accumulate_schedule", Net(seed), max_epochs=2, callbacks=[schedule])
    if "pl" in cases:
        import pytorch_lightning
        from horovodlite.lightning.pytorch_lightning import HorovodStrategy as PlStrategy
        module = module_classes(pytorch_lightning)[0](seed)
        trainer = pytorch_lightning.Trainer(strategy=PlStrategy(), max_epochs=1, logger=False,
                                            enable_checkpointing=False, **common)
        trainer.fit(module, train_dataloaders=loader())
        result["fits"]["pl"] = {"weights": weights(module.net), "seen": module.seen}
    result["rank"] = hvd.rank()
    result["still_initialized"] = hvd.is_initialized()
    result["launcher_env"] = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
                                                             "HOROVOD_RANK")}
    return result


def main():
    import torch
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    out_dir = os.environ["HVL_TEST_OUT"]
    cases = sys.argv[1].split(",") if len(sys.argv) > 1 else [c for c in CASES if c != "pl"]
    unknown = set(cases) - set(CASES)
    if unknown:
        raise SystemExit("unknown cases: %s" % ", ".join(sorted(unknown)))
    # Each rank makes its modules with its own seed (the launcher's rank, read
    # before horovodlite starts): the strategy must broadcast rank 0's weights.
    for name in ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "RANK"):
        if os.environ.get(name):
            os.environ["HVL_SEED_RANK"] = os.environ[name]
            break
    result = run(cases, out_dir)
    with open(os.path.join(out_dir, "rank%d.json" % result["rank"]), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
