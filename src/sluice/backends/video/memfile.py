"""Encoded video bytes seen as a file: a memfd holding a copy of them, opened by other processes by path.

``decoders.video`` fed a video's bytes (``external_source``) would otherwise decode them where a path cannot go:
NVDEC packet by packet from Python instead of PyNvVideoCodec's file decoder, and PyAV in threads sharing the GIL
instead of the worker processes, which open files by path. A :class:`MemoryFiles` copies each distinct content
once into an anonymous memory file (``os.memfd_create``) and names it ``/proc/PID/fd/N``, a path this process and
its workers can open while the memfd is open. The same bytes fed again (every iteration of the peer program) are
found by :func:`~.index.buffer_key`, in O(1) of their length: no copy and no hash per iteration.

A memfd is closed when it is evicted (least recently used, beyond ``max_bytes``) and no batch still uses it, or
when the owner closes. Its number may then name another memfd: everything keyed by a file's path also keys by its
inode (:func:`~.index.cache_key`), which differs. No name is left in the file system, so nothing outlives the
process. Linux only: elsewhere :meth:`MemoryFiles.lease` returns None and the bytes are decoded as bytes.

Example::

    files = MemoryFiles()
    lease = files.lease(np.frombuffer(open("a.mp4", "rb").read(), np.uint8))   # a MemoryFile, or None
    ...                                                                          # decode lease.path
    files.release(lease)
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

from sluice._workers import memory_file

from .index import Source, as_bytes, buffer_key, content_key

logger = logging.getLogger(__name__)

#: Bytes of memfds kept for contents no batch uses any more, least recently used dropped first.
MAX_BYTES = 1 << 30


@dataclass
class MemoryFile:
    """One memfd: ``path`` opens it in this process and its children; ``index_key`` is the content's
    :func:`~.index.cache_key`, under which its index is cached (workers load it instead of indexing the file)."""

    fd: int
    path: str
    size: int
    index_key: str
    users: int = 0


class MemoryFiles:
    """The memfds of the encoded bytes a backend decodes (see the module's docstring)."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = int(max_bytes)
        self._files: OrderedDict[tuple, MemoryFile] = OrderedDict()  # buffer_key -> file, oldest first
        self._lock = threading.Lock()
        self._broken: str | None = None if hasattr(os, "memfd_create") else "no os.memfd_create"
        self.copies = 0  # contents copied into a memfd (a test sees that bytes fed again are not)
        weakref.finalize(self, _close_files, self._files)

    @property
    def usable(self) -> bool:
        return self._broken is None

    def lease(self, source: Source) -> MemoryFile | None:
        """The memfd holding ``source``'s bytes (made now if these bytes have none), kept open until
        :meth:`release`; None where memfds cannot be made (then decode the bytes)."""
        if self._broken is not None:
            return None
        key = buffer_key(source)
        with self._lock:
            entry = self._files.get(key)
            if entry is not None:
                self._files.move_to_end(key)
                entry.users += 1
                return entry
        entry = self._make(source)
        if entry is None:
            return None
        with self._lock:
            raced = self._files.get(key)
            if raced is not None:  # another thread made it meanwhile: keep one
                os.close(entry.fd)
                entry = raced
            else:
                self._files[key] = entry
            entry.users += 1
            self._evict()
            return entry

    def _make(self, source: Source) -> MemoryFile | None:
        data = memoryview(as_bytes(source)).cast("B")
        try:
            fd = memory_file(0, "sluice-video")
        except OSError as e:  # no memfds here (seccomp, old kernel): decode the bytes as they are
            fd, self._broken = None, f"os.memfd_create failed ({e})"
        if fd is None:
            self._broken = self._broken or "no os.memfd_create"
            logger.info("video bytes are decoded from memory, not as files: %s", self._broken)
            return None
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError:
            os.close(fd)
            raise
        self.copies += 1
        return MemoryFile(fd, f"/proc/{os.getpid()}/fd/{fd}", len(data), content_key(source))

    def release(self, entry: MemoryFile | None) -> None:
        """A batch is done with ``entry`` (from :meth:`lease`)."""
        if entry is None:
            return
        with self._lock:
            entry.users -= 1
            self._evict()

    def _evict(self) -> None:
        total = sum(f.size for f in self._files.values())
        for key in list(self._files):
            if total <= self.max_bytes:
                return
            entry = self._files[key]
            if entry.users:
                continue
            del self._files[key]
            os.close(entry.fd)
            total -= entry.size

    def close(self) -> None:
        """Close every memfd (those in use too: the owner is closing)."""
        with self._lock:
            _close_files(self._files)


def _close_files(files: OrderedDict) -> None:
    for entry in files.values():
        os.close(entry.fd)
    files.clear()
