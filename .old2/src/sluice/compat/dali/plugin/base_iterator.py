"""``nvidia.dali.plugin.base_iterator`` on sluice: :class:`LastBatchPolicy`.

Example::

    from nvidia.dali.plugin.base_iterator import LastBatchPolicy   # after sluice.compat.install()
"""

import sys as _sys

from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.torch.iterator import LastBatchPolicy

__all__ = ["LastBatchPolicy"]

__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
