"""The function the elastic Ray tests run in every worker (pickled by value):
value += allreduce(ones, Sum) each step, a commit every step. Rank 0 logs
(step, size, generation) before each commit; the worker with rank `die_rank` of
generation 1 dies at step `die_at` (os._exit, or ray.kill of its own actor), after
starting a detached actor named `blocker` holding one CPU when one is given (so
that Ray has no room for a replacement)."""

import json
import os
import time


def train(outdir, steps, die_rank, die_at, how="exit", blocker=None, grow_to=None):
    """grow_to: go on past `steps` (up to 400 more) until the world has grown back
    to this size (decided on the step count and size, the same on every rank)."""
    started_generation = int(os.environ.get("HOROVODLITE_ELASTIC_GENERATION", "0"))
    import horovodlite.torch as hvd
    import torch
    hvd.init()
    state = hvd.elastic.ObjectState(step=0, value=0.0)

    @hvd.elastic.run
    def loop(state):
        while state.step < steps or (grow_to and hvd.size() < grow_to and state.step < steps + 400):
            generation = os.environ.get("HOROVODLITE_ELASTIC_GENERATION")
            if hvd.rank() == die_rank and state.step == die_at and generation == "1":
                _die(how, blocker)
            state.value += hvd.allreduce(torch.ones(1), op=hvd.Sum, name="step").item()
            state.step += 1
            time.sleep(0.05)
            if hvd.rank() == 0:  # before commit(): a HostsUpdatedInterrupt there keeps the step
                with open(os.path.join(outdir, "log"), "a") as f:
                    f.write(json.dumps({"step": state.step, "size": hvd.size(), "generation": int(
                        os.environ.get("HOROVODLITE_ELASTIC_GENERATION", "0")), "t": time.time()}) + "\n")
            state.commit()
        return state.value

    value = loop(state)
    return {"value": value, "rank": hvd.rank(), "size": hvd.size(), "pid": os.getpid(),
            "started_generation": started_generation}


def _die(how, blocker):
    import ray
    if blocker:
        @ray.remote(num_cpus=1)
        class Blocker:
            def ping(self):
                return 1
        Blocker.options(name=blocker, lifetime="detached").remote()
        time.sleep(1)  # registered and waiting for a CPU before this one frees its own
    if how == "ray.kill":
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
        time.sleep(60)
    os._exit(1)


def read_log(outdir):
    """{step: size} with the last entry of each step (a rolled-back step is redone),
    and the log's entries."""
    entries = [json.loads(line) for line in open(os.path.join(outdir, "log")).read().splitlines()]
    last = {}
    for entry in entries:
        last[entry["step"]] = entry["size"]
    return last, entries
