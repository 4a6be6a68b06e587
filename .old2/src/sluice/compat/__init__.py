"""Run DALI programs on sluice by changing one import (or none, with :func:`install`).

``sluice.compat.dali`` mirrors ``nvidia.dali``'s module tree: ``pipeline`` (``Pipeline``, ``pipeline_def``),
``fn``, ``ops`` (legacy class names and arguments included), ``types``, ``tensors``, ``math``,
``plugin.pytorch`` and ``plugin.pytorch.experimental.proxy``. :func:`install` makes ``import nvidia.dali...``
resolve to it when NVIDIA DALI itself is not installed; other ``nvidia.*`` packages are untouched.

Deprecated DALI names and arguments work with a ``DeprecationWarning`` naming the new one; anything sluice does
not implement raises :class:`NotSupportedError` (a ``NotImplementedError``) naming it.

Example::

    import sluice.compat
    sluice.compat.install()

    from nvidia.dali import pipeline_def, fn, types          # unchanged DALI code from here on
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

or, without the import hook::

    from sluice.compat.dali import pipeline_def, fn, types
"""

from sluice.compat._importer import install, real_dali_available, uninstall
from sluice.compat._missing import NotSupportedError

__all__ = ["NotSupportedError", "dali", "install", "real_dali_available", "uninstall"]


def __getattr__(name: str):
    if name == "dali":  # imported on first use: it builds the fn/ops trees
        import importlib

        return importlib.import_module("sluice.compat.dali")
    raise AttributeError(f"module 'sluice.compat' has no attribute {name!r}")
