"""Starts a Gloo job without mpirun: serves the rendezvous key-value store
(horovodlite.runner.rendezvous, the Gloo-launch contract) and runs N copies of
a command with the contract's environment, all on this host; exits with the
first failing worker's status (or 0). For tests and benchmarks:

    python3 tests/transport/run_gloo_workers.py -np 2 -- build/tests/transport/gloo_worker
    python3 tests/transport/run_gloo_workers.py -np 2 -- build/bench/transport_bench 1,4,16,64 20

--wrong-secret gives the workers another job's secret, --max-store-bytes
bounds the store; with --expect-failure REGEX every worker must fail, and
fail saying REGEX, within the timeout (the control plane's errors).
"""
import argparse
import os
import re
import subprocess
import sys
import time

from horovodlite.runner.rendezvous import RendezvousServer


def worker_env(rank, np, port, secret):
    """This environment, less an enclosing MPI job's rank, plus the Gloo-launch
    contract's variables of one local rank."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")}
    env.update({
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_RANK": str(rank),
        "HOROVOD_SIZE": str(np),
        "HOROVOD_LOCAL_RANK": str(rank),
        "HOROVOD_LOCAL_SIZE": str(np),
        "HOROVOD_CROSS_RANK": "0",
        "HOROVOD_CROSS_SIZE": "1",
        "HOROVOD_HOSTNAME": "localhost",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_GLOO_TIMEOUT_SECONDS": os.environ.get("HOROVOD_GLOO_TIMEOUT_SECONDS", "30"),
        "HOROVODLITE_SECRET_KEY": secret,
    })
    return env


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-np", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=600, help="seconds before the workers are killed")
    parser.add_argument("--killed", type=int, default=-1,
                        help="this rank must end by SIGKILL (a test of the others noticing it)")
    parser.add_argument("--wrong-secret", action="store_true", help="give the workers another job's secret")
    parser.add_argument("--max-store-bytes", type=int, default=None)
    parser.add_argument("--expect-failure", metavar="REGEX",
                        help="every worker must exit non-zero and its output match REGEX")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.np < 1:
        parser.error("give -np N and a command after --")
    server = RendezvousServer(bind_host="127.0.0.1", port=0, max_store_bytes=args.max_store_bytes)
    port = server.start()
    if args.expect_failure:
        return expect_failure(args, server, command)
    workers = []
    try:
        for rank in range(args.np):
            workers.append(subprocess.Popen(command, env=worker_env(rank, args.np, port, server.secret)))
        deadline = time.monotonic() + args.timeout
        status = 0
        pending = list(workers)
        while pending:
            for w in list(pending):
                rc = w.poll()
                if rc is not None:
                    pending.remove(w)
                    if workers.index(w) == args.killed:
                        if rc != -9 and status == 0:
                            status = 1
                            print(f"run_gloo_workers: rank {args.killed} exited with {rc}, not SIGKILL",
                                  file=sys.stderr)
                    elif rc != 0 and status == 0:
                        status = rc
                        print(f"run_gloo_workers: rank {workers.index(w)} exited with {rc}", file=sys.stderr)
            if time.monotonic() > deadline:
                print(f"run_gloo_workers: workers still running after {args.timeout} s: killed", file=sys.stderr)
                status = status or 124
                break
            time.sleep(0.05)
        return status
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        server.stop()


def expect_failure(args, server, command):
    from horovodlite.runner.secret import make_secret
    secret = make_secret() if args.wrong_secret else server.secret
    try:
        workers = [subprocess.Popen(command, env=worker_env(rank, args.np, server.port, secret),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                   for rank in range(args.np)]
        status = 0
        for rank, w in enumerate(workers):
            try:
                out, _ = w.communicate(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                w.kill()
                out, _ = w.communicate()
                print(f"run_gloo_workers: rank {rank} still running after {args.timeout} s: killed\n{out}",
                      file=sys.stderr)
                status = 124
                continue
            if w.returncode == 0 or not re.search(args.expect_failure, out):
                print(f"run_gloo_workers: rank {rank} exited with {w.returncode}; expected a failure saying "
                      f"{args.expect_failure!r}:\n{out}", file=sys.stderr)
                status = status or 1
            else:
                print(f"rank {rank} failed as expected: {re.search(args.expect_failure, out).group(0)}")
        return status
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
