"""Training with horovodlite from Ray (horovodlite.ray.RayExecutor), on a local Ray:

    PYTHONPATH=build/python .venv/bin/python examples/ray_train.py --num-workers 2

starts Ray (ray.init(); --address for an existing cluster), starts num_workers
actors, runs the training function of examples/engine_common.py on them over
horovodlite's Gloo transport (twice: the same actors run both), and prints the
start-up overhead and the time per step. The same function under mpirun:

    source ci/env.sh; PYTHONPATH=build/python mpirun -np 2 .venv/bin/python examples/ray_train.py --under-mpirun
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine_common  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--address", default=None, help="an existing Ray cluster (default: start a local one)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--jobs", type=int, default=2, help="functions in a row on the same workers")
    p.add_argument("--no-train", action="store_true", help="measure the start-up overhead only (no collectives)")
    p.add_argument("--under-mpirun", action="store_true", help="run the function directly (under mpirun)")
    args = p.parse_args()
    if args.under_mpirun:
        engine_common.main_under_mpirun(args)
        return

    import ray
    from horovodlite.ray import RayExecutor
    from ray import cloudpickle
    cloudpickle.register_pickle_by_value(engine_common)
    t = time.time()
    ray.init(address=args.address, include_dashboard=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    print("ray: ray.init() in %.2f s" % (time.time() - t))
    t_call = time.time()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=args.num_workers)
    executor.start()
    try:
        for job in range(args.jobs):
            fn = engine_common.enter_only if args.no_train else engine_common.train
            results = executor.run(fn, kwargs={"steps": args.steps, "batch": args.batch, "hidden": args.hidden})
            # The first job's overhead counts from before start(): actors, ranks, rendezvous.
            engine_common.report("ray job %d" % job, t_call, results)
            t_call = time.time()
    finally:
        executor.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
