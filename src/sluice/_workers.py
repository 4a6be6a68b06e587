"""sluice's one worker-process mechanism: parallel ``external_source``, the CPU video decoders, and any stage that
must hold the GIL run in the processes of a :class:`Workers` group, which a pipeline owns and closes.

A worker is one slot (:class:`Worker`) whose process is started in one of three ways:

* ``"fork"``: forked from the calling process; it runs a callable it inherits (DALI's ``py_start_method="fork"``);
* ``"spawn"``: a fresh interpreter; the callable is pickled to it, the caller's main module imported first as
  ``multiprocessing`` does (so a script needs its ``if __name__ == "__main__":`` guard);
* ``"forkserver"``: forked from one server process per worker module, which imported the module once (its
  ``_preload()``); the module, loaded by path, imports neither sluice nor torch (the video decoders).

Requests and answers are pickles over a Unix socket. Buffers of 4 KiB or more (NumPy arrays: samples, frames) go
out of band: the sender copies them into an anonymous memory file (``memfd``) whose descriptor travels with the
message, and the receiver maps it, so the arrays it unpickles are views of shared memory. Nothing is ever named in
``/dev/shm``, so nothing there can outlive a killed process.

What is written once, here:

* the parent-death watchdog: every worker (and fork server) exits within 0.25 s of the process that started it,
  even after a SIGKILL of that process (:func:`exit_with_parent`);
* restart-once: a worker that dies is started again and the requests it held are sent again; a request that sees
  its worker die twice (or that may not be redone) raises :class:`WorkerDied`, naming the worker, its exit code and
  what it was doing; a worker that never got ready is ``at_start``;
* error reporting: an exception raised in the worker arrives as :class:`WorkerError` naming the worker, the request
  (the file, the sample) and the exception's type, message and traceback; the handler may :func:`report` what it
  works on (two integers, in shared memory), which the parent reads when the worker raises or dies.

Standard library only: this file is also the script a spawned worker and a fork server run (``python -P``).

Example::

    workers = Workers()
    w = workers.worker(target=str.upper, method="fork", name="upper")
    assert w.call("abc") == "ABC"
    workers.close()
"""

from __future__ import annotations

import array
import logging
import mmap
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("sluice._workers")

METHODS = ("fork", "spawn", "forkserver")
#: Buffers at least this large travel in a memory file, not in the pickle.
OUT_OF_BAND_MIN = 4096
#: frame header: pickle bytes, memory-file bytes, out-of-band buffers, descriptors
_HEADER = struct.Struct("<QQII")
_SPAN = struct.Struct("<QQ")
_ALIGN = 64
_MAX_FDS = 4
_PROGRESS = struct.Struct("<qq")
READY = "ready"
WORKER_MODULE = "_sluice_worker"
#: Environment of spawned workers: each runs one request at a time, so the BLAS libraries NumPy loads start no
#: thread pools (a fork server must hold no threads when it forks).
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
POLL_S = 0.25
STOP_WAIT_S = 2.0


class WorkerError(RuntimeError):
    """The worker's handler raised: ``type_name``, ``message``, ``traceback`` (the worker's), ``progress`` (what the
    handler last :func:`report`-ed, or None) and ``what`` (the request, in words)."""

    def __init__(self, text: str, type_name: str, message: str, traceback: str, progress, what: str):
        super().__init__(text)
        self.type_name, self.message, self.traceback = type_name, message, traceback
        self.progress, self.what = progress, what


class WorkerDied(RuntimeError):
    """The worker's process exited before answering; ``at_start``: none of its processes ever got ready (its
    interpreter or imports fail); ``progress``: what its handler last reported; ``pid``, ``exit_code``."""

    def __init__(self, message: str, at_start: bool = False, progress=None, pid=None, exit_code=None):
        super().__init__(message)
        self.at_start, self.progress, self.pid, self.exit_code = at_start, progress, pid, exit_code


