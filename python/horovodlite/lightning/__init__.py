"""Lightning 2.x on horovodlite: ``from horovodlite.lightning import HorovodStrategy``,
then ``Trainer(strategy=HorovodStrategy())`` (docs/lightning.md).

This is the strategy of the ``lightning`` package (``lightning.pytorch``), or of
``pytorch_lightning`` where ``lightning`` is not installed. Each package has its
own: ``horovodlite.lightning.pytorch`` and ``horovodlite.lightning.pytorch_lightning``.
"""

import importlib.util

if importlib.util.find_spec("lightning") is not None:
    from horovodlite.lightning.pytorch import HorovodEnvironment, HorovodStrategy
elif importlib.util.find_spec("pytorch_lightning") is not None:
    from horovodlite.lightning.pytorch_lightning import HorovodEnvironment, HorovodStrategy
else:
    raise ModuleNotFoundError("horovodlite.lightning needs Lightning 2.x: pip install lightning (or pytorch_lightning)",
                              name="lightning")

__all__ = ["HorovodEnvironment", "HorovodStrategy"]
