"""``nvidia.dali.data_node`` on sluice: :class:`DataNode`, the symbolic batch that operators return.

Example::

    from nvidia.dali.data_node import DataNode    # after sluice.compat.install()
    assert isinstance(fn.random.coin_flip(), DataNode)
"""

import sys as _sys

from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.pipeline.graph import DataNode

__all__ = ["DataNode"]

__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
