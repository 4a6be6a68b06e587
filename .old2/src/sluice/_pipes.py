"""Worker processes of sluice and their protocol: length-prefixed pickles over the process's stdin and stdout.

A worker runs this file as its script (:func:`start`), which loads the worker's module by path under the name
:data:`WORKER_MODULE` and calls its ``_serve()``: the worker imports neither sluice nor torch (a module checks
``__name__ == WORKER_MODULE`` to import only what its worker side needs), never imports the caller's main module,
and exits when its stdin closes or its parent dies (:func:`exit_with_parent`: a SIGKILLed parent's pipe may stay
open in its other children), so it cannot outlive the process that started it.

Many workers of one module start from a :class:`ForkServer`: one process runs the module's ``_preload()`` (its
imports) once and forks each worker from then on, so that sixteen workers do not each import PyAV at once on the
cores that are decoding meanwhile. Standard library only.
"""

from __future__ import annotations

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
from collections.abc import Callable
from typing import Any

HEADER = struct.Struct("<Q")
WORKER_MODULE = "_sluice_worker"
READY = "ready"  # a worker's first message, ("ready", its pid): it can take requests
#: Environment of the workers: each decodes in one thread, so the BLAS libraries NumPy loads start no thread pools
#: (a fork server must hold no threads when it forks).
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


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


def exit_with_parent(parent_pid: int, poll_seconds: float = 0.25) -> None:
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


def send(stream, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(data)) + data)
    stream.flush()


def receive(stream) -> Any:
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        raise EOFError("the pipe closed")
    (size,) = HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the pipe closed mid-message")
    return pickle.loads(data)


def ready(proc: subprocess.Popen | ForkedProcess, timeout: float | None = 0.0) -> bool:
    """Whether the worker ``proc`` has sent :data:`READY` (its imports are done), waiting up to ``timeout`` seconds
    for it (None: until it comes). Raises EOFError when the worker exited before it was ready. The caller owns the
    worker (no other thread reads its stdout meanwhile)."""
    if getattr(proc, "sluice_ready", False):
        return True
    if timeout is not None:
        # nothing is read from stdout before READY, so its buffer is empty and the descriptor tells
        if not select.select([proc.stdout.fileno()], [], [], timeout)[0]:
            return False
    try:
        message = receive(proc.stdout)
    except EOFError:
        if isinstance(proc, ForkedProcess):
            proc.ended()
        raise
    if not (isinstance(message, tuple) and len(message) == 2 and message[0] == READY):
        raise EOFError(f"the worker's first message was {message!r}, not ({READY!r}, pid)")
    if proc.pid is None:  # forked by a ForkServer: its pid comes with READY
        proc.pid = message[1]
    proc.sluice_ready = True
    return True


def _command(module_file: str, *extra: str) -> list[str]:
    """This file run as a worker (or fork server) of ``module_file``, told this process's pid."""
    # -P: this file's folder (sluice's) must not go first on sys.path, where its types.py would hide the standard
    # library's
    return [sys.executable, "-u", "-P", os.path.abspath(__file__), os.path.abspath(module_file), str(os.getpid()),
            *extra]


def start(module_file: str) -> subprocess.Popen:
    """A new worker process serving ``module_file``'s ``_serve()``. stdin/stdout carry the protocol; stderr is the
    caller's, so a crash's output is seen."""
    return subprocess.Popen(_command(module_file), stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
                            env=dict(os.environ, **WORKER_ENV))


