"""``nvidia.dali.plugin`` on sluice: ``pytorch`` (iterators, ``feed_ndarray``, the DataLoader proxy),
``base_iterator`` (``LastBatchPolicy``) and ``jax`` (imported on use: it needs JAX). Other frameworks' plugins
raise NotImplementedError.

Example::

    from nvidia.dali.plugin.pytorch import DALIGenericIterator   # after sluice.compat.install()
"""

import sys as _sys

from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.compat.dali.plugin import base_iterator, pytorch

__all__ = ["base_iterator", "pytorch"]

_missing_name = _module_getattr(__name__, lambda: [*_public_names(_sys.modules[__name__]), "jax"])


def __getattr__(name: str):
    if name == "jax":  # needs JAX: imported on first use only
        import importlib

        return importlib.import_module(f"{__name__}.jax")
    return _missing_name(name)
