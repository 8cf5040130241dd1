"""A driver run as `<venv>/bin/python driver_python_job.py OUT` whose Spark
workers run another python3 (PATH's; PYSPARK_PYTHON unset): test_spark_run.py's
test_ranks_run_the_drivers_python. Writes what each job gave to OUT as JSON."""

import json
import os
import sys

import horovodlite.spark
from pyspark.sql import SparkSession


def where():
    import sys
    return sys.executable


def outcome(**kwargs):
    try:
        return {"ok": horovodlite.spark.run(where, num_proc=2, verbose=0, **kwargs)}
    except Exception as e:  # noqa: BLE001 - the test reads the message
        return {"error": "%s: %s" % (type(e).__name__, e)}


def main():
    out, stub_python = sys.argv[1], sys.argv[2]
    spark = (SparkSession.builder.master("local[2]").appName("horovodlite-driver-python")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        report = {"driver": sys.executable, "worker": spark.sparkContext.pythonExec,
                  "default": outcome(),
                  "missing": outcome(executable=os.path.join(os.path.dirname(out), "no-such-python")),
                  "mismatch": outcome(executable=stub_python)}
    finally:
        spark.stop()
    with open(out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
