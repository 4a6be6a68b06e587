"""What the readers of archives, record files and manifests share beyond :class:`ReaderBase` (sample order,
sharding, shuffling, padding, checkpoints, ``reader_meta``): reading a batch's byte ranges into one buffer, and
the on-disk cache of the indexes they build.

A batch of a reader is a list of byte ranges (a tar member, a TFRecord record, the rows of a ``.npy`` region, an
image file) of local files or S3 objects. :func:`read_packed` reads them back to back into one buffer (page-locked
when the pipeline's GPU stage takes the outputs), local ranges by the compiled core with the GIL released, each
pool thread reading a run of them in one call, remote ones in one concurrent fetch (:mod:`sluice.backends.storage`).
Readers then hand the batch out packed (:meth:`Batch.from_packed`), which the mixed image decoders' fast lane and
the GPU copies take whole.

Example::

    buf, offsets, sizes = read_packed("fn.readers.webdataset", paths, starts, sizes, names, pool=ctx.thread_pool)
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
import torch

from sluice.backends import storage
from sluice.errors import ArgumentError, SampleError
from sluice.native import io as native_io
from sluice.ops.readers.file import _host_buffer
from sluice.pipeline.pool import map_all, runs

__all__ = ["read_packed", "read_into", "cached_index", "member_name", "as_list"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def member_name(container: str, member: str) -> str:
    """How a sample inside a container is named in errors and source info: ``shard.tar:key.jpg``."""
    return f"{container}:{member}"


def as_list(op: str, name: str, value: str | Sequence[str] | None) -> list[str]:
    """A path argument given as one string or a list, as a list; an empty one is an error naming the argument."""
    items = [value] if isinstance(value, str) else list(value or [])
    if not items:
        raise ArgumentError(f"{op}: give {name} (a path, an s3:// URL, or a list of them)")
    return items


def read_packed(op: str, paths: Sequence[str], starts: np.ndarray, sizes: np.ndarray, names: Sequence[str], *,
                pool=None, pin: bool = False, device_id: int | None = None, align_at: Sequence[int] = (),
                what: str = "record") -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Read range ``i`` (``sizes[i]`` bytes of ``paths[i]`` from byte ``starts[i]``; a size of -1 reads the whole
    file) into one buffer. Returns ``(buffer, offsets, sizes)``: the uint8 buffer (page-locked with ``pin``) and
    where each range lies in it, back to back, except that the ranges whose indices are in ``align_at`` (the
    first of each output of a multi-output reader) start at a multiple of 8 bytes, so that an output's stretch can
    be viewed as any type. A range that cannot be read whole raises a SampleError naming ``names[i]`` (the file
    and member) and the bytes missing."""
    n = len(paths)
    starts = np.asarray(starts, np.int64)
    sizes = np.asarray(sizes, np.int64).copy()
    fetched: dict[int, object] = {}
    whole = np.flatnonzero(sizes < 0).tolist()
    if whole:  # sizes not known beforehand: whole objects are fetched now, local files sized
        remote = [i for i in whole if storage.is_url(paths[i])]
        for i, data in zip(remote, _fetch(paths, starts, sizes, names, remote)):
            fetched[i] = data
            sizes[i] = len(data)
        for i in sorted(set(whole) - set(remote)):
            try:
                sizes[i] = storage.size(paths[i]) - starts[i]
            except storage.StorageError as e:
                raise SampleError(i, names[i], e) from None
    offsets = np.zeros(n, np.int64)
    if n:
        np.cumsum(sizes[:-1], out=offsets[1:])
        for i in sorted(set(align_at) - {0}):  # shift everything from i on to the next multiple of 8
            offsets[i:] += -offsets[i] % 8
    total = int(offsets[-1] + sizes[-1]) if n else 0
    buf = _host_buffer(max(1, total), pin, device_id)
    host = buf.numpy()
    for i, data in fetched.items():
        host[offsets[i]: offsets[i] + sizes[i]] = storage.to_array(data)
    rest = np.array(sorted(set(range(n)) - set(fetched)), np.int64)
    read_into(paths, starts, sizes, names, host, offsets, rest, pool=pool, what=what)
    return buf, offsets, sizes


