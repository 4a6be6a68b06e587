"""CPU video decoding in a worker process of its own, for the hybrid backend's CPU path.

PyAV decoding in threads shares the GIL with the NVDEC threads; measured on the H200 the hybrid then ran slower
than either path alone (5.96 clips/s against NVDEC 6.64 and CPU 7.91), and with the CPU jobs in processes the two
paths added up (9.97 and 14.92 clips/s on the 60 s and 300 s videos). A :class:`WorkerProcess` is one such
process, owned by one CPU worker thread: requests go down its stdin, answers come up its stdout (length-prefixed
pickles), decoded frames come back through a shared memory block the caller made.

The process runs this module's worker side through :mod:`sluice._pipes`, not ``multiprocessing``: it never imports
the caller's main module (no ``if __name__ == "__main__":`` guard needed, no training script run twice) and never
imports torch or the rest of sluice, only PyAV, NumPy and this package's index and PyAV modules. It exits when its
stdin closes, so it cannot outlive the process that started it by more than one decode.

Example::

    worker = WorkerProcess()
    kind, payload = worker.decode("a.mp4", [0, 1, 2], shm.name, (3, 720, 1280, 3), "nvdec")
    worker.close()
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from contextlib import contextmanager
from typing import Any

if __name__ == "_sluice_worker":  # the worker process (see sluice._pipes): neither sluice nor torch
    from __main__ import receive as _receive, send as _send, serve as _serve_requests
else:
    from sluice._pipes import (ForkServer, ready as _ready, receive as _receive, send as _send,
                               start as _start_worker, stop as _stop_worker)

__all__ = ["WorkerProcess", "WorkerDied"]

logger = logging.getLogger(__name__)


#: How long a request waits for a (re)started worker process to finish its imports.
READY_TIMEOUT_S = 60.0


class WorkerDied(RuntimeError):
    """The worker process exited (crashed or was killed) while decoding; ``at_start``: none of its processes ever got
    ready (it cannot start: the interpreter or its imports fail)."""

    def __init__(self, message: str, at_start: bool = False):
        super().__init__(message)
        self.at_start = at_start


def _rebuild_error(error_type: str, message: str) -> Exception:
    """The worker's exception as the caller's: VideoError and built-in types keep their type, others become a
    RuntimeError naming theirs."""
    import builtins

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
    """One decoding process, started by :meth:`start` or on first use (forked by ``server``, a
    :class:`sluice._pipes.ForkServer` of this module, when given); its requests are served one at a time (one
    owner thread)."""

    def __init__(self, server: ForkServer | None = None) -> None:
        self._server = server
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._answered = 0  # requests answered by any of this worker's processes
        self._was_ready = False  # one of its processes got ready (imports done): it can start
        self.restarts = 0  # processes started again after one died
        self.fresh = True  # its process has not answered yet (its next request pays for its start)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:  # a dead one's pipes
                self.restarts += 1
                for pipe in (self._proc.stdin, self._proc.stdout):
                    try:
                        pipe.close()
                    except OSError:
                        pass
            try:
                self._proc = self._server.start() if self._server is not None else _start_worker(__file__)
            except OSError as exc:  # the fork server exited at once, twice: its interpreter or imports fail
                raise WorkerDied(f"the CPU video decoder processes cannot start: their fork server exited at once "
                                 f"({type(exc).__name__}: {exc})", at_start=not self._was_ready) from None
            self.fresh = True
        return self._proc

    def start(self) -> None:
        """Start the process now, without waiting for it (it imports PyAV meanwhile: see :meth:`poll_ready`)."""
        with self._lock:
            self._start()

    def poll_ready(self) -> bool:
        """Whether the process is started and done with its imports, so that a request is served at once; never
        waits. A process that exited before it was ready is started again once (it may have been killed); raises
        WorkerDied (``at_start``) when that one exits before it is ready too."""
        with self._lock:
            if self._proc is None:
                return False
            try:
                self._was_ready |= _ready(self._proc, 0.0)
                return self._was_ready
            except (EOFError, OSError) as exc:
                code = self._proc.poll()
                if self._was_ready or not self.restarts:
                    self._start()
                    return False
                raise WorkerDied(f"the CPU video decoder process {self._proc.pid} exited (code {code}) before it "
                                 f"was ready, twice ({type(exc).__name__}: {exc})", at_start=True) from None

    def decode(self, path: str, frames: list[int], shm_name: str, shape: tuple, colors: str,
               index_key: str | None = None, name: str | None = None) -> tuple[str, Any]:
        """Decode ``frames`` of ``path`` into the shared memory block ``shm_name`` (see ``_decode``). Raises the
        worker's error (a VideoError naming the file stays one), or WorkerDied when the process exited.
        ``index_key``, ``name``: the content's index cache key and the name its errors give (a memfd of bytes).

        A process that had worked and dies (killed between or during requests) is started again and the request
        redone once; a second death on the same request is the WorkerDied error (the file crashes the decoder)."""
        # the process may have started in another working directory (the backend outlives a pipeline): absolute
        request = ("decode", os.path.abspath(os.fspath(path)), list(frames), shm_name, tuple(shape), colors,
                   index_key, name)
        with self._lock:
            for attempt in (1, 2):
                proc = self._start()
                try:
                    if not _ready(proc, READY_TIMEOUT_S):  # started again after dying, and stuck starting
                        proc.kill()
                        raise EOFError(f"it did not get ready in {READY_TIMEOUT_S:.0f} s")
                    self._was_ready = True
                    _send(proc.stdin, request)
                    kind, payload = _receive(proc.stdout)
                    self._answered += 1
                    self.fresh = False
                    break
                except (EOFError, BrokenPipeError, OSError) as exc:
                    code = proc.wait(timeout=5) if proc.poll() is None else proc.returncode
                    if attempt == 1 and self._was_ready:
                        logger.warning("the CPU video decoder process %d exited (code %s) before answering a "
                                       "request for '%s'; starting it again and redoing the request", proc.pid,
                                       code, path)
                        continue
                    again = " (it had been started again after dying on it)" if attempt == 2 else ""
                    raise WorkerDied(f"the CPU video decoder process {proc.pid} exited (code {code}) while decoding "
                                     f"'{path}'{again} ({type(exc).__name__}: {exc})",
                                     at_start=not self._was_ready) from None
        if kind == "error":
            raise _rebuild_error(*payload)
        return kind, payload

    def close(self) -> None:
        """End the process (it exits when its stdin closes; killed if it does not within 5 s)."""
        with self._lock:
            proc, self._proc = self._proc, None
        _stop_worker(proc)


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


def _decode(pyav, index, backends: dict, path: str, frames: list[int], shm_name: str, shape: tuple, colors: str,
            index_key: str | None = None, name: str | None = None):
    """Decode into the shared block: ("shm", frame order), or ("arrays", {frame: array}) when the frames are not
    of ``shape``'s size."""
    import numpy as np

    backend = backends.get(colors)
    if backend is None:
        backend = backends[colors] = pyav.PyAVBackend(threads=1, colors=colors)
    decoded = backend.decode(path, index.get_index(path, key=index_key, name=name), frames)
    order = sorted(decoded)
    if len(order) > shape[0] or any(decoded[f].shape != tuple(shape[1:]) for f in order):
        return "arrays", decoded
    with _attached(shm_name, int(np.prod(shape))) as block:
        out = np.ndarray(shape, np.uint8, buffer=block)
        for k, f in enumerate(order):
            out[k] = decoded[f]
        del out  # no view of the block may outlive it
    return "shm", order


