"""Running horovodlite inside Spark jobs: ``horovodlite.spark.run`` (horovod.spark.run's API).

    from pyspark.sql import SparkSession
    import horovodlite.spark

    spark = SparkSession.builder.master("local[2]").getOrCreate()

    def fn(magic):
        import horovodlite.torch as hvd
        hvd.init()
        return hvd.rank(), magic

    horovodlite.spark.run(fn, args=(42,), num_proc=2)   # [(0, 42), (1, 42)]
"""

from horovodlite.spark.runner import SparkJobError, run

__all__ = ["SparkJobError", "run"]
