"""What the Spark and Ray tests run inside the engine: a small DistributedOptimizer
training and helpers. Pickled by value (cloudpickle.register_pickle_by_value), so
the engine's workers need not import this file."""

import os
import time

_probe = {}


def gloo_core_missing():
    """A skip reason when horovodlite cannot run a job on Gloo (without mpirun), else
    None. Probed once: one process with the contract's variables for a world of one
    must come up with hvd.gloo_enabled() True."""
    if "reason" in _probe:
        return _probe["reason"]
    _probe["reason"] = _gloo_probe()
    return _probe["reason"]


def _gloo_probe():
    import subprocess
    import sys
    try:
        import horovodlite.torch as hvd
    except ImportError as e:
        return "horovodlite.torch is not importable (%s)" % e
    if not hvd.gloo_built():
        return ("horovodlite was built without the Gloo core (hvd.gloo_built() is False): collectives in engine "
                "workers need it")
    from horovodlite.runner import worker_env
    from horovodlite.runner.rendezvous import RendezvousServer
    with RendezvousServer(bind_host="127.0.0.1") as server:
        env = worker_env.strip_inherited(os.environ)
        env.update(worker_env.gloo_env(worker_env.assign_ranks(["localhost"])[0], "127.0.0.1", server.port,
                                       timeout_s=20, secret=server.secret))
        code = ("import horovodlite.torch as hvd; hvd.init(); "
                "print('GLOO', hvd.gloo_enabled(), hvd.mpi_enabled(), hvd.size()); hvd.shutdown()")
        try:
            p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return "hvd.init() on the Gloo contract's variables (one rank) did not return within 60 s"
    # Built with Gloo, the Gloo runtime must come up: that is a failure, not a skip.
    assert "GLOO True False 1" in p.stdout, (
        "hvd.init() on the Gloo contract's variables did not start a Gloo job (exit %d):\n%s" % (
            p.returncode, p.stdout + p.stderr))
    return None


def make_data(seed, rows, dtype):
    import torch
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 8, generator=g, dtype=dtype)
    y = (x.sum(dim=1, keepdim=True) * 0.5 + torch.randn(rows, 1, generator=g, dtype=dtype) * 0.1)
    return x, y


def make_model(seed, dtype):
    import torch
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(dtype)


def train(steps=5, batch=4, seed=1234, lr=0.1):
    """Every rank trains on its shard of each global batch (size() * batch rows)
    with hvd.DistributedOptimizer; returns (rank, size, {name: weights as lists})."""
    import horovodlite.torch as hvd
    import torch
    hvd.init()
    dtype = torch.float64
    model = make_model(seed, dtype)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                   named_parameters=model.named_parameters())
    size, rank = hvd.size(), hvd.rank()
    x, y = make_data(seed, steps * size * batch, dtype)
    for step in range(steps):
        lo = (step * size + rank) * batch
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[lo:lo + batch]), y[lo:lo + batch])
        loss.backward()
        opt.step()
    return rank, size, {k: v.tolist() for k, v in model.state_dict().items()}


def reference(size, steps=5, batch=4, seed=1234, lr=0.1):
    """One process on the concatenated batches: what every rank must end with."""
    import torch
    dtype = torch.float64
    model = make_model(seed, dtype)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = make_data(seed, steps * size * batch, dtype)
    for step in range(steps):
        lo = step * size * batch
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[lo:lo + size * batch]), y[lo:lo + size * batch])
        loss.backward()
        opt.step()
    return {k: v.tolist() for k, v in model.state_dict().items()}


def check_training(results, size, **kw):
    import torch
    assert [r[0] for r in results] == list(range(size)), "results not ordered by rank: %s" % [r[0] for r in results]
    assert all(r[1] == size for r in results), "hvd.size() per rank: %s" % [r[1] for r in results]
    want = reference(size, **kw)
    for rank, _, weights in results:
        for name, value in want.items():
            got = torch.tensor(weights[name], dtype=torch.float64)
            assert torch.allclose(got, torch.tensor(value, dtype=torch.float64), rtol=0, atol=1e-10), \
                "rank %d: %s differs from one process on the concatenated batch" % (rank, name)


def identity():
    """The contract's variables as the worker saw them."""
    keys = ("HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK",
            "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME",
            "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT", "HVL_TEST_EXTRA")
    return {k: os.environ.get(k) for k in keys}


def fail_on(rank_to_fail, pid_dir, message="injected failure"):
    """rank_to_fail raises once every other rank has written its pid; the others
    then block (as a rank stuck in a collective with a dead peer would)."""
    rank, size = int(os.environ["HOROVOD_RANK"]), int(os.environ["HOROVOD_SIZE"])
    if rank != rank_to_fail:
        with open(os.path.join(pid_dir, "%d.pid" % rank), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(300)
        return rank
    deadline = time.monotonic() + 60
    while len([n for n in os.listdir(pid_dir) if n.endswith(".pid")]) < size - 1:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if message == "exit":
        os._exit(7)  # dies without an exception, as a crash would
    raise ValueError("%s on rank %d" % (message, rank))


def pids_alive(pid_dir):
    alive = []
    for name in os.listdir(pid_dir):
        if name.endswith(".pid"):
            pid = int(open(os.path.join(pid_dir, name)).read())
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
    return alive


def wait_pids_gone(pid_dir, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pids_alive(pid_dir):
            return []
        time.sleep(0.1)
    return pids_alive(pid_dir)
