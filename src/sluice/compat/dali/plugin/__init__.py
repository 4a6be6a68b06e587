"""``nvidia.dali.plugin`` on sluice: ``pytorch`` (iterators, ``feed_ndarray``, the DataLoader proxy) and
``base_iterator`` (``LastBatchPolicy``). Other frameworks' plugins raise NotImplementedError.

Example::

    from nvidia.dali.plugin.pytorch import DALIGenericIterator   # after sluice.compat.install()
"""

import sys as _sys

from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.compat.dali.plugin import base_iterator, pytorch

__all__ = ["base_iterator", "pytorch"]

__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
