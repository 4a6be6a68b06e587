"""``nvidia.dali.plugin.jax`` on sluice: :class:`DALIGenericIterator` and ``LastBatchPolicy`` from
:mod:`sluice.jax` (needs JAX). DALI's ``data_iterator`` decorators raise NotImplementedError.

Example::

    from nvidia.dali.plugin.jax import DALIGenericIterator   # after sluice.compat.install()
    it = DALIGenericIterator(pipe, ["images", "labels"], reader_name="Reader")
"""

import sys as _sys

from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.jax import DALIGenericIterator, LastBatchPolicy

__all__ = ["DALIGenericIterator", "LastBatchPolicy"]

__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