def read_into(paths: Sequence[str], starts: np.ndarray, sizes: np.ndarray, names: Sequence[str], host: np.ndarray,
              offsets: np.ndarray, which: np.ndarray | None = None, *, pool=None, what: str = "record") -> None:
    """Read range ``i`` (``sizes[i]`` bytes of ``paths[i]`` from ``starts[i]``) into ``host[offsets[i]:]``, for
    each ``i`` of ``which`` (default: all): local ranges by the compiled core, a run of them per pool thread,
    remote ones fetched concurrently. A range that cannot be read whole raises a SampleError naming
    ``names[i]``."""
    which = np.arange(len(paths)) if which is None else np.asarray(which, np.int64)
    remote = [i for i in which.tolist() if storage.is_url(paths[i])]
    for i, data in zip(remote, _fetch(paths, starts, sizes, names, remote, what)):
        host[offsets[i]: offsets[i] + sizes[i]] = storage.to_array(data)
    local = which[[not storage.is_url(paths[i]) for i in which.tolist()]] if which.size else which
    if not local.size:
        return

    def read_run(run: range) -> None:
        idx = local[run.start:run.stop]
        got, status = native_io.read_ranges([paths[i] for i in idx.tolist()], starts[idx], sizes[idx],
                                            offsets[idx], host)
        bad = np.flatnonzero((status != 0) | (got != sizes[idx]))
        if bad.size:
            k = int(bad[0])
            i = int(idx[k])
            if status[k] < 0:
                code = -int(status[k])
                raise SampleError(i, names[i], storage.StorageError(
                    code, f"cannot read '{paths[i]}': {os.strerror(code)}"))
            raise SampleError(i, names[i], _short(paths[i], starts[i], sizes[i], int(got[k]), what))

    map_all(pool, read_run, runs(len(local), pool, per_thread=1, weights=sizes[local]))


def _fetch(paths, starts, sizes, names, which: list[int], what: str = "record") -> list:
    """The remote ranges ``which`` (size -1: to the end), fetched concurrently; each checked to be whole."""
    if not which:
        return []
    try:
        got = storage.fetch([(paths[i], int(starts[i]), None if sizes[i] < 0 else int(sizes[i])) for i in which])
    except storage.StorageError as e:
        i = next((i for i in which if paths[i] in str(e)), which[0])
        raise SampleError(i, names[i], e) from None
    for i, data in zip(which, got):
        if sizes[i] >= 0 and len(data) != sizes[i]:
            raise SampleError(i, names[i], _short(paths[i], starts[i], sizes[i], len(data), what))
    return got


def _short(path: str, start: int, size: int, got: int, what: str) -> OSError:
    return storage.StorageError(f"'{path}' ends before the end of the {what} at bytes {start}..{start + size} "
                                f"({got} of {size} bytes there): the file is truncated, or changed since it was "
                                "indexed")


# ---- indexes cached under SLUICE_CACHE ---------------------------------------------------------------------------
_index_lock = threading.Lock()


def cached_index(kind: str, source: str, build: Callable[[], str], parse: Callable[[str], T]) -> T:
    """The parsed index of ``source`` (a shard, a record file): ``parse(text)`` of the text cached in
    ``$SLUICE_CACHE/<kind>/`` for this version of the file (path, size, modification time; an object's ETag),
    else of ``build()``, which is then stored there. A cached index that does not parse is built again; a cache
    that cannot be written is only logged."""
    key = hashlib.blake2b(storage.stat_key(source).encode(), digest_size=16).hexdigest()
    path = storage.cache_dir() / kind / f"{key}.idx"
    try:
        return parse(path.read_text())
    except (OSError, UnicodeDecodeError):
        pass
    except Exception as e:  # noqa: BLE001 - a damaged cache entry is rebuilt, never trusted
        logger.info("rebuilding the damaged index cache %s of %s: %s", path, source, e)
    text = build()
    parsed = parse(text)
    try:
        with _index_lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
    except OSError as e:
        logger.info("cannot write the index cache %s: %s", path, e)
    return parsed
