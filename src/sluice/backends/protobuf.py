"""The protobuf wire format, read without generated code: enough to pull fields out of a message's bytes
(``tf.train.Example``, Caffe's ``Datum``, Caffe2's ``TensorProtos``).

Example::

    for field, wire, value in fields(data, 0, len(data)):
        ...   # wire 0: an int; wire 2: (begin, end) of the bytes; wire 1 / 5: (begin, end) of 8 / 4 bytes
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = ["ProtobufError", "varint", "fields", "repeated_ints", "repeated_floats"]


class ProtobufError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


def varint(data: memoryview, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it."""
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("a varint runs past the end of the message")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("a varint is longer than 10 bytes")


def fields(data: memoryview, start: int, end: int) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of the fields of the message in ``data[start:end]``: an int for wire type
    0, the ``(begin, end)`` span of the bytes for the others."""
    pos = start
    while pos < end:
        key, pos = varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(data, pos)
            yield field, wire, value
        elif wire == 2:
            length, pos = varint(data, pos)
            if pos + length > end:
                raise ProtobufError("a field runs past the end of its message")
            yield field, wire, (pos, pos + length)
            pos += length
        elif wire == 5:
            yield field, wire, (pos, pos + 4)
            pos += 4
        elif wire == 1:
            yield field, wire, (pos, pos + 8)
            pos += 8
        else:
            raise ProtobufError(f"unsupported protobuf wire type {wire}")
    if pos != end:
        raise ProtobufError("the last field runs past the end of its message")


def _signed(v: int, bits: int) -> int:
    v &= (1 << 64) - 1
    v = v - (1 << 64) if v >= 1 << 63 else v
    if bits == 32:
        v = (v + (1 << 31)) % (1 << 32) - (1 << 31)
    return v


def repeated_ints(data: memoryview, wire: int, value, out: list[int], bits: int = 64) -> None:
    """Append the values of one occurrence of a repeated int32/int64 field (packed or not) to ``out``."""
    if wire == 0:
        out.append(_signed(int(value), bits))
        return
    if wire != 2:
        raise ProtobufError(f"an integer field has wire type {wire}")
    pos, end = value
    while pos < end:
        v, pos = varint(data, pos)
        out.append(_signed(v, bits))


def repeated_floats(data: memoryview, wire: int, value, out: list[float]) -> None:
    """Append the values of one occurrence of a repeated float field (packed or not) to ``out``."""
    if wire not in (2, 5):
        raise ProtobufError(f"a float field has wire type {wire}")
    a, b = value
    if (b - a) % 4:
        raise ProtobufError("a packed float field's length is not a multiple of 4")
    out.extend(np.frombuffer(data[a:b], "<f4").tolist())
