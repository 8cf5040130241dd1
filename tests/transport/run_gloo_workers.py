"""Starts a Gloo job without mpirun: serves the rendezvous key-value store
(horovodlite.runner.rendezvous, the Gloo-launch contract) and runs N copies of
a command with the contract's environment, all on this host; exits with the
first failing worker's status (or 0). For tests and benchmarks:

    python3 tests/transport/run_gloo_workers.py -np 2 -- build/tests/transport/gloo_worker
    python3 tests/transport/run_gloo_workers.py -np 2 -- build/bench/transport_bench 1,4,16,64 20
"""
import argparse
import os
import subprocess
import sys
import time

from horovodlite.runner.rendezvous import RendezvousServer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-np", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=600, help="seconds before the workers are killed")
    parser.add_argument("--killed", type=int, default=-1,
                        help="this rank must end by SIGKILL (a test of the others noticing it)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.np < 1:
        parser.error("give -np N and a command after --")
    server = RendezvousServer(bind_host="127.0.0.1", port=0)
    port = server.start()
    workers = []
    try:
        for rank in range(args.np):
            env = dict(os.environ)
            for k in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
                env.pop(k, None)
            env.update({
                "HOROVOD_CONTROLLER": "gloo",
                "HOROVOD_CPU_OPERATIONS": "gloo",
                "HOROVOD_RANK": str(rank),
                "HOROVOD_SIZE": str(args.np),
                "HOROVOD_LOCAL_RANK": str(rank),
                "HOROVOD_LOCAL_SIZE": str(args.np),
                "HOROVOD_CROSS_RANK": "0",
                "HOROVOD_CROSS_SIZE": "1",
                "HOROVOD_HOSTNAME": "localhost",
                "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
                "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
                "HOROVOD_GLOO_TIMEOUT_SECONDS": env.get("HOROVOD_GLOO_TIMEOUT_SECONDS", "30"),
                "HOROVODLITE_SECRET_KEY": server.secret,
            })
            workers.append(subprocess.Popen(command, env=env))
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


if __name__ == "__main__":
    sys.exit(main())
