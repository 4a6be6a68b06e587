"""``nvidia.dali.types`` on sluice: the same enums and constants (``types.FLOAT``, ``types.RGB``,
``types.INTERP_LINEAR``, the legacy layout constants ``types.NCHW`` / ``types.NHWC``), ``types.Constant``,
``SampleInfo`` and ``BatchInfo``.

Example::

    from nvidia.dali import types          # after sluice.compat.install()
    cmn = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout=types.NCHW)
"""

from __future__ import annotations

import sys as _sys
from typing import Any

import numpy as _np

from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.pipeline.graph import Constant as ScalarConstant
from sluice.pipeline.graph import DataNode as _DataNode
from sluice.pipeline.graph import constant_array as _constant_array
from sluice.types import *
from sluice.types import DALIDataType as _DALIDataType
from sluice.types import __all__ as _all

CPU_ONLY_DEVICE_ID = None
"""What DALI's ``types.CPU_ONLY_DEVICE_ID`` means: a pipeline without a GPU (``device_id=None``)."""



def Constant(value: Any, dtype: _DALIDataType | None = None, shape: Any = None, layout: str | None = None,
             device: str | None = None, **kwargs: Any) -> ScalarConstant | _DataNode:
    """DALI's ``types.Constant``: a scalar without ``device``/``shape``/``layout`` stays a typed constant for
    arithmetic (``node * types.Constant(2, types.UINT8)``); anything else becomes an ``fn.constant`` node,
    usable as an operator input (``fn.spectrogram(types.Constant(signal, device="gpu"), ...)``)."""
    if kwargs:
        raise TypeError(f"types.Constant: unexpected arguments {sorted(kwargs)}")
    array = _np.asarray(value)
    if device is None and shape is None and layout is None and array.ndim == 0:
        return ScalarConstant(value, dtype)
    import sluice.fn

    # 64-bit arrays become 32-bit ones unless a dtype says otherwise, as in DALI
    return sluice.fn.constant(value=_constant_array(array), dtype=dtype,
                              shape=list(shape) if shape is not None else None, layout=layout or "",
                              device=device or "cpu")


__all__ = [*_all, "Constant", "ScalarConstant", "CPU_ONLY_DEVICE_ID"]  # noqa: PLE0604 - sluice.types' names

__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