class ForkServer:
    """Starts workers of ``module_file`` by forking them from one server process, which ran the module's
    ``_preload()`` (its imports) once. Measured on the H200, sixteen video workers started at once, each importing
    PyAV beside the threads decoding the first batch, got ready 0.7 to 3.3 s after their start.

    :meth:`start` returns at once: the server forks the worker when its own imports are done. The worker is the
    server's child, so :class:`ForkedProcess` stands in for its ``Popen``. The server exits when :meth:`close`
    closes its socket or when its parent dies; its workers exit when their stdin closes or the server dies. Where
    the server cannot be used (no ``socket.send_fds``: not Linux), :meth:`start` starts a worker as :func:`start`
    does."""

    def __init__(self, module_file: str) -> None:
        self.module_file = os.path.abspath(module_file)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._exits: dict[int, int] = {}  # pid -> exit code, as the server reported them
        self._closed = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _server(self) -> socket.socket:
        """The server's socket, the server (re)started if it is not running (the caller holds the lock)."""
        if self._proc is not None and self._proc.poll() is None:
            return self._sock
        self._stop_server()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                _command(self.module_file, "--fork-server", str(theirs.fileno())), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), env=dict(os.environ, **WORKER_ENV))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        return ours

    def start(self) -> ForkedProcess | subprocess.Popen:
        """A new worker (forked when the server is done with its imports); a worker of :func:`start` where no
        server can run."""
        if self._closed:
            raise RuntimeError("the fork server is closed")
        if not hasattr(socket, "send_fds"):
            return start(self.module_file)
        child_in, stdin = os.pipe()
        stdout, child_out = os.pipe()
        try:
            with self._lock:
                try:
                    socket.send_fds(self._server(), [b"f"], [child_in, child_out])
                except OSError:  # the server died since it was last used: once more with a new one
                    self._stop_server()
                    socket.send_fds(self._server(), [b"f"], [child_in, child_out])
        except BaseException:
            os.close(stdin)
            os.close(stdout)
            raise
        finally:
            os.close(child_in)  # the worker's ends are the server's now (and then the worker's)
            os.close(child_out)
        return ForkedProcess(self, os.fdopen(stdin, "wb"), os.fdopen(stdout, "rb"))

    def exit_code(self, pid: int, timeout: float = 0.0) -> int | None:
        """Worker ``pid``'s exit code once the server has reported it, waiting up to ``timeout`` seconds; None
        before that (or when the server is gone)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                if pid in self._exits:
                    return self._exits.pop(pid)
                sock = self._sock
                left = deadline - time.monotonic()
                if sock is None or not select.select([sock], [], [], max(0.0, left))[0]:
                    return None
                data = sock.recv(64)
                if not data:  # the server is gone
                    return None
                tag, reaped, code = pickle.loads(data)
                self._exits[reaped] = code

    def _stop_server(self) -> None:
        proc, sock, self._proc, self._sock = self._proc, self._sock, None, None
        if sock is not None:
            sock.close()  # the server exits when it sees its socket closed
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        """End the server (its workers end when their owners close their stdin, or at once if they are idle and
        the server is gone: see :func:`exit_with_parent`)."""
        with self._lock:
            self._closed = True
            self._stop_server()


class ForkedProcess:
    """A worker forked by a :class:`ForkServer`, with what its users take of a ``Popen``: ``stdin``, ``stdout``,
    ``pid`` (None until its :data:`READY` message is read), ``poll()``, ``wait()``, ``kill()``, ``returncode``.
    A worker that exits is seen by a pidfd on it (no zombie lingers: the server reaps it), its exit code by the
    server's report; -1 when that report cannot come (the server is gone)."""

    def __init__(self, server: ForkServer, stdin, stdout) -> None:
        self.stdin, self.stdout = stdin, stdout
        self.returncode: int | None = None
        self._pid: int | None = None
        self._pidfd: int | None = None
        self._server = server
        self._ended = False  # its stdout ended: it exited

    @property
    def pid(self) -> int | None:
        return self._pid

    @pid.setter
    def pid(self, pid: int) -> None:
        self._pid = pid
        try:
            self._pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # no pidfds (Linux < 5.3), or already gone: see poll()
            self._pidfd = None

    def ended(self) -> None:
        """Its stdout ended (the caller saw EOF): it exited."""
        self._ended = True

    def _exited(self) -> bool:
        if self._ended:
            return True
        if self._pid is None:
            return False  # not forked yet, or its READY not read yet: its stdout will tell
        if self._pidfd is not None:
            return bool(select.select([self._pidfd], [], [], 0)[0])
        try:
            os.kill(self._pid, 0)
        except ProcessLookupError:
            return True
        return False

    def _exit_code(self, timeout: float) -> int:
        code = self._server.exit_code(self._pid, timeout) if self._pid is not None else None
        return -1 if code is None else code

    def poll(self) -> int | None:
        if self.returncode is None and self._exited():
            self.returncode = self._exit_code(1.0)
            self._close_pidfd()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait until the worker exits (its stdout ends; what it still sends is dropped) and return its code."""
        if self.returncode is not None:
            return self.returncode
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._read_to_eof(deadline):
            raise subprocess.TimeoutExpired(f"worker {self._pid}", timeout)
        self.returncode = self._exit_code(5.0 if deadline is None else max(0.0, deadline - time.monotonic()))
        self._close_pidfd()
        return self.returncode

    def _read_to_eof(self, deadline: float | None) -> bool:
        """Whether the worker's stdout ended before ``deadline``, dropping what it still sends."""
        fd = self.stdout.fileno()
        while not self._ended:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return False
            try:
                self._ended = not os.read(fd, 1 << 16)
            except OSError:
                self._ended = True
        return True

    def kill(self) -> None:
        if self._pid is not None and self.returncode is None:
            try:
                if self._pidfd is not None:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                else:
                    os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def __del__(self) -> None:
        self._close_pidfd()


