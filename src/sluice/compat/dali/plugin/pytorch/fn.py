"""``nvidia.dali.plugin.pytorch.fn`` on sluice: ``torch_python_function`` (:mod:`sluice.ops.python_function`).

Example::

    import nvidia.dali.plugin.pytorch as dalitorch    # after sluice.compat.install()
    images = dalitorch.fn.torch_python_function(images, function=torch_transform, batch_processing=True)
"""

import sys as _sys

from sluice.compat._legacy import make_function as _make_function
from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.schema import get_schema as _get_schema

__all__ = ["torch_python_function"]

torch_python_function = _make_function(_get_schema("torch_python_function"), "torch_python_function")
torch_python_function.__module__ = __name__

__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
