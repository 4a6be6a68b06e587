"""Byte ranges of files read into one buffer, and CRC-32C checksums, in the compiled core with pure-Python twins.

Readers of archives and containers (tar shards, TFRecord files, the rows of a ``.npy`` region) read a batch as
byte ranges of a few files: :func:`read_ranges` reads them all into their slots of one buffer in one call, the
GIL released, keeping a file open across its consecutive ranges. :func:`crc32c` checks a batch of records.

Example::

    got, status = read_ranges(["a.tar", "a.tar"], starts, sizes, offsets, buf)
"""

from __future__ import annotations

import os

import numpy as np

from sluice import native

__all__ = ["read_ranges", "crc32c"]


def read_ranges(paths: list[str], starts: np.ndarray, sizes: np.ndarray, offsets: np.ndarray,
                out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Read ``sizes[i]`` bytes of ``paths[i]`` from byte ``starts[i]`` into ``out[offsets[i]:]`` for each ``i``.
    Returns (bytes read per range, fewer where the file ends first; status per range: 0, or -errno where the file
    cannot be opened or read)."""
    starts, sizes, offsets = (np.ascontiguousarray(a, np.int64) for a in (starts, sizes, offsets))
    c = native.core()
    if c is not None:
        return c.read_ranges(paths, starts, sizes, offsets, out)
    n = len(paths)
    if not (len(starts) == len(sizes) == len(offsets) == n):
        raise ValueError("read_ranges: starts, sizes and offsets need one value per path")
    if n and ((starts < 0).any() or (sizes < 0).any() or (offsets < 0).any() or (offsets + sizes > out.size).any()):
        raise ValueError("read_ranges: a range's slot lies outside the buffer")
    got = np.zeros(n, np.int64)
    status = np.zeros(n, np.int32)
    fd, fd_path, fd_errno = -1, None, 0
    try:
        for i in range(n):
            if paths[i] != fd_path:
                if fd >= 0:
                    os.close(fd)
                fd_path = paths[i]
                try:
                    fd, fd_errno = os.open(fd_path, os.O_RDONLY), 0
                except OSError as e:
                    fd, fd_errno = -1, e.errno or 5
            if fd < 0:
                status[i] = -fd_errno
                continue
            view = out[int(offsets[i]): int(offsets[i] + sizes[i])]
            have = 0
            try:
                while have < view.size:
                    r = os.preadv(fd, [view[have:]], int(starts[i]) + have)
                    if r == 0:
                        break
                    have += r
            except OSError as e:
                status[i] = -(e.errno or 5)
            got[i] = have
    finally:
        if fd >= 0:
            os.close(fd)
    return got, status


def _table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    return table


_TABLE: list[int] | None = None


def _crc32c_py(data: memoryview) -> int:
    global _TABLE
    if _TABLE is None:
        _TABLE = _table()
    t, c = _TABLE, 0xFFFFFFFF
    for b in bytes(data):
        c = (c >> 8) ^ t[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def crc32c(buf: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The CRC-32C (Castagnoli) of each slice ``buf[offsets[i] : offsets[i] + sizes[i]]`` (uint32 array)."""
    offsets, sizes = np.ascontiguousarray(offsets, np.int64), np.ascontiguousarray(sizes, np.int64)
    c = native.core()
    if c is not None:
        return c.crc32c(buf, offsets, sizes)
    flat = memoryview(np.ascontiguousarray(buf).reshape(-1).view(np.uint8))
    if len(offsets) and ((offsets < 0).any() or (sizes < 0).any() or (offsets + sizes > len(flat)).any()):
        raise ValueError("crc32c: a slice lies outside the buffer")
    return np.array([_crc32c_py(flat[o: o + s]) for o, s in zip(offsets.tolist(), sizes.tolist())], np.uint32)
