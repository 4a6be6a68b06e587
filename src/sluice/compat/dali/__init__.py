"""``nvidia.dali`` on sluice. After :func:`sluice.compat.install`, ``import nvidia.dali`` (and every module below
it that sluice provides) gives these modules, so a DALI program runs with no other change:

==============================================  ==========================================================
DALI module                                     provided as
==============================================  ==========================================================
``nvidia.dali`` (``Pipeline``, ``pipeline_def``)  :mod:`sluice.compat.dali`
``nvidia.dali.pipeline``                        :mod:`sluice.compat.dali.pipeline`
``nvidia.dali.fn`` / ``nvidia.dali.ops``          every sluice operator, with DALI's legacy names
``nvidia.dali.types``                           :mod:`sluice.types` plus ``Constant``
``nvidia.dali.tensors``                         ``TensorListCPU`` / ``TensorListGPU`` checks on :class:`sluice.Batch`
``nvidia.dali.math``                            ``abs``, ``pow`` (others raise NotImplementedError)
``nvidia.dali.tfrecord``                        :mod:`sluice.tfrecord` (``FixedLenFeature``, ``VarLenFeature``)
``nvidia.dali.backend`` / ``data_node``           tensor types, memory calls / ``DataNode``
``nvidia.dali.plugin.pytorch``                  :mod:`sluice.torch` iterators and ``feed_ndarray``
``nvidia.dali.plugin.pytorch.experimental.proxy``  :mod:`sluice.torch.proxy`
``nvidia.dali.auto_aug`` (and its modules)        :mod:`sluice.auto_aug` (the same modules)
==============================================  ==========================================================

Anything else raises NotImplementedError naming what is missing.

Example::

    import sluice.compat
    sluice.compat.install()
    from nvidia.dali import pipeline_def, fn, types
"""

import sys as _sys
import types as _types

from sluice import __version__ as _sluice_version
from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.compat.dali import (
    fn,
    math,
    ops,
    pipeline,
    plugin,
    tensors,
    tfrecord,
    types,
)
from sluice.compat.dali.pipeline import DataNode, Pipeline, pipeline_def


def _alias_package(package: _types.ModuleType, alias: str) -> None:
    """Make ``package`` and every module below it importable as ``alias`` and below (the same module objects, so
    that ``isinstance`` and identity hold across both names)."""
    prefix = package.__name__
    for name, module in list(_sys.modules.items()):
        if module is not None and (name == prefix or name.startswith(prefix + ".")):
            _sys.modules.setdefault(alias + name[len(prefix):], module)


import sluice.auto_aug as auto_aug  # noqa: E402 - after the fn tree it uses

_alias_package(auto_aug, __name__ + ".auto_aug")

# A PEP 440 version, so that programs comparing DALI versions can parse it: the release of the API level this
# layer provides (readers/decoders namespaces, pipeline_def), with sluice's own version as the local part.
__version__ = f"1.0.0+sluice.{_sluice_version}"

__all__ = ["DataNode", "Pipeline", "auto_aug", "fn", "math", "ops", "pipeline", "pipeline_def", "plugin", "tensors",
           "tfrecord", "types"]

__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
