"""The TFRecord file format and ``tf.train.Example`` records, read without TensorFlow.

A TFRecord file is a sequence of records, each framed as::

    uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)

(little-endian; the mask is TensorFlow's: ``((crc >> 15 | crc << 17) + 0xA282EAD8) mod 2**32``). An index (DALI's
``tfrecord2idx`` format, one ``offset size`` line per record, ``size`` counting the framing) lets a reader fetch
record ``i`` alone. :func:`build_index` walks the framing, checking each length's CRC; :func:`check_records` checks
a batch of records (both CRCs) in one call of the compiled core; :func:`parse_example` decodes the protobuf wire
format of a ``tf.train.Example`` (features of bytes, float and int64 lists).

Example::

    text = build_index(open("train.tfrecord", "rb"), "train.tfrecord", size)
"""

from __future__ import annotations

import struct
from typing import BinaryIO

import numpy as np

from sluice.backends.protobuf import ProtobufError, fields, varint
from sluice.native import io as native_io

__all__ = ["TFRecordError", "masked_crc", "build_index", "parse_index", "check_records", "parse_example",
           "HEADER", "FOOTER"]

HEADER = 12  # uint64 length + uint32 CRC of it
FOOTER = 4  # uint32 CRC of the data


class TFRecordError(ValueError):
    """A TFRecord file, record or index that is damaged (the message names the file and the record)."""


def masked_crc(crc: np.ndarray | int) -> np.ndarray | int:
    """TensorFlow's masking of a CRC-32C."""
    c = np.asarray(crc, np.uint64)
    out = (((c >> np.uint64(15)) | (c << np.uint64(17))) + np.uint64(0xA282EAD8)) & np.uint64(0xFFFFFFFF)
    return int(out) if np.ndim(crc) == 0 else out.astype(np.uint32)


def build_index(f: BinaryIO, path: str, size: int) -> str:
    """The index text of the TFRecord file ``f`` (``size`` bytes; ``path`` names it in errors): one
    ``offset size`` line per record. Each record's length is checked against its CRC."""
    lines = []
    pos = 0
    while pos < size:
        head = f.read(HEADER)
        if len(head) < HEADER:
            raise TFRecordError(f"TFRecord file '{path}' is truncated: record {len(lines)} at byte {pos} has only "
                                f"{len(head)} of its 12 header bytes")
        length, crc = struct.unpack("<QI", head)
        got = int(native_io.crc32c(np.frombuffer(head[:8], np.uint8), np.array([0]), np.array([8]))[0])
        if masked_crc(got) != crc:
            raise TFRecordError(f"TFRecord file '{path}' is damaged: the length of record {len(lines)} (at byte "
                                f"{pos}) fails its CRC")
        total = HEADER + length + FOOTER
        if pos + total > size:
            raise TFRecordError(f"TFRecord file '{path}' is truncated: record {len(lines)} at byte {pos} needs "
                                f"{total} bytes, the file ends after {size - pos}")
        lines.append(f"{pos} {total}\n")
        pos += total
        f.seek(pos)
    return "".join(lines)


