"""Running horovodlite on Ray actors: ``horovodlite.ray.RayExecutor`` (horovod.ray's API).

    import ray
    from horovodlite.ray import RayExecutor

    ray.init()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=2)
    executor.start()

    def fn():
        import horovodlite.torch as hvd
        hvd.init()
        return hvd.rank()

    executor.run(fn)          # [0, 1]
    executor.shutdown()
"""

from horovodlite.ray.runner import BaseHorovodWorker, RayExecutor, RayJobError, RaySettings

__all__ = ["BaseHorovodWorker", "RayExecutor", "RayJobError", "RaySettings"]