# ------------------------------------------------------------------------------------------------- the host's cores
def cores_per_rank() -> int:
    """This process's share of the cores it may run on: divided among the ``$LOCAL_WORLD_SIZE`` ranks torchrun
    starts on the host (eight ranks on a 128-core host get 16 each), so that their worker processes do not crowd
    each other. A rank seen bound to none of this process's cores (``torchrun --numa-binding``, ``numactl`` per
    rank) does not share them: eight ranks bound to 16 cores each get 16 each, not 2."""
    try:
        mine = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # not Linux
        mine = set(range(os.cpu_count() or 1))
    ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    if ranks > 1:
        ranks -= sum(_bound_elsewhere(pid, mine) for pid in _sibling_ranks())
    return max(1, len(mine) // max(1, ranks))


def _bound_elsewhere(pid: int, mine: set[int]) -> bool:
    try:
        return os.sched_getaffinity(pid).isdisjoint(mine)
    except (AttributeError, OSError):  # gone, or not ours to see: counted as sharing
        return False


def _sibling_ranks() -> list[int]:
    """The other ranks on this host: the processes with a ``LOCAL_RANK`` that this process's parent (torchrun's
    agent) started. Ranks not started yet are not seen, and so count as sharing this one's cores."""
    parent, me, found = os.getppid(), os.getpid(), []
    try:
        threads = os.listdir(f"/proc/{parent}/task")
    except OSError:  # not Linux, or /proc hidden
        return []
    for tid in threads:
        try:
            with open(f"/proc/{parent}/task/{tid}/children") as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if pid != me and b"\0LOCAL_RANK=" in b"\0" + f.read():
                        found.append(pid)
            except OSError:
                pass
    return found


# ------------------------------------------------------------------------------------------------------ messages
def memory_file(size: int, name: str = "sluice") -> int | None:
    """A new anonymous shared memory file of ``size`` bytes (its descriptor), or None where there are none. It
    has no name in the file system (``/dev/shm``), so it ends with the last process that holds it."""
    if not hasattr(os, "memfd_create"):
        return None
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        raise
    return fd


def send(sock: socket.socket, message: Any, fds: tuple[int, ...] = ()) -> None:
    """Send ``message`` (a pickle; large buffers out of band, in a memory file) and ``fds`` on ``sock``."""
    big: list[memoryview] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        try:
            view = buffer.raw()
        except BufferError:  # not contiguous
            return True
        if view.nbytes < OUT_OF_BAND_MIN or not hasattr(os, "memfd_create"):
            return True
        big.append(view)
        return False

    body = pickle.dumps(message, protocol=5, buffer_callback=out_of_band)
    spans, total = [], 0
    for view in big:
        spans.append((total, view.nbytes))
        total += -(-view.nbytes // _ALIGN) * _ALIGN
    fds = list(fds)
    if big:
        fd = memory_file(total)
        with mmap.mmap(fd, total) as block:
            for (offset, size), view in zip(spans, big):
                block[offset:offset + size] = view
        fds.insert(0, fd)
    try:
        frame = (_HEADER.pack(len(body), total, len(spans), len(fds)) + b"".join(_SPAN.pack(*s) for s in spans)
                 + body)
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        sent = sock.sendmsg([frame], ancillary)
        if sent < len(frame):
            sock.sendall(memoryview(frame)[sent:])
    finally:
        if big:
            os.close(fds[0])


def _receive_exactly(sock: socket.socket, size: int, into: bytearray | None = None) -> bytearray:
    data = into if into is not None else bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 24))
        if not chunk:
            raise EOFError("the socket closed mid-message")
        data += chunk
    return data