def parse_index(text: str, where: str, file_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, sizes) of the records of an index; ``where`` names it in errors. With ``file_size`` the records
    must lie in the file."""
    rows = [ln.split() for ln in text.splitlines() if ln.strip()]
    try:
        table = np.array([(int(r[0]), int(r[1])) for r in rows], np.int64).reshape(-1, 2)
    except (ValueError, IndexError):
        bad = next(i for i, r in enumerate(rows) if len(r) < 2 or not all(x.lstrip("-").isdigit() for x in r[:2]))
        raise TFRecordError(f"TFRecord index {where} is broken: line {bad + 1} should be 'offset size', got "
                            f"{' '.join(rows[bad])[:80]!r}") from None
    offsets, sizes = table[:, 0].copy(), table[:, 1].copy()
    bad = np.flatnonzero((offsets < 0) | (sizes < HEADER + FOOTER))
    if bad.size:
        raise TFRecordError(f"TFRecord index {where} is broken: line {int(bad[0]) + 1} holds an impossible record "
                            f"(offset {offsets[bad[0]]}, size {sizes[bad[0]]})")
    if file_size is not None:
        bad = np.flatnonzero(offsets + sizes > file_size)
        if bad.size:
            raise TFRecordError(f"TFRecord index {where} is broken: record {int(bad[0])} lies at bytes "
                                f"{offsets[bad[0]]}..{offsets[bad[0]] + sizes[bad[0]]}, past the end of the file "
                                f"({file_size} bytes)")
    return offsets, sizes


def check_records(buf: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Indices of the records (``buf[offsets[i]:offsets[i] + sizes[i]]``, framing included) whose length field
    disagrees with the record's size or whose length or data CRC fails; all CRCs in one call."""
    n = len(offsets)
    if not n:
        return np.zeros(0, np.int64)
    heads = buf[(offsets[:, None] + np.arange(HEADER)).reshape(-1)].reshape(n, HEADER)
    lengths = heads[:, :8].copy().view("<u8").reshape(n).astype(np.int64)
    length_crcs = heads[:, 8:12].copy().view("<u4").reshape(n)
    framed = lengths + HEADER + FOOTER == sizes
    data_len = np.where(framed, lengths, 0)
    crcs = native_io.crc32c(buf, np.concatenate([offsets, offsets + HEADER]), np.concatenate(
        [np.full(n, 8, np.int64), data_len]))
    tails = buf[((offsets + sizes - FOOTER)[:, None] + np.arange(FOOTER)).reshape(-1)].reshape(n, FOOTER)
    data_crcs = tails.copy().view("<u4").reshape(n)
    ok = framed & (masked_crc(crcs[:n]) == length_crcs) & (masked_crc(crcs[n:]) == data_crcs)
    return np.flatnonzero(~ok)


# ---- tf.train.Example -----------------------------------------------------------------------------------------------
def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    try:
        return varint(data, pos)
    except ProtobufError as e:
        raise TFRecordError(str(e)) from None


def _fields(data: memoryview, start: int, end: int):
    """(field number, wire type, value or (begin, end) of a length-delimited field) of a message's bytes."""
    try:
        yield from fields(data, start, end)
    except ProtobufError as e:
        raise TFRecordError(str(e)) from None


def _int64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def parse_example(data: memoryview, wanted: set[str]) -> dict[str, tuple[str, object]]:
    """The features of a ``tf.train.Example`` named in ``wanted``: name -> (kind, values), kind ``"bytes"``
    (values: a list of (begin, end) spans of ``data``), ``"float"`` (a float32 array) or ``"int64"`` (an int64
    array)."""
    out: dict[str, tuple[str, object]] = {}
    for field, wire, span in _fields(data, 0, len(data)):
        if field != 1 or wire != 2:
            continue
        for f2, w2, entry in _fields(data, *span):  # Features.feature: map entries
            if f2 != 1 or w2 != 2:
                continue
            key = value = None
            for f3, w3, sub in _fields(data, *entry):
                if f3 == 1 and w3 == 2:
                    key = bytes(data[sub[0]:sub[1]]).decode("utf-8", "replace")
                elif f3 == 2 and w3 == 2:
                    value = sub
            if key is None or key not in wanted or value is None:
                continue
            out[key] = _feature(data, value)
    return out


def _feature(data: memoryview, span: tuple[int, int]) -> tuple[str, object]:
    for kind, wire, lst in _fields(data, *span):
        if wire != 2:
            continue
        if kind == 1:  # BytesList
            return "bytes", [v for f, w, v in _fields(data, *lst) if f == 1 and w == 2]
        if kind == 2:  # FloatList: packed or not
            parts = []
            for f, w, v in _fields(data, *lst):
                if f == 1:
                    parts.append(np.frombuffer(data[v[0]:v[1]], "<f4"))
            return "float", np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
        if kind == 3:  # Int64List: packed varints or one varint per field
            values = []
            for f, w, v in _fields(data, *lst):
                if f != 1:
                    continue
                if w == 0:
                    values.append(_int64(v))
                elif w == 2:
                    pos = v[0]
                    while pos < v[1]:
                        x, pos = _varint(data, pos)
                        values.append(_int64(x))
            return "int64", np.array(values, np.int64)
    return "bytes", []  # an empty Feature
