"""What the readers of archives, record files and manifests share beyond :class:`ReaderBase` (sample order,
sharding, shuffling, padding, checkpoints, ``reader_meta``): reading a batch's byte ranges into one buffer, and
the on-disk cache of the indexes they build.

A batch of a reader is a list of byte ranges (a tar member, a TFRecord record, the rows of a ``.npy`` region, an
image file) of local files or S3 objects. :func:`read_packed` reads them back to back into one buffer (page-locked
when the pipeline's GPU stage takes the outputs), local ranges by the compiled core with the GIL released (the
calling thread and the pool's each taking the next unread range), remote ones in one concurrent fetch
(:mod:`sluice.backends.storage`). Readers then hand the batch out packed (:meth:`Batch.from_packed`), which the
mixed image decoders' fast lane and the GPU copies take whole.

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

from sluice import native
from sluice.backends import storage
from sluice.errors import ArgumentError, SampleError
from sluice.native import io as native_io
from sluice.ops._host import batch_buffer
from sluice.pipeline.pool import map_all, run_shared, runs

__all__ = ["read_packed", "read_into", "cached_index", "member_name", "as_list", "record_table"]

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


def record_table(op: str, per_file: Sequence[tuple[np.ndarray, np.ndarray]], empty: str
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The records of several record files as one table: ``(file_of, offsets, sizes, record_no)``, from each
    file's ``(offsets, sizes)`` in order; no record at all is an ArgumentError ending with ``empty``."""
    file_of = np.concatenate([np.full(len(o), k, np.int32) for k, (o, _) in enumerate(per_file)])
    offsets = np.concatenate([np.asarray(o, np.int64) for o, _ in per_file])
    sizes = np.concatenate([np.asarray(z, np.int64) for _, z in per_file])
    record_no = np.concatenate([np.arange(len(o)) for o, _ in per_file])
    if not len(file_of):
        raise ArgumentError(f"{op}: {empty}")
    return file_of, offsets, sizes, record_no


def read_packed(op: str, paths: Sequence[str], starts: np.ndarray, sizes: np.ndarray, names: Sequence[str], *,
                pool=None, pin: bool = False, device_id: int | None = None, align_at: Sequence[int] = (),
                what: str = "record", file_index: np.ndarray | None = None,
                clients: storage.S3Clients | None = None) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Read range ``i`` (``sizes[i]`` bytes of ``paths[i]`` from byte ``starts[i]``; a size of -1 reads the whole
    file) into one buffer. With ``file_index``, ``paths`` are the distinct files and range ``i`` is of
    ``paths[file_index[i]]`` (a reader of a few shards then makes no list of a path per range). Returns
    ``(buffer, offsets, sizes)``: the uint8 buffer (page-locked with ``pin``) and where each range lies in it, back
    to back, except that the ranges whose indices are in ``align_at`` (the first of each output of a multi-output
    reader) start at a multiple of 8 bytes, so that an output's stretch can be viewed as any type. A range that
    cannot be read whole raises a SampleError naming ``names[i]`` (the file and member) and the bytes missing.
    ``clients``: the pipeline's S3 clients (:func:`sluice.backends.storage.clients_of`), for ranges in S3."""
    files, file_index = _distinct(paths, file_index)
    n = len(file_index)
    starts = np.ascontiguousarray(starts, np.int64)
    sizes = np.array(sizes, np.int64)
    fetched: dict[int, object] = {}
    whole = np.flatnonzero(sizes < 0).tolist()
    if whole:  # sizes not known beforehand: whole objects are fetched now, local files sized
        paths = [files[f] for f in file_index.tolist()]
        remote = [i for i in whole if storage.is_url(paths[i])]
        for i, data in zip(remote, _fetch(paths, starts, sizes, names, remote, clients=clients)):
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
    buf = batch_buffer(max(1, total), pin, device_id)
    host = buf.numpy()
    for i, data in fetched.items():
        host[offsets[i]: offsets[i] + sizes[i]] = storage.to_array(data)
    rest = np.delete(np.arange(n), list(fetched)) if fetched else None
    read_into(files, starts, sizes, names, host, offsets, rest, pool=pool, what=what, file_index=file_index,
              clients=clients)
    return buf, offsets, sizes


