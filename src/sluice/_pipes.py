"""Worker processes of sluice and their protocol: length-prefixed pickles over the process's stdin and stdout.

A worker runs this file as its script (:func:`start`), which loads the worker's module by path under the name
:data:`WORKER_MODULE` and calls its ``_serve()``: the worker imports neither sluice nor torch (a module checks
``__name__ == WORKER_MODULE`` to import only what its worker side needs), starts in a fraction of a second, never
imports the caller's main module, and exits when its stdin closes or its parent dies (:func:`exit_with_parent`:
a SIGKILLed parent's pipe may stay open in its other children), so it cannot outlive the process that started it.
Standard library only.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

HEADER = struct.Struct("<Q")
WORKER_MODULE = "_sluice_worker"
READY = ("ready",)  # a worker's first message: it can take requests


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


def ready(proc: subprocess.Popen, timeout: float | None = 0.0) -> bool:
    """Whether the worker ``proc`` has sent :data:`READY` (its imports are done), waiting up to ``timeout`` seconds
    for it (None: until it comes). Raises EOFError when the worker exited before it was ready. The caller owns the
    worker (no other thread reads its stdout meanwhile)."""
    if getattr(proc, "sluice_ready", False):
        return True
    if timeout is not None:
        import select

        # nothing is read from stdout before READY, so its buffer is empty and the descriptor tells
        if not select.select([proc.stdout.fileno()], [], [], timeout)[0]:
            return False
    message = receive(proc.stdout)
    if message != READY:
        raise EOFError(f"the worker's first message was {message!r}, not {READY!r}")
    proc.sluice_ready = True
    return True


def start(module_file: str) -> subprocess.Popen:
    """A new worker process serving ``module_file``'s ``_serve()``. stdin/stdout carry the protocol; stderr is the
    caller's, so a crash's output is seen."""
    # -P: this file's folder (sluice's) must not go first on sys.path, where its types.py would hide the standard
    # library's
    return subprocess.Popen([sys.executable, "-u", "-P", os.path.abspath(__file__), os.path.abspath(module_file),
                             str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)


def stop(proc: subprocess.Popen | None) -> None:
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
    send(stdout, READY)
    while True:
        try:
            request = receive(stdin)
        except EOFError:
            return
        send(stdout, handle(request))


def _run_worker(module_file: str) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(WORKER_MODULE, module_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[WORKER_MODULE] = module
    spec.loader.exec_module(module)
    module._serve()


if __name__ == "__main__":
    if len(sys.argv) > 2:
        exit_with_parent(int(sys.argv[2]))
    _run_worker(sys.argv[1])
