"""The features of ``fn.readers.tfrecord`` (DALI's ``nvidia.dali.tfrecord``): what to take from each
``tf.train.Example`` and in which type and shape.

Example::

    from sluice import fn, tfrecord as tfrec

    inputs = fn.readers.tfrecord(path=files, index_path=indexes, features={
        "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
        "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
        "image/object/bbox/xmin": tfrec.VarLenFeature(tfrec.float32, 0.0),
    })
    images = fn.decoders.image(inputs["image/encoded"], device="mixed")
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["int64", "float32", "string", "FixedLenFeature", "VarLenFeature", "Feature"]

#: The feature types: a ``tf.train.Example``'s int64 list, float list and bytes list.
int64 = "int64"
float32 = "float32"
string = "string"
_TYPES = (int64, float32, string)


@dataclass(frozen=True)
class Feature:
    """A feature to read: its type, its shape (None: variable length) and the value used when a record lacks it
    (None: a record without it is an error)."""

    dtype: str
    shape: tuple[int, ...] | None
    default_value: Any

    def __post_init__(self) -> None:
        if self.dtype not in _TYPES:
            raise ValueError(f"Invalid feature type ({self.dtype!r}). Supported values are tfrecord.int64, "
                             "tfrecord.float32, tfrecord.string.")


def FixedLenFeature(shape: Sequence[int] | int, dtype: str, default_value: Any = None) -> Feature:  # noqa: N802
    """A feature with ``prod(shape)`` values per record, output with that shape (``()``: one value, a scalar;
    strings: the bytes of the first value, as a 1-D UINT8 tensor)."""
    shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
    return Feature(dtype, shape, default_value)


def VarLenFeature(dtype: str, default_value: Any = None, *,  # noqa: N802
                  partial_shape: Sequence[int] | None = None) -> Feature:
    """A feature with any number of values per record, output as a 1-D tensor of them (a record lacking it gives
    ``[default_value]``, or an empty tensor when there is no default)."""
    if partial_shape is not None:
        raise ValueError("VarLenFeature(partial_shape=...) is not supported: the values come out 1-D")
    return Feature(dtype, None, default_value)
