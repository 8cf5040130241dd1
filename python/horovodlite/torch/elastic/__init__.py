"""Elastic training with PyTorch (``horovod.torch.elastic`` 0.28's names):

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch, (x, y) in enumerate(loader, state.batch): ...
                state.commit()

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
    train(state)

Launched with horovodlite-run --min-np/--max-np/--host-discovery-script; see
horovodlite.common.elastic for the protocol with the launcher.
"""

from horovodlite.common.elastic import ObjectState as _ObjectState
from horovodlite.common.elastic import State, notification_manager, run_fn  # noqa: F401
from horovodlite.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from horovodlite.torch.elastic.sampler import ElasticSampler
from horovodlite.torch.elastic.state import TorchState


class ObjectState(_ObjectState):
    """ObjectState over horovodlite.torch's broadcast_object and rank (Horovod's
    explicit (bcast_object, get_rank, **kwargs) signature works too)."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        from horovodlite.torch.basics import rank
        from horovodlite.torch.functions import broadcast_object
        super().__init__(bcast_object=bcast_object or broadcast_object, get_rank=get_rank or rank, **kwargs)


def run(func):
    """Decorator: runs func(state, ...) elastically. After a collective fails
    (HorovodInternalError) the state rolls back to its last commit; after a
    host change (HostsUpdatedInterrupt) it is kept; either way the world is
    re-formed (hvd.shutdown(), the driver's new rank and size, hvd.init()) and
    the state synchronized from rank 0 before func runs again. Collectives must
    not run before func is called (a new worker would meet the others there)."""
    return run_fn(func, _reset)


def _reset():
    from horovodlite.common import elastic as common
    from horovodlite.torch.basics import init, shutdown
    try:
        shutdown()
    except Exception:  # noqa: BLE001 - the old world is broken; init() builds a new one
        pass
    if common.elastic_enabled():
        common.rendezvous()
    init()


__all__ = ["ElasticSampler", "HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState", "State",
           "TorchState", "run"]
