"""``nvidia.dali.plugin.pytorch.experimental`` on sluice: ``proxy`` (DALIServer and DataLoader).

Example::

    from nvidia.dali.plugin.pytorch.experimental import proxy as dali_proxy   # after sluice.compat.install()
"""

import sys as _sys

from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.compat.dali.plugin.pytorch.experimental import proxy

__all__ = ["proxy"]

__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
