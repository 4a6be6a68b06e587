"""Operators: one file per operator (or small family), each a schema plus its CPU and GPU kernels.

Importing this package imports every operator module below it, so that their schemas register. The class form
of each operator (DALI's ``ops`` API: ``ops.Resize``, ``ops.readers.File``, ``ops.decoders.Image``) is attached
to the matching module of this package by the front end, :mod:`sluice._classes` (it builds graph nodes, which
belong to the pipeline layer above this one); ``import sluice`` does that.

Example::

    resize = ops.Resize(device="gpu", resize_shorter=256)
    images = resize(images)
"""

from __future__ import annotations as _annotations

import importlib as _importlib
import pkgutil as _pkgutil

__all__: list[str] = []


def _import_all() -> None:
    for info in _pkgutil.walk_packages(__path__, prefix=__name__ + "."):
        leaf = info.name.rsplit(".", 1)[-1]
        if leaf.startswith("_") and leaf != "__init__":
            continue
        _importlib.import_module(info.name)


_import_all()