def receive(sock: socket.socket, with_fds: bool = False) -> Any:
    """The next message on ``sock`` (its out-of-band buffers mapped from the memory file that came with it); with
    ``with_fds``, ``(message, fds)``. Raises EOFError when the other end closed."""
    head, ancillary, _flags, _address = sock.recvmsg(_HEADER.size, socket.CMSG_SPACE(_MAX_FDS * 4))
    if not head:
        raise EOFError("the socket closed")
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(array.array("i", data[:len(data) - len(data) % 4]))
    head = _receive_exactly(sock, _HEADER.size, bytearray(head))
    body_size, total, n_spans, n_fds = _HEADER.unpack(head)
    rest = _receive_exactly(sock, n_spans * _SPAN.size + body_size)
    spans = [_SPAN.unpack_from(rest, k * _SPAN.size) for k in range(n_spans)]
    body = memoryview(rest)[n_spans * _SPAN.size:]
    buffers = []
    if total:
        fd = fds.pop(0)
        try:
            block = mmap.mmap(fd, total, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
        finally:
            os.close(fd)
        view = memoryview(block)
        buffers = [view[offset:offset + size] for offset, size in spans]
    message = pickle.loads(body, buffers=buffers)
    if with_fds:
        return message, fds
    for fd in fds:
        os.close(fd)
    return message


# ----------------------------------------------------------------------------------------------- the worker side
_progress: mmap.mmap | None = None


def report(first: int, second: int = -1) -> None:
    """Worker side: what the handler works on now (a sample's iteration and index), read by the parent when the
    worker raises or dies. Does nothing outside a worker."""
    if _progress is not None:
        _PROGRESS.pack_into(_progress, 0, first, second)


def _read_progress(block: mmap.mmap | None) -> tuple[int, int] | None:
    if block is None:
        return None
    values = _PROGRESS.unpack_from(block, 0)
    return None if values[0] == -1 and values[1] == -1 else values


def exit_with_parent(parent_pid: int, poll_seconds: float = POLL_S) -> None:
    """End this (worker) process as soon as ``parent_pid`` is no longer its parent, as the PyTorch DataLoader's
    workers do (``ManagerWatchdog``): a daemon thread polls ``os.getppid()``, so that a busy or blocked worker
    exits too. Portable, and unlike ``PR_SET_PDEATHSIG`` not tied to the life of the thread that started us."""
    if os.getppid() != parent_pid:  # the parent died before we got here
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, name="sluice-parent-watchdog", daemon=True).start()


def _describe(exc: BaseException, progress) -> tuple:
    import traceback

    return type(exc).__name__, str(exc), "".join(traceback.format_exception(exc)), progress


def serve(sock: socket.socket, handler: Callable[[Any], Any], progress_fd: int | None) -> None:
    """The worker's loop: :data:`READY`, then each request answered with ``("ok", handler(request))`` or
    ``("error", ...)`` until a ``("stop",)`` message or the socket's end."""
    global _progress
    if progress_fd is not None:
        _progress = mmap.mmap(progress_fd, _PROGRESS.size)
        os.close(progress_fd)
    send(sock, (READY, os.getpid()))
    while True:
        try:
            message = receive(sock)
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        report(-1, -1)
        try:
            answer = ("ok", handler(message[1]))
        except BaseException as exc:  # noqa: BLE001 - sent to the parent, which raises it naming the request
            answer = ("error", _describe(exc, _read_progress(_progress)))
        try:
            send(sock, answer)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:  # an answer that cannot be pickled
            send(sock, ("error", _describe(exc, _read_progress(_progress))))
        except OSError:
            return
        del answer


