"""What the control plane costs a job: the rendezvous (launch to the first
commit), elastic recovery (the longest gap between commits around a worker
killed with SIGKILL) and one store request, for the C++ example or a Python
worker; the figures of docs/elastic.md. Runs the tree it is imported from (an
older checkout's python/ on PYTHONPATH gives its figures, for an A/B).

    python bench/elastic_recovery_bench.py --runs 5 --binary build/examples/elastic_train
    python bench/elastic_recovery_bench.py --runs 5 --python-worker
    python bench/elastic_recovery_bench.py --store-requests 2000 [--pin]

Prints one JSON line per run and a summary line with the medians."""

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# The Python worker: a step is allreduce(ones, Sum) and a commit; the worker on
# 127.0.0.3 kills itself at step 10 of the first generation.
WORKER = r"""
import json, os, signal, sys, time, torch
import horovodlite.torch as hvd
out, steps = sys.argv[1], int(sys.argv[2])
hvd.init()
state = hvd.elastic.ObjectState(step=0, value=0.0)

@hvd.elastic.run
def train(state):
    while state.step < steps:
        if (os.environ["HOROVOD_HOSTNAME"] == "127.0.0.3" and state.step == 10
                and os.environ.get("HOROVODLITE_ELASTIC_GENERATION", "1") == "1"):
            os.kill(os.getpid(), signal.SIGKILL)
        state.value += hvd.allreduce(torch.ones(1), op=hvd.Sum, name="step").item()
        state.step += 1
        time.sleep(0.05)
        if hvd.rank() == 0:
            with open(os.path.join(out, "log"), "a") as f:
                f.write(json.dumps({"step": state.step, "size": hvd.size(), "t": time.time()}) + "\n")
        state.commit()

train(state)
"""


def one_run(args, tmp):
    hosts = os.path.join(tmp, "hosts.txt")
    with open(hosts, "w") as f:
        f.write("127.0.0.1:1\n127.0.0.2:1\n127.0.0.3:1\n")
    if args.python_worker:
        script = os.path.join(tmp, "worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        command = [sys.executable, script, tmp, str(args.steps)]
    else:
        command = [args.binary, "--steps", str(args.steps), "--sleep-ms", "50", "--out", tmp, "--kill-host",
                   "127.0.0.3", "--kill-at-step", "10"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "HOROVOD"))}
    start = time.time()
    out = subprocess.run([sys.executable, "-m", "horovodlite.run", "--min-np", "2", "--host-discovery-script",
                          "cat %s" % hosts, "--gloo-timeout-seconds", "20", "--elastic-timeout", "60"] + command,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    wall = time.time() - start
    if out.returncode != 0:
        raise SystemExit("the job failed (%d):\n%s" % (out.returncode, out.stdout[-3000:]))
    with open(os.path.join(tmp, "log")) as f:
        log = [json.loads(line) for line in f if line.strip()]
    gap = max(b["t"] - a["t"] for a, b in zip(log, log[1:]))
    return {"wall_s": round(wall, 3), "rendezvous_s": round(log[0]["t"] - start, 3), "recovery_gap_s": round(gap, 3)}


# The store in a process of its own, as the launcher's is: prints its port, then serves.
STORE = r"""
import inspect, sys, time
from horovodlite.runner import rendezvous
kwargs = {"secret": sys.argv[1]} if "secret" in inspect.signature(rendezvous.RendezvousServer).parameters else {}
server = rendezvous.RendezvousServer(bind_host="127.0.0.1", port=0, **kwargs)
print(server.start(), flush=True)
sys.stdin.read()
"""


def store_requests(n, pin=False):
    """Medians of n GETs (of a set key) and n PUTs against a store in another
    process; pin: the store on CPU 0, this client on CPU 1 (the figures move
    with where the scheduler puts the two otherwise)."""
    from horovodlite.runner import rendezvous
    secret = "ab" * 32
    store = subprocess.Popen([sys.executable, "-c", STORE, secret], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, preexec_fn=(lambda: os.sched_setaffinity(0, {0})) if pin else None)
    if pin:
        os.sched_setaffinity(0, {1})
    try:
        port = int(store.stdout.readline())
        kwargs = {"secret": secret} if "secret" in inspect.signature(rendezvous.RendezvousClient).parameters else {}
        client = rendezvous.RendezvousClient("127.0.0.1", port, timeout=10, **kwargs)
        value = b"198.18.0.1:12345" * 4
        client.put("global", "rank_0", value)
        figures = {}
        for name, call in (("get", lambda: client.get("global", "rank_0")),
                           ("put", lambda: client.put("global", "rank_0", value))):
            times = []
            for _ in range(n):
                t = time.perf_counter()
                call()
                times.append(time.perf_counter() - t)
            figures[name + "_us_median"] = round(statistics.median(times) * 1e6, 1)
        return figures
    finally:
        store.stdin.close()
        store.wait(10)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--binary", help="the elastic_train example")
    p.add_argument("--python-worker", action="store_true", help="a Python worker instead of the C++ example")
    p.add_argument("--store-requests", type=int, default=0,
                   help="time this many GETs and PUTs against a store in another process instead")
    p.add_argument("--pin", action="store_true", help="with --store-requests: the store on CPU 0, the client on 1")
    args = p.parse_args()
    if args.store_requests:
        print(json.dumps(store_requests(args.store_requests, args.pin)))
        return
    if not args.python_worker and not args.binary:
        p.error("give --binary or --python-worker")
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            os.chmod(tmp, 0o755)
            runs.append(one_run(args, tmp))
        print(json.dumps(runs[-1]), flush=True)
    print(json.dumps({"summary": "median of %d" % len(runs),
                      **{k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}}))


if __name__ == "__main__":
    main()
