"""Data types, layouts, image types and interpolation types, named as DALI names them.

DALI users write ``types.FLOAT``, ``types.RGB``, ``types.INTERP_LINEAR``; the same spellings work here, and each
constant is a member of an enum (:class:`DALIDataType`, :class:`DALIImageType`, :class:`DALIInterpType`) so
that operator schemas can validate them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = [
    "DALIDataType", "DALIImageType", "DALIInterpType", "TensorLayout", "SampleInfo", "BatchInfo",
    "to_torch_dtype", "to_numpy_dtype", "from_torch_dtype", "max_value",
    "NO_TYPE", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FLOAT16", "FLOAT", "FLOAT32", "FLOAT64", "BOOL", "STRING",
    "RGB", "BGR", "GRAY", "YCbCr", "ANY_DATA",
    "INTERP_NN", "INTERP_LINEAR", "INTERP_CUBIC", "INTERP_LANCZOS3", "INTERP_TRIANGULAR", "INTERP_GAUSSIAN",
    "NCHW", "NHWC", "NFHWC", "NFCHW", "SAME",
]


class DALIDataType(enum.Enum):
    """Element types of tensors. ``FLOAT`` is float32, as in DALI."""

    NO_TYPE = "no_type"
    UINT8 = "uint8"
    UINT16 = "uint16"
    UINT32 = "uint32"
    UINT64 = "uint64"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT16 = "float16"
    FLOAT = "float32"
    FLOAT64 = "float64"
    BOOL = "bool"
    STRING = "string"

    def __repr__(self) -> str:
        return f"types.{self.name}"


class DALIImageType(enum.Enum):
    """Colour spaces of decoded images."""

    RGB = "RGB"
    BGR = "BGR"
    GRAY = "GRAY"
    YCbCr = "YCbCr"
    ANY_DATA = "ANY_DATA"

    def __repr__(self) -> str:
        return f"types.{self.name}"

    @property
    def channels(self) -> int:
        return 1 if self is DALIImageType.GRAY else 3


class DALIInterpType(enum.Enum):
    """Interpolation methods of the resampling operators."""

    INTERP_NN = "nn"
    INTERP_LINEAR = "linear"
    INTERP_CUBIC = "cubic"
    INTERP_LANCZOS3 = "lanczos3"
    INTERP_TRIANGULAR = "triangular"
    INTERP_GAUSSIAN = "gaussian"

    def __repr__(self) -> str:
        return f"types.{self.name}"


NO_TYPE = DALIDataType.NO_TYPE
UINT8 = DALIDataType.UINT8
UINT16 = DALIDataType.UINT16
UINT32 = DALIDataType.UINT32
UINT64 = DALIDataType.UINT64
INT8 = DALIDataType.INT8
INT16 = DALIDataType.INT16
INT32 = DALIDataType.INT32
INT64 = DALIDataType.INT64
FLOAT16 = DALIDataType.FLOAT16
FLOAT = DALIDataType.FLOAT
FLOAT32 = DALIDataType.FLOAT
FLOAT64 = DALIDataType.FLOAT64
BOOL = DALIDataType.BOOL
STRING = DALIDataType.STRING

RGB = DALIImageType.RGB
BGR = DALIImageType.BGR
GRAY = DALIImageType.GRAY
YCbCr = DALIImageType.YCbCr
ANY_DATA = DALIImageType.ANY_DATA

INTERP_NN = DALIInterpType.INTERP_NN
INTERP_LINEAR = DALIInterpType.INTERP_LINEAR
INTERP_CUBIC = DALIInterpType.INTERP_CUBIC
INTERP_LANCZOS3 = DALIInterpType.INTERP_LANCZOS3
INTERP_TRIANGULAR = DALIInterpType.INTERP_TRIANGULAR
INTERP_GAUSSIAN = DALIInterpType.INTERP_GAUSSIAN


class TensorLayout(str):
    """A layout string such as ``"HWC"``; one letter per dimension (DALI's TensorLayout)."""


# DALI's legacy layout constants describe a whole batch (N) but apply per sample.
NCHW = TensorLayout("CHW")
NHWC = TensorLayout("HWC")
NFHWC = TensorLayout("FHWC")
NFCHW = TensorLayout("FCHW")
SAME = TensorLayout("")

_TORCH = {
    UINT8: torch.uint8, UINT16: torch.uint16, UINT32: torch.uint32, UINT64: torch.uint64,
    INT8: torch.int8, INT16: torch.int16, INT32: torch.int32, INT64: torch.int64,
    FLOAT16: torch.float16, FLOAT: torch.float32, FLOAT64: torch.float64, BOOL: torch.bool,
}
_FROM_TORCH = {v: k for k, v in _TORCH.items()}


def to_torch_dtype(dtype: DALIDataType) -> torch.dtype:
    """The torch dtype of a DALI data type; raises for types torch cannot hold (STRING, NO_TYPE)."""
    try:
        return _TORCH[dtype]
    except KeyError:
        raise ValueError(f"{dtype!r} has no torch equivalent; supported: {sorted(t.name for t in _TORCH)}") from None


def to_numpy_dtype(dtype: DALIDataType) -> np.dtype:
    """The NumPy dtype of a DALI data type."""
    return np.dtype(dtype.value) if dtype in _TORCH else np.dtype(object)


def from_torch_dtype(dtype: torch.dtype) -> DALIDataType:
    """The DALI data type of a torch dtype."""
    try:
        return _FROM_TORCH[dtype]
    except KeyError:
        raise ValueError(f"torch dtype {dtype} has no sluice type") from None


def max_value(dtype: torch.dtype) -> float:
    """The value that stands for full intensity: the type's maximum for integers, 1.0 for floats."""
    if dtype.is_floating_point:
        return 1.0
    if dtype == torch.bool:
        return 1.0
    return float(torch.iinfo(dtype).max)


@dataclass(frozen=True)
class SampleInfo:
    """What a per-sample ``external_source`` callback is asked for (as DALI's ``types.SampleInfo``)."""

    idx_in_epoch: int
    idx_in_batch: int
    iteration: int
    epoch_idx: int


@dataclass(frozen=True)
class BatchInfo:
    """What a per-batch ``external_source`` callback with ``batch_info=True`` is asked for."""

    iteration: int
    epoch_idx: int


#: ``types.Constant`` (DALI's spelling: a typed scalar for arithmetic, or an ``fn.constant`` node) is made by the
#: graph layer, which builds on these types: ``import sluice`` sets it here to
#: :func:`sluice.pipeline.graph.types_constant` (layers point one way).
Constant: Any