def _load_worker(module_file: str):
    """A worker module loaded by path, under :data:`WORKER_MODULE` (it checks that name to import only its worker
    side)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(WORKER_MODULE, module_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[WORKER_MODULE] = module
    spec.loader.exec_module(module)
    return module


def _worker_start(sock: socket.socket, handler: Callable[[Any], Any] | None) -> None:
    """A started worker: its first message says what to run (``handler`` already when forked), then :func:`serve`
    runs it. Never returns."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes us
        (_init, spec), fds = receive(sock, with_fds=True)
        progress_fd = fds[0] if fds else None
        if spec is not None and spec[0] == "module":
            handler = _load_worker(spec[1]).handle
        elif spec is not None and spec[0] == "pickled":
            import multiprocessing.spawn

            multiprocessing.spawn.prepare(spec[1])  # the caller's sys.path and main module, as multiprocessing does
            from sluice import _workers  # the real module (this one may be the script): report() writes its state

            handler = pickle.loads(spec[2])
            _workers.serve(sock, handler, progress_fd)
            return
        serve(sock, handler, progress_fd)
    except BaseException:  # noqa: BLE001 - on stderr, as any crash's output
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# ------------------------------------------------------------------------------------------------ the parent side
def _command(*extra: str) -> list[str]:
    # -P: this file's folder (sluice's) must not go first on sys.path, where its types.py would hide the standard
    # library's
    return [sys.executable, "-u", "-P", os.path.abspath(__file__), *extra]


class _Process:
    """One worker process, however started: ``pid`` (None until known), ``poll()``, ``kill()``, ``wait()``."""

    pid: int | None = None

    def poll(self) -> int | None:
        raise NotImplementedError

    def kill(self) -> None:
        if self.pid is not None and self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return code


class _Forked(_Process):
    def __init__(self, pid: int):
        self.pid, self._code = pid, None

    def poll(self) -> int | None:
        if self._code is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self._code = -1
            else:
                if pid:
                    self._code = os.waitstatus_to_exitcode(status)
        return self._code


class _Spawned(_Process):
    def __init__(self, popen: subprocess.Popen):
        self._popen, self.pid = popen, popen.pid

    def poll(self) -> int | None:
        return self._popen.poll()


class _ServerForked(_Process):
    """A worker forked by a :class:`_ForkServer`: its pid comes with its READY message, its exit code from the
    server's report (-1 when none can come)."""

    def __init__(self, server: _ForkServer):
        self._server, self._code, self._ended = server, None, False

    def ended(self) -> None:
        self._ended = True

    def poll(self) -> int | None:
        if self._code is None and self.pid is not None:
            if self._ended or not os.path.exists(f"/proc/{self.pid}"):
                code = self._server.exit_code(self.pid, 1.0)
                self._code = -1 if code is None else code
        elif self._code is None and self._ended:
            self._code = -1
        return self._code