@contextmanager
def _attached(name: str, size: int):
    """The caller's shared memory block ``name``, mapped while the ``with`` block runs. The caller owns it (creates
    and unlinks it), so it is mapped here without ``multiprocessing``'s resource tracker: ``SharedMemory(name=...)``
    registers even a block it only attaches to (before Python 3.13), which starts a tracker process for each worker
    on its first job (about a second, measured, while that job waits) and makes it unlink the caller's block when
    it exits."""
    import mmap

    try:
        import _posixshmem
    except ImportError:  # not POSIX: SharedMemory, its tracker told to leave the block alone
        from multiprocessing import resource_tracker, shared_memory

        shm = shared_memory.SharedMemory(name=name)
        try:
            resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001
        except Exception:  # noqa: BLE001
            pass
        try:
            yield shm.buf
        finally:
            shm.close()
        return
    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
        block = mmap.mmap(fd, size)
    finally:
        os.close(fd)
    try:
        yield block
    finally:
        block.close()


def _preload() -> None:
    """What a fork server runs once before forking workers: the imports of :func:`_serve`."""
    import av  # noqa: F401
    import numpy  # noqa: F401

    _load_backend_modules()


def _serve() -> None:
    pyav, index = _load_backend_modules()
    backends: dict = {}

    def handle(request):
        try:
            return _decode(pyav, index, backends, *request[1:])
        except Exception as exc:  # noqa: BLE001 - sent to the caller, which raises it naming the file
            return "error", (type(exc).__name__, str(exc))

    _serve_requests(handle)