def read_into(paths: Sequence[str], starts: np.ndarray, sizes: np.ndarray, names: Sequence[str], host: np.ndarray,
              offsets: np.ndarray, which: np.ndarray | None = None, *, pool=None, what: str = "record",
              file_index: np.ndarray | None = None, clients: storage.S3Clients | None = None) -> None:
    """Read range ``i`` (``sizes[i]`` bytes of ``paths[i]``, or with ``file_index`` of ``paths[file_index[i]]``,
    from ``starts[i]``) into ``host[offsets[i]:]``, for each ``i`` of ``which`` (default: all): remote ones fetched
    concurrently, local ones by the compiled core with the GIL released, every pool thread and the calling one
    taking the next unread range (:func:`_read_local`). A range that cannot be read whole raises a SampleError
    naming ``names[i]``; ``clients`` as for :func:`read_packed`."""
    files, file_index = _distinct(paths, file_index)
    starts, sizes, offsets = (np.ascontiguousarray(a, np.int64) for a in (starts, sizes, offsets))
    which = np.arange(len(file_index)) if which is None else np.asarray(which, np.int64)
    remote_file = np.array([storage.is_url(f) for f in files], bool)
    is_remote = remote_file[file_index[which]]
    if is_remote.any():
        remote = which[is_remote].tolist()
        per_range = [files[f] for f in file_index.tolist()]
        for i, data in zip(remote, _fetch(per_range, starts, sizes, names, remote, what, clients)):
            host[offsets[i]: offsets[i] + sizes[i]] = storage.to_array(data)
        which = which[~is_remote]
    if not which.size:
        return
    got, status = _read_local(files, file_index[which], starts[which], sizes[which], offsets[which], host, pool)
    bad = np.flatnonzero((status != 0) | (got != sizes[which]))
    if bad.size:  # the first range that failed, in batch order
        k = int(bad[0])
        i = int(which[k])
        path = files[file_index[i]]
        if status[k] < 0:
            code = -int(status[k])
            raise SampleError(i, names[i], storage.StorageError(code, f"cannot read '{path}': {os.strerror(code)}"))
        raise SampleError(i, names[i], _short(path, starts[i], sizes[i], int(got[k]), what))


def _distinct(paths: Sequence[str], file_index: np.ndarray | None) -> tuple[list[str], np.ndarray]:
    """The distinct files of a batch's ranges and each range's index among them."""
    if file_index is not None:
        return list(paths), np.ascontiguousarray(file_index, np.int64)
    seen: dict[str, int] = {}
    index = np.fromiter((seen.setdefault(p, len(seen)) for p in paths), np.int64, len(paths))
    return list(seen), index


def _read_local(files: list[str], file_index: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                offsets: np.ndarray, host: np.ndarray, pool) -> tuple[np.ndarray, np.ndarray]:
    """Read local range ``k`` (``sizes[k]`` bytes of ``files[file_index[k]]`` from ``starts[k]``) into
    ``host[offsets[k]:]``: (bytes read, status per range), as :func:`sluice.native.io.read_ranges` returns them.
    The compiled core's ``RangeBatchRead`` is worked by the calling thread and the pool's threads together, the
    GIL released, each taking the next unread range and every file opened once (``run_shared``, as readers.file's
    ``FileBatchRead``): a pool thread that starts late, busy decoding, reads fewer ranges instead of holding the
    batch back with a fixed run. Without the core, runs of ranges go to the pool's threads, read by the
    pure-Python twin of ``read_ranges``: the same bytes and results."""
    n = len(file_index)
    c = native.core()
    if c is not None:
        return run_shared(pool, c.RangeBatchRead(files, file_index, starts, sizes, offsets, host), n)

    def read_run(run: range) -> tuple[np.ndarray, np.ndarray]:
        part = slice(run.start, run.stop)
        return native_io.read_ranges([files[f] for f in file_index[part].tolist()], starts[part], sizes[part],
                                     offsets[part], host)

    parts = map_all(pool, read_run, runs(n, pool, per_thread=1, weights=sizes))
    return np.concatenate([g for g, _ in parts]), np.concatenate([s for _, s in parts])


def _fetch(paths, starts, sizes, names, which: list[int], what: str = "record",
           clients: storage.S3Clients | None = None) -> list:
    """The remote ranges ``which`` (size -1: to the end), fetched concurrently; each checked to be whole."""
    if not which:
        return []
    try:
        got = storage.fetch([(paths[i], int(starts[i]), None if sizes[i] < 0 else int(sizes[i])) for i in which],
                            clients=clients)
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


def cached_index(kind: str, source: str, build: Callable[[], str], parse: Callable[[str], T], *,
                 clients: storage.S3Clients | None = None) -> T:
    """The parsed index of ``source`` (a shard, a record file): ``parse(text)`` of the text cached in
    ``$SLUICE_CACHE/<kind>/`` for this version of the file (path, size, modification time; an object's ETag),
    else of ``build()``, which is then stored there. A cached index that does not parse is built again; a cache
    that cannot be written is only logged. ``clients``: the pipeline's S3 clients, for a source in S3."""
    key = hashlib.blake2b(storage.stat_key(source, clients=clients).encode(), digest_size=16).hexdigest()
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