class _ForkServer:
    """One process that loaded a worker module (its ``_preload()``) once and forks its workers, so that sixteen
    video decoders do not each import PyAV at once on the cores that are decoding meanwhile (measured on the H200:
    they got ready 0.7 to 3.3 s after their start). It exits when its socket closes or its parent dies, and reports
    its workers' exit codes."""

    def __init__(self, module_file: str) -> None:
        self.module_file = os.path.abspath(module_file)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._exits: dict[int, int] = {}

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _server(self) -> socket.socket:
        if self._proc is not None and self._proc.poll() is None:
            return self._sock
        self.close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                _command("--fork-server", str(os.getpid()), str(theirs.fileno()), self.module_file),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, pass_fds=(theirs.fileno(),),
                env=dict(os.environ, **WORKER_ENV))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        return ours

    def start(self, worker_end: socket.socket) -> _ServerForked:
        """Fork a worker serving ``worker_end`` (when the server is done with its imports)."""
        with self._lock:
            try:
                socket.send_fds(self._server(), [b"f"], [worker_end.fileno()])
            except OSError:  # the server died since it was last used: once more with a new one
                self.close()
                socket.send_fds(self._server(), [b"f"], [worker_end.fileno()])
        return _ServerForked(self)

    def exit_code(self, pid: int, timeout: float = 0.0) -> int | None:
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                if pid in self._exits:
                    return self._exits.pop(pid)
                sock = self._sock
                if sock is None or not select.select([sock], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    return None
                data = sock.recv(64)
                if not data:
                    return None
                _tag, reaped, code = pickle.loads(data)
                self._exits[reaped] = code

    def close(self) -> None:
        proc, sock, self._proc, self._sock = self._proc, self._sock, None, None
        if sock is not None:
            sock.close()  # the server exits when it sees its socket closed
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class _Request:
    __slots__ = ("ticket", "request", "what", "sent", "deaths")

    def __init__(self, ticket: int, request: Any, what: str):
        self.ticket, self.request, self.what, self.sent, self.deaths = ticket, request, what, False, 0


class Worker:
    """One worker slot of a :class:`Workers` group: a process started on first use, its requests answered in the
    order they were submitted (:meth:`submit`, then :meth:`result`; or :meth:`call`). Used by one thread at a time.

    ``redo``: requests may be sent again to a restarted process (False for a stateful handler, a generator);
    ``ready_timeout``: the longest a request waits for a (re)started process to finish its imports (None: as long
    as it lives)."""

    def __init__(self, group: Workers, name: str, method: str, target: Callable | None, module: str | None,
                 redo: bool, ready_timeout: float | None):
        self.group, self.name, self.method = group, name, method
        self._target, self._module = target, module
        self.redo, self.ready_timeout = redo, ready_timeout
        self._proc: _Process | None = None
        self._sock: socket.socket | None = None
        self._progress: mmap.mmap | None = None
        self._ready = False
        self._started_at = 0.0
        self.was_ready = False  # one of its processes got ready: it can start
        self._failed_starts = 0
        self._queue: deque[_Request] = deque()  # submitted, not answered yet, oldest first
        self._answers: dict[int, tuple] = {}
        self._dropped: set[int] = set()
        self._next = 0
        self.restarts = 0  # processes started again after one died
        self.answered = 0
        self.fresh = True  # its process has not answered yet
        self._lock = threading.RLock()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # ---- processes ----------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the process now, without waiting for it to get ready (:meth:`poll_ready`)."""
        with self._lock:
            if self._proc is None:
                self._launch()

    def _launch(self) -> None:
        self.group._check_open()
        spec = None  # forked: the target is inherited, or the server loaded the module
        if self.method == "spawn" and self._module is not None:
            spec = ("module", os.path.abspath(self._module))
        elif self.method == "spawn":
            try:
                spec = ("pickled", _preparation_data(), pickle.dumps(self._target, protocol=5))
            except Exception as exc:  # noqa: BLE001 - any pickling failure, named
                raise TypeError(f"{self.name}: what the worker runs cannot be pickled for a spawned process "
                                f"({type(exc).__name__}: {exc}); define it at a module's top level, or start the "
                                "workers by fork") from exc
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        progress_fd = memory_file(_PROGRESS.size)
        try:
            if self.method == "fork":
                proc = self._fork(ours, theirs)
            elif self.method == "forkserver":
                proc = self.group._server(self._module).start(theirs)
            else:
                proc = _Spawned(subprocess.Popen(_command("--worker", str(os.getpid()), str(theirs.fileno())),
                                                 stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),),
                                                 env=dict(os.environ, **WORKER_ENV)))
        except OSError as exc:
            ours.close()
            if progress_fd is not None:
                os.close(progress_fd)
            raise WorkerDied(f"{self.name}: its worker processes cannot start ({type(exc).__name__}: {exc})",
                             at_start=not self.was_ready) from None
        finally:
            theirs.close()
        self._proc, self._sock, self._ready, self.fresh = proc, ours, False, True
        self._started_at = time.monotonic()
        self._progress = mmap.mmap(progress_fd, _PROGRESS.size) if progress_fd is not None else None
        try:
            send(ours, ("init", spec), (progress_fd,) if progress_fd is not None else ())
        except OSError:
            pass  # it died at once: seen when it is read
        finally:
            if progress_fd is not None:
                os.close(progress_fd)
        if self._progress is not None:
            _PROGRESS.pack_into(self._progress, 0, -1, -1)

    def _fork(self, ours: socket.socket, theirs: socket.socket) -> _Forked:
        import warnings

        parent = os.getpid()
        with warnings.catch_warnings():  # "multi-threaded": DALI's and torch's fork workers are forked so too
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the worker
            ours.close()
            for fd in self.group._parent_fds():  # other workers' ends: their EOF is their owner's to give
                try:
                    os.close(fd)
                except OSError:
                    pass
            exit_with_parent(parent)
            _worker_start(theirs, self._target)
        return _Forked(pid)

    def poll_ready(self) -> bool:
        """Whether the process is started and done with its imports; never waits. A process that died before it
        was ready is started again once; raises WorkerDied (``at_start``) when that one dies before it too."""
        with self._lock:
            if self._proc is None:
                return False
            while not self._ready:
                if not select.select([self._sock], [], [], 0)[0]:
                    return False
                self._read_one()
            return True

    def _drop_process(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock, self._proc, self._ready, self._progress = None, None, False, None

    def _died(self, reason: str) -> None:
        """The process is gone (``reason``): start another and send it the requests again, or raise."""
        proc = self._proc
        if isinstance(proc, _ServerForked):
            proc.ended()
        code = proc.wait(5.0)
        if code is None:
            proc.kill()
            code = proc.wait(5.0)
        progress = _read_progress(self._progress)
        pid = proc.pid
        self._drop_process()
        head = self._queue[0] if self._queue else None
        what = head.what if head is not None and head.sent else "starting" if not self.was_ready else "idle"
        if not self.was_ready:
            self._failed_starts += 1
            if self._failed_starts >= 2:
                raise WorkerDied(f"{self.name}: worker process {pid} died (exit code {code}) before it was ready, "
                                 f"twice ({reason})", at_start=True, progress=progress, pid=pid, exit_code=code)
        elif head is not None and head.sent:
            if head.deaths or not self.redo:
                self._queue.popleft()
                again = " (it had been started again after dying on it)" if head.deaths else ""
                raise WorkerDied(f"{self.name}: worker process {pid} died (exit code {code}) while {what}{again}",
                                 progress=progress, pid=pid, exit_code=code)
            head.deaths += 1
        log.warning("%s: worker process %s died (exit code %s) while %s; starting it again", self.name, pid, code,
                    what)
        self.restarts += 1
        self._launch()
        for entry in self._queue:
            entry.sent = False
        self._send_queued()

    def _send_queued(self) -> None:
        for entry in self._queue:
            if not entry.sent:
                try:
                    send(self._sock, ("call", entry.request))
                except (BrokenPipeError, ConnectionError):
                    return  # seen dead when it is read
                entry.sent = True

    # ---- requests -------------------------------------------------------------------------------------------------
    def submit(self, request: Any, what: str = "answering a request") -> int:
        """Send ``request`` (``what``: it in words, for errors: "decoding 'a.mp4'"); a ticket for :meth:`result`."""
        with self._lock:
            if self._proc is None:
                self._launch()
            ticket, self._next = self._next, self._next + 1
            self._queue.append(_Request(ticket, request, what))
            self._send_queued()
            return ticket

    def result(self, ticket: int) -> Any:
        """The answer to ``ticket``; raises WorkerError when the handler raised, WorkerDied when the process died
        (twice on it)."""
        with self._lock:
            while ticket not in self._answers:
                if not any(entry.ticket == ticket for entry in self._queue):
                    raise KeyError(f"{self.name}: no request {ticket} is waiting")
                self._read_one(wait=True)
            status, payload, what = self._answers.pop(ticket)
        if status == "ok":
            return payload
        type_name, message, traceback, progress = payload
        raise WorkerError(f"{self.name}: {type_name}: {message} (while {what}; in worker process {self.pid})\n"
                          f"{traceback}", type_name, message, traceback, progress, what)

    def call(self, request: Any, what: str = "answering a request") -> Any:
        return self.result(self.submit(request, what))

    def drop(self, ticket: int) -> None:
        """Forget ``ticket``: its answer is thrown away when it comes."""
        with self._lock:
            if self._answers.pop(ticket, None) is None:
                self._dropped.add(ticket)

    def progress(self) -> tuple[int, int] | None:
        return _read_progress(self._progress)

    def _read_one(self, wait: bool = False) -> None:
        """Read one message of the process (waiting for it with ``wait``), or handle its death."""
        if self._proc is None:
            self._launch()
            self._send_queued()
        while True:
            timeout = POLL_S
            if not self._ready and self.ready_timeout is not None:
                left = self._started_at + self.ready_timeout - time.monotonic()
                if left <= 0:
                    pid = self.pid
                    if pid is not None:  # else not forked yet by its (stuck) server: it ends with the server
                        self._proc.kill()
                        self._proc.wait(5.0)
                    self._drop_process()
                    raise WorkerDied(f"{self.name}: worker process {pid} did not get ready in "
                                     f"{self.ready_timeout:g} s (while {self._queue[0].what if self._queue else ''})",
                                     at_start=not self.was_ready, pid=pid)
                timeout = min(timeout, left)
            if select.select([self._sock], [], [], timeout)[0]:
                break
            if self._proc.poll() is not None:  # gone, its end of the socket held by another process
                self._died("it exited")
                return
            if not wait:
                return
        try:
            message = receive(self._sock)
        except (EOFError, OSError) as exc:
            self._died(f"{type(exc).__name__}: {exc}")
            return
        if message[0] == READY:
            self._ready = self.was_ready = True
            if self._proc.pid is None:
                self._proc.pid = message[1]
            return
        entry = self._queue.popleft()
        self.answered += 1
        self.fresh = False
        if entry.ticket in self._dropped:
            self._dropped.discard(entry.ticket)
        else:
            self._answers[entry.ticket] = (message[0], message[1], entry.what)

    def close(self) -> None:
        """Stop the process (it exits at once when idle; killed if it does not within a few seconds)."""
        self._stop_begin()
        self._stop_end(time.monotonic() + STOP_WAIT_S)

    def _stop_begin(self) -> None:
        with self._lock:
            if self._sock is not None:
                try:
                    self._sock.setblocking(False)
                    send(self._sock, ("stop",))
                except OSError:
                    pass

    def _stop_end(self, deadline: float) -> None:
        with self._lock:
            proc = self._proc
            self._drop_process()
            self._queue.clear()
            self._answers.clear()
            if proc is None:
                return
            if isinstance(proc, _ServerForked) and proc.pid is None:
                return  # never forked, or its READY unread: it exits on its socket's end
            if proc.wait(max(0.0, deadline - time.monotonic())) is None:
                proc.kill()
                proc.wait(5.0)


def _preparation_data() -> dict:
    import multiprocessing.spawn

    data = multiprocessing.spawn.get_preparation_data("sluice-worker")
    data.pop("authkey", None)  # multiprocessing's secret: not ours to pickle
    return data


class Workers:
    """The worker processes of one owner (a pipeline): :meth:`worker` makes a slot, started on first use;
    :meth:`close` stops every process and fork server (and does nothing in a forked copy of the owner)."""

    def __init__(self) -> None:
        self._owner = os.getpid()
        self._workers: list[Worker] = []
        self._servers: dict[str, _ForkServer] = {}
        self._lock = threading.Lock()
        self._closed = False

    def worker(self, target: Callable[[Any], Any] | None = None, *, module: str | None = None,
               method: str = "spawn", name: str = "worker", redo: bool = True,
               ready_timeout: float | None = None) -> Worker:
        """A worker running ``target(request)`` (started by ``"fork"``, or pickled to ``"spawn"``), or the
        ``handle(request)`` of the worker module at path ``module`` (``"spawn"``, or ``"forkserver"``: forked from
        one server per module that ran the module's ``_preload()``)."""
        if method not in METHODS:
            raise ValueError(f"Invalid method ({method!r}). Supported values are 'fork', 'spawn', 'forkserver'.")
        if (target is None) == (module is None):
            raise ValueError("give a target or a module")
        if method == "forkserver" and (module is None or not hasattr(socket, "send_fds")):
            method = "spawn"  # the server forks module workers only, and needs socket.send_fds (Linux)
        if method == "fork" and module is not None:
            raise ValueError("a module worker starts by 'spawn' or 'forkserver'")
        w = Worker(self, name, method, target, module, redo, ready_timeout)
        with self._lock:
            self._check_open()
            self._workers.append(w)
        return w

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the worker processes are closed")

    def _server(self, module: str) -> _ForkServer:
        with self._lock:
            key = os.path.abspath(module)
            server = self._servers.get(key)
            if server is None:
                server = self._servers[key] = _ForkServer(key)
            return server

    def server_pid(self, module: str) -> int | None:
        server = self._servers.get(os.path.abspath(module))
        return server.pid if server is not None else None

    def _parent_fds(self) -> list[int]:
        return [w._sock.fileno() for w in list(self._workers) if w._sock is not None]

    def release(self, workers: list[Worker]) -> None:
        """Stop these workers (all at once) and forget them."""
        if os.getpid() != self._owner:
            return
        for w in workers:
            w._stop_begin()
        deadline = time.monotonic() + STOP_WAIT_S
        for w in workers:
            w._stop_end(deadline)
        with self._lock:
            self._workers = [w for w in self._workers if w not in workers]

    def close(self) -> None:
        """Stop every worker and fork server; a later :meth:`worker` is refused. Idempotent; nothing in a copy
        of the owner made by fork (a DataLoader worker), whose workers are the parent's."""
        if os.getpid() != self._owner:
            return
        with self._lock:
            self._closed = True
            workers, self._workers = list(self._workers), []
            servers, self._servers = list(self._servers.values()), {}
        self.release(workers)
        for server in servers:
            server.close()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------- the fork server
def _fork_server(parent_pid: int, fd: int, module_file: str) -> None:
    """The server's loop: each message on its socket carries a new worker's socket, and it forks that worker; it
    reaps its workers and reports each exit code on the socket. Exits when the socket closes or its parent dies.
    It holds no thread, so forking is safe."""
    import warnings

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    module = _load_worker(module_file)
    if hasattr(module, "_preload"):
        module._preload()
    wake_in, wake_out = os.pipe()
    for end in (wake_in, wake_out):
        os.set_blocking(end, False)
    signal.set_wakeup_fd(wake_out)  # a SIGCHLD wakes select below
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while os.getppid() == parent_pid:
        readable = select.select([sock, wake_in], [], [], POLL_S)[0]
        if wake_in in readable:
            while True:
                try:
                    if not os.read(wake_in, 512):
                        break
                except BlockingIOError:
                    break
        _reap(sock)
        if sock not in readable:
            continue
        try:
            message, fds, _flags, _address = socket.recv_fds(sock, 16, 1)
        except OSError:  # reset: the parent closed it with exit reports unread
            return
        if not message:
            return
        with warnings.catch_warnings():  # "multi-threaded": none of ours; see WORKER_ENV
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for end in (wake_in, wake_out, sock.fileno()):
                os.close(end)
            exit_with_parent(os.getppid())  # the server: when it is gone, so is the pipeline that used it
            _worker_start(socket.socket(fileno=fds[0]), module.handle)
        for end in fds:
            os.close(end)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        try:
            sock.send(pickle.dumps(("exit", pid, os.waitstatus_to_exitcode(status))), socket.MSG_DONTWAIT)
        except OSError:
            pass


if __name__ == "__main__":
    if sys.argv[1] == "--fork-server":
        _fork_server(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        exit_with_parent(int(sys.argv[2]))
        _worker_start(socket.socket(fileno=int(sys.argv[3])), None)
