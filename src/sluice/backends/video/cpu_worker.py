"""CPU video decoding in a worker process of its own, for the hybrid backend's CPU path.

PyAV decoding in threads shares the GIL with the NVDEC threads; measured on the H200 the hybrid then ran slower
than either path alone (5.96 clips/s against NVDEC 6.64 and CPU 7.91), and with the CPU jobs in processes the two
paths added up (9.97 and 14.92 clips/s on the 60 s and 300 s videos). A :class:`WorkerProcess` is one such
process, owned by one CPU worker thread, started by sluice's one worker-process mechanism (:mod:`sluice._workers`,
which the pipeline owns): forked from a server that imported PyAV once, it exits with its parent, is started again
once when it dies, and its decoded frames come back through shared memory (a memory file the answer carries).

This module is also the worker side, which :mod:`sluice._workers` loads by path: it never imports the caller's
main module, torch or the rest of sluice, only PyAV, NumPy and this package's index and PyAV modules.

Example::

    workers = Workers()
    worker = WorkerProcess(workers)
    frames = worker.decode("a.mp4", [0, 1, 2], "nvdec")   # {frame: (H, W, 3) uint8 array}
    workers.close()
"""

from __future__ import annotations

import logging
import os
import sys

if __name__ != "_sluice_worker":  # the caller's side (the worker loads this file by path: neither sluice nor torch)
    from sluice._workers import WorkerDied, WorkerError, Workers

__all__ = ["WorkerProcess", "WorkerDied"]

logger = logging.getLogger(__name__)


#: How long a request waits for a (re)started worker process to finish its imports.
READY_TIMEOUT_S = 60.0


def _rebuild_error(error: WorkerError) -> Exception:
    """The worker's exception as the caller's: VideoError and built-in types keep their type, others become a
    RuntimeError naming theirs."""
    import builtins

    error_type, message = error.type_name, error.message
    if error_type == "VideoError":
        from .index import VideoError  # import time: the worker side loads index by path (_load_backend_modules)

        return VideoError(message)
    cls = getattr(builtins, error_type, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except Exception:  # noqa: BLE001 - a constructor that wants other arguments
            pass
    return RuntimeError(f"{error_type}: {message}")


class WorkerProcess:
    """One decoding process of ``workers`` (forked from the server of this module), started by :meth:`start` or on
    first use; its requests are served one at a time (one owner thread)."""

    def __init__(self, workers: Workers) -> None:
        self.worker = workers.worker(module=__file__, method="forkserver", name="the CPU video decoder",
                                     ready_timeout=READY_TIMEOUT_S)

    pid = property(lambda self: self.worker.pid)
    restarts = property(lambda self: self.worker.restarts)  # processes started again after one died
    fresh = property(lambda self: self.worker.fresh)  # its process has not answered yet (its next request pays)
    answered = property(lambda self: self.worker.answered)

    def start(self) -> None:
        """Start the process now, without waiting for it (it is forked once the server has imported PyAV)."""
        self.worker.start()

    def poll_ready(self) -> bool:
        """Whether the process is started and done with its imports; never waits (see ``Worker.poll_ready``)."""
        return self.worker.poll_ready()

    def decode(self, path: str, frames: list[int], colors: str, index_key: str | None = None,
               name: str | None = None) -> dict:
        """Decode ``frames`` of ``path``: ``{frame: (H, W, 3) uint8 array}``, views of shared memory. Raises the
        worker's error (a VideoError naming the file stays one), or WorkerDied when the process died twice on it.
        ``index_key``, ``name``: the content's index cache key and the name its errors give (a memfd of bytes)."""
        # the process may have started in another working directory (the backend outlives a pipeline): absolute
        path = os.path.abspath(os.fspath(path))
        try:
            return self.worker.call(("decode", path, list(frames), colors, index_key, name), f"decoding '{path}'")
        except WorkerError as exc:
            raise _rebuild_error(exc) from None

    def close(self) -> None:
        """End the process (at once when idle; killed if it does not end within a few seconds)."""
        self.worker.close()


# ---------------------------------------------------------------------------------------------------- the process
def _load_backend_modules():
    """Import this package's pyav and index modules without importing sluice (and torch): a stand-in parent
    package whose path is this directory."""
    import importlib
    import types

    name = "_sluice_video_worker"
    package = types.ModuleType(name)
    package.__path__ = [os.path.dirname(os.path.abspath(__file__))]
    sys.modules[name] = package
    return importlib.import_module(f"{name}.pyav"), importlib.import_module(f"{name}.index")


def _decode(pyav, index, backends: dict, path: str, frames: list[int], colors: str, index_key: str | None = None,
            name: str | None = None) -> dict:
    """``{frame: array}`` of ``path``; the arrays go back through shared memory (:func:`sluice._workers.send`)."""
    backend = backends.get(colors)
    if backend is None:
        backend = backends[colors] = pyav.PyAVBackend(threads=1, colors=colors)
    decoded = backend.decode(path, index.get_index(path, key=index_key, name=name), frames)
    # contiguous frames go back as they are, copied once into the shared memory (padded rows: copied first)
    return {f: a if a.flags.c_contiguous else a.copy() for f, a in decoded.items()}


def _preload() -> None:
    """What the fork server runs once before forking workers: their imports."""
    import av  # noqa: F401
    import numpy  # noqa: F401

    _load_backend_modules()


_state: dict = {}


def handle(request):
    """One request of the parent (see :meth:`WorkerProcess.decode`)."""
    if not _state:
        _state["modules"] = _load_backend_modules()
    return _decode(*_state["modules"], _state.setdefault("backends", {}), *request[1:])
