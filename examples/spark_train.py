"""Training with horovodlite from Spark (horovodlite.spark.run), on a local Spark:

    PYTHONPATH=build/python .venv/bin/python examples/spark_train.py --num-proc 2

starts a SparkSession (local[num_proc]; --master for another), runs the training
function of examples/engine_common.py in num_proc Spark tasks over horovodlite's
Gloo transport, and prints the start-up overhead and the time per step. The same
function under mpirun, for comparison:

    source ci/env.sh; PYTHONPATH=build/python mpirun -np 2 .venv/bin/python examples/spark_train.py --under-mpirun
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine_common  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-proc", type=int, default=2)
    p.add_argument("--master", default=None, help="Spark master (default local[num_proc])")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--jobs", type=int, default=2, help="jobs in a row in the same SparkSession")
    p.add_argument("--no-train", action="store_true", help="measure the start-up overhead only (no collectives)")
    p.add_argument("--under-mpirun", action="store_true", help="run the function directly (under mpirun)")
    args = p.parse_args()
    if args.under_mpirun:
        engine_common.main_under_mpirun(args)
        return

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the tasks run this Python (and its horovodlite)
    import cloudpickle
    import horovodlite.spark
    from pyspark.sql import SparkSession
    cloudpickle.register_pickle_by_value(engine_common)
    t = time.time()
    spark = (SparkSession.builder.master(args.master or "local[%d]" % args.num_proc).appName("horovodlite-example")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    print("spark: SparkSession up in %.2f s" % (time.time() - t))
    for job in range(args.jobs):
        t_call = time.time()
        fn = engine_common.enter_only if args.no_train else engine_common.train
        results = horovodlite.spark.run(fn, kwargs={"steps": args.steps, "batch": args.batch, "hidden": args.hidden},
                                        num_proc=args.num_proc, verbose=0)
        engine_common.report("spark job %d" % job, t_call, results)
    spark.stop()


if __name__ == "__main__":
    main()
