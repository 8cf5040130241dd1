"""horovodlite: a Horovod-style collective-communication library.

Use ``import horovodlite.torch as hvd`` for Horovod's PyTorch API.
"""


def _version():
    # Written by the CMake build and by setup.py from the one source,
    # horovodlite/include/horovodlite/version.h; read from there directly in a
    # source checkout that has not been built.
    try:
        from horovodlite._version import __version__ as version
        return version
    except ImportError:
        import os
        import re
        header = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                              "horovodlite", "include", "horovodlite", "version.h")
        try:
            with open(header) as f:
                text = f.read()
        except OSError:
            return "0+unknown"
        parts = [re.search(r"^#define HVL_VERSION_%s (\d+)$" % p, text, re.M) for p in ("MAJOR", "MINOR", "PATCH")]
        return ".".join(m.group(1) for m in parts) if all(parts) else "0+unknown"


__version__ = _version()
