"""HorovodStrategy for the ``pytorch_lightning`` package (2.x):
``Trainer(strategy=HorovodStrategy())`` or, once this module is imported,
``Trainer(strategy="horovodlite")``. docs/lightning.md."""

import pytorch_lightning
from lightning_fabric.plugins import ClusterEnvironment
from pytorch_lightning.strategies import ParallelStrategy, StrategyRegistry

from horovodlite.lightning._strategy import HorovodEnvironmentBase, HorovodStrategyBase, check_version

check_version("pytorch_lightning", pytorch_lightning.__version__)


class HorovodEnvironment(HorovodEnvironmentBase, ClusterEnvironment):
    """The horovodlite world as Lightning's ClusterEnvironment."""


class HorovodStrategy(HorovodStrategyBase, ParallelStrategy):
    """One process per horovodlite rank; gradients averaged by hvd.DistributedOptimizer."""

    _environment_class = HorovodEnvironment


StrategyRegistry.register(HorovodStrategy.strategy_name, HorovodStrategy,
                          description="horovodlite: one process per rank, started by its launcher", override=True)