def stop(proc: subprocess.Popen | ForkedProcess | None) -> None:
    """End a worker: it exits when its stdin closes; killed if it does not within 5 s."""
    if proc is None:
        return
    try:
        proc.stdin.close()
        proc.wait(timeout=5)
    except Exception:  # noqa: BLE001 - a hung or already gone process
        proc.kill()
        proc.wait()
    finally:
        proc.stdout.close()


def serve(handle: Callable[[Any], Any]) -> None:
    """The worker's loop: first :data:`READY` (the worker's imports are done: :func:`ready` sees it), then each
    request read from stdin is answered on stdout with ``handle(request)``, until stdin closes. ``handle`` turns
    its own errors into answers."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol
    send(stdout, (READY, os.getpid()))
    while True:
        try:
            request = receive(stdin)
        except EOFError:
            return
        send(stdout, handle(request))


def _load_worker(module_file: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(WORKER_MODULE, module_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[WORKER_MODULE] = module
    spec.loader.exec_module(module)
    return module


def _serve_forked(module, child_in: int, child_out: int) -> None:
    """The forked worker: its pipes become its stdin and stdout, then the module's loop; it never returns."""
    code = 0
    try:
        os.dup2(child_in, 0)
        os.dup2(child_out, 1)
        os.close(child_in)
        os.close(child_out)
        exit_with_parent(os.getppid())  # the server: when it is gone, so is the pipeline that used it
        module._serve()
    except BaseException:  # noqa: BLE001 - reported on stderr, as an unforked worker's would be
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def _fork_server(module_file: str, parent_pid: int, fd: int) -> None:
    """The server's loop: each message on its socket carries a new worker's two pipe ends, and it forks that
    worker; it reaps its workers and reports each exit code on the socket. Exits when the socket closes or its
    parent dies. It holds no thread, so forking is safe."""
    import warnings

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes us
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
        readable = select.select([sock, wake_in], [], [], 0.25)[0]
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
            message, fds, _flags, _address = socket.recv_fds(sock, 16, 2)
        except OSError:  # reset: the parent closed it with exit reports unread
            return
        if not message:  # the parent closed it
            return
        with warnings.catch_warnings():  # "multi-threaded": none of ours; see WORKER_ENV
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for end in (wake_in, wake_out, sock.fileno()):
                os.close(end)
            _serve_forked(module, *fds)
        for end in fds:
            os.close(end)


def _reap(sock: socket.socket) -> None:
    """Wait for the server's exited workers, telling the parent their exit codes (dropped if it reads none)."""
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
    if sys.argv[3:4] == ["--fork-server"]:
        _fork_server(sys.argv[1], int(sys.argv[2]), int(sys.argv[4]))
    else:
        if len(sys.argv) > 2:
            exit_with_parent(int(sys.argv[2]))
        _load_worker(sys.argv[1])._serve()
