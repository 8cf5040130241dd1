"""horovodlite: a Horovod-style collective-communication library.

Use ``import horovodlite.torch as hvd`` for Horovod's PyTorch API.
"""

__version__ = "0.1.0"
