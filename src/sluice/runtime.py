"""The pipeline's runtime: every thread, CUDA stream, worker process and session one pipeline runs on, made here on
demand and released together by :meth:`Runtime.close` (issue 37; CONVENTIONS.md, habit 11).

A pipeline's executor makes one :class:`Runtime` when the pipeline builds, and each operator finds it on its
``OpSpec.runtime`` (:func:`runtime_of`). What it owns:

* the CPU pool (:attr:`Runtime.cpu_pool`), ``num_threads`` threads in DALI's meaning, which ``BatchContext.thread_pool``
  hands to the kernels;
* the extra thread pools and service threads a backend or the executor asks for by purpose
  (:meth:`Runtime.thread_pool`, :meth:`Runtime.start_thread`): the image decoder's GPU-path and decode-ahead
  threads, NVDEC's split pool and open-ahead threads, the video hybrid backend's per-path workers, the executor's
  stage threads. Each caller gets a pool of its own, of the size it asks for, as when it made it itself; every pool
  says its size (``threads``: :class:`~sluice.pipeline.pool.ThreadPool`);
* the CUDA streams (:meth:`Runtime.stream`), one per purpose on the pipeline's GPU: the executor's ``"pipeline"``
  stream, the image decoder's decode-ahead streams and its scan check's high-priority stream, the video hybrid backend's per-thread copy
  streams;
* the worker processes (:meth:`Runtime.workers`: parallel ``external_source``, the CPU video decoders);
* the sessions (:meth:`Runtime.session`): nvImageCodec decoders, NVDEC decoders, the video hybrid backend, the S3
  clients (:func:`sluice.backends.storage.clients_of`), opened lazily once per key and closed, latest first, when
  the runtime closes.

Not here: ``Batch.as_cpu()``'s per-thread staging stream and page-locked buffers (:mod:`sluice.pipeline.to_host`),
and the page-locked batch buffers, which come from torch's caching host allocator (process-wide, as torch keeps
it) through :func:`sluice.pipeline.batch.host_empty`.

Nothing here is process-wide: two pipelines (train and val, two GPUs) have two runtimes and share no thread, pool,
stream or session. A backend made outside a pipeline (tests, benchmarks, the CLI) makes a runtime of its own and
closes it with itself. The threads made here are the only ones sluice makes, besides the CLI's, the test helpers'
and the DataLoader proxy's server thread (tests/test_concurrency_owners.py scans the sources).

Example::

    rt = Runtime(num_threads=4, device_id=0)
    pool = rt.thread_pool("decode-ahead", 2)          # a pool of this caller's, named sluice-decode-ahead_N
    stream = rt.stream("decode-ahead 0")              # a CUDA stream on GPU 0, the same one for this purpose
    nvdec = rt.session(("nvdec", 0), lambda: NvdecBackend(0, runtime=rt))
    rt.close()                                         # sessions closed, pools shut, threads joined
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import torch

from sluice._workers import Workers

from sluice.pipeline.pool import RuntimePool, ThreadPool

__all__ = ["Runtime", "runtime_of", "run_coroutine", "CLOSE_WAIT_SECONDS"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long :meth:`Runtime.close` waits, in all, for the runtime's threads to end (each finishes the task it runs).
CLOSE_WAIT_SECONDS = 60.0


class _State:
    """What a runtime holds, apart from the runtime object itself, so that a finalizer can release it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pid = os.getpid()  # the process whose threads and sessions these are (a fork copies none of them)
        self.lock = threading.RLock()  # held briefly: the lists below
        self.opening = threading.RLock()  # held while a session opens (seconds: an nvImageCodec decoder)
        self.pools: list[ThreadPoolExecutor] = []
        self.threads: list[threading.Thread] = []
        self.sessions: dict[Hashable, tuple[Any, Callable[[Any], None] | None]] = {}
        self.streams: dict[str, tuple[torch.cuda.Stream, int]] = {}  # purpose -> (stream, priority)
        self.made: Counter = Counter()
        self.closed = False

    def register_current_thread(self) -> None:
        """A pool's initializer: its new thread is the runtime's (joined by close, known to :meth:`owns`)."""
        with self.lock:
            self.threads = [t for t in self.threads if t.is_alive()]
            self.threads.append(threading.current_thread())
            self.made["threads"] += 1

    def close(self, wait: bool) -> None:
        if os.getpid() != self.pid:
            # a copy made by fork (a DataLoader worker): its threads were not copied, and its sessions (worker
            # processes, decoders) are the parent's, which this copy must not end
            return
        with self.lock:
            if self.closed:
                return
            self.closed = True
            sessions = list(self.sessions.items())
            self.sessions.clear()
            pools, self.pools = self.pools, []
            self.streams.clear()  # torch keeps the CUDA streams themselves in its pool; the runtime lets go of its
            threads = list(self.threads)
        me = threading.current_thread()
        # a runtime closed from one of its own threads (a pipeline collected there) waits for none: the thread it
        # would wait for may be waiting for this one
        wait = wait and me not in threads
        for key, (obj, closer) in reversed(sessions):  # the latest first: it may use an earlier one
            _close_session(key, obj, closer, self.name)
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        if not wait:
            return
        deadline = time.monotonic() + CLOSE_WAIT_SECONDS
        for t in threads:
            if t is not me and t.is_alive():
                t.join(timeout=max(0.0, deadline - time.monotonic()))
        running = [t.name for t in threads if t is not me and t.is_alive()]
        if running:
            log.warning("%s runtime: %s still run after %.0f s; they go on alone", self.name, ", ".join(running),
                        CLOSE_WAIT_SECONDS)


def _close_session(key: Hashable, obj: Any, closer: Callable[[Any], None] | None, name: str) -> None:
    try:
        if closer is not None:
            closer(obj)
        elif hasattr(obj, "close"):
            obj.close()
    except Exception:  # noqa: BLE001 - closing must not raise
        log.exception("%s runtime: closing the session %r failed", name, key)


class Runtime:
    """The threads and codec sessions of one pipeline (see the module docstring).

    ``num_threads``: the CPU pool's threads (DALI's ``num_threads``; 1: no pool, kernels run in the calling thread);
    ``device_id``: the pipeline's GPU (None: CPU only); ``name``: how log messages name it. Everything is made on
    first use; :meth:`close` (also run when the runtime is garbage collected, then without waiting) releases it.
    """

    def __init__(self, num_threads: int = 1, device_id: int | None = None, *, name: str = "pipeline") -> None:
        self.num_threads = max(1, int(num_threads or 1))
        self.device_id = device_id
        self.name = name
        self._state = _State(name)
        self._cpu_pool: RuntimePool | None = None
        self._finalizer = weakref.finalize(self, self._state.close, False)

    # ---- threads --------------------------------------------------------------------------------------------
    @property
    def cpu_pool(self) -> RuntimePool | None:
        """The pipeline's CPU pool (:class:`~sluice.pipeline.pool.RuntimePool`, ``num_threads`` threads named
        ``sluice-cpu``), made on first use; None with one thread."""
        if self.num_threads <= 1:
            return None
        with self._state.lock:
            if self._cpu_pool is None:
                self._check_open("the CPU pool")
                self._cpu_pool = RuntimePool(self.num_threads, initializer=self._state.register_current_thread)
                self._state.pools.append(self._cpu_pool)
                self._state.made["pools"] += 1
            return self._cpu_pool

    def thread_pool(self, purpose: str, threads: int) -> ThreadPool:
        """A pool of ``threads`` threads for one caller (a :class:`~sluice.pipeline.pool.ThreadPool`, which says its
        ``threads``; named ``sluice-<purpose>_N``), shut down when the runtime closes (the caller may shut it down
        sooner). Each call makes a new pool: callers do not share one."""
        with self._state.lock:
            self._check_open(f"a {purpose} pool")
            pool = ThreadPool(threads, f"sluice-{purpose}", self._state.register_current_thread)
            self._state.pools.append(pool)
            self._state.made["pools"] += 1
        return pool

    def start_thread(self, purpose: str, target: Callable[..., Any], *args: Any,
                     daemon: bool = True) -> threading.Thread:
        """Start ``target(*args)`` in a service thread of the runtime (named ``sluice-<purpose>``), joined by
        :meth:`close` if it still runs then."""
        with self._state.lock:
            self._check_open(f"a {purpose} thread")
            t = threading.Thread(target=target, args=args, name=f"sluice-{purpose}", daemon=daemon)
            self._state.threads = [x for x in self._state.threads if x.is_alive()]
            self._state.threads.append(t)
            self._state.made["threads"] += 1
        t.start()
        return t

    def owns(self, thread: threading.Thread | None = None) -> bool:
        """Whether ``thread`` (default: the calling one) is one of this runtime's."""
        thread = thread or threading.current_thread()
        with self._state.lock:
            return thread in self._state.threads

    def threads(self) -> list[threading.Thread]:
        """The runtime's threads that are alive now."""
        with self._state.lock:
            return [t for t in self._state.threads if t.is_alive()]

    # ---- CUDA streams ---------------------------------------------------------------------------------------
    def stream(self, purpose: str, *, priority: int = 0, device: torch.device | None = None) -> torch.cuda.Stream:
        """The CUDA stream (``torch.cuda.Stream``) of ``purpose`` on the runtime's GPU (``device_id``): one per
        purpose, made on first use with ``priority`` (lower runs first: -1 is high), the same one after, let go of
        when the runtime closes. A caller that wants a stream of its own names it in ``purpose`` (``"image decoder
        <id>: ahead 0"``); one that works on a given GPU passes it as ``device``, checked to be the runtime's.
        Raises RuntimeError on a runtime without a GPU, on another GPU than ``device``, or closed, and ValueError
        when a purpose is asked for again with another priority."""
        if self.device_id is None:
            raise RuntimeError(f"the {self.name} runtime has no GPU (device_id=None): cannot make the {purpose!r} "
                               "CUDA stream; build the pipeline with a device_id")
        if device is not None:
            device = torch.device(device)
            index = device.index if device.index is not None else torch.cuda.current_device()
            if device.type != "cuda" or index != self.device_id:
                raise RuntimeError(f"the {self.name} runtime is on cuda:{self.device_id}: it makes no CUDA stream for "
                                   f"{device} ({purpose!r}); give the caller the runtime of its GPU")
        with self._state.lock:
            self._check_open(f"the {purpose!r} CUDA stream")
            found = self._state.streams.get(purpose)
            if found is None:
                found = self._state.streams[purpose] = (torch.cuda.Stream(self.device_id, priority=priority),
                                                        priority)
                self._state.made["streams"] += 1
        if found[1] != priority:
            raise ValueError(f"the {self.name} runtime's {purpose!r} CUDA stream has priority {found[1]}, not "
                             f"{priority}")
        return found[0]

    def streams(self) -> dict[str, torch.cuda.Stream]:
        """The CUDA streams made so far, by purpose."""
        with self._state.lock:
            return {k: v[0] for k, v in self._state.streams.items()}

    # ---- codec sessions -------------------------------------------------------------------------------------
    def session(self, key: Hashable, open: Callable[[], T], close: Callable[[T], None] | None = None) -> T:
        """The session ``key`` (an NVDEC backend of a GPU, an operator's image decoder), opened by ``open()`` the
        first time it is asked for and closed when the runtime closes, by ``close(session)`` or else its own
        ``close()``; sessions close in the reverse order of their opening."""
        state = self._state
        with state.opening:  # one session opens at a time; the pools' new threads need not wait for it
            with state.lock:
                entry = state.sessions.get(key)
                if entry is not None:
                    return entry[0]
                self._check_open(f"the session {key!r}")
            obj = open()
            with state.lock:
                if state.closed:  # closed while it opened: closed at once, not kept
                    _close_session(key, obj, close, self.name)
                    self._check_open(f"the session {key!r}")
                state.sessions[key] = (obj, close)
                state.made["sessions"] += 1
            return obj

    def workers(self) -> Workers:
        """The pipeline's worker processes (:class:`sluice._workers.Workers`: parallel ``external_source``, the CPU
        video decoders' PyAV workers): one group, made on first use, a session like the codec ones (so the
        backends opened after it, which use its processes, close before it)."""
        return self.session(("worker processes",), Workers, Workers.close)

    def sessions(self) -> dict[Hashable, Any]:
        """The sessions open now, by key."""
        with self._state.lock:
            return {k: v[0] for k, v in self._state.sessions.items()}

    # ---- life cycle -----------------------------------------------------------------------------------------
    @property
    def made(self) -> dict[str, int]:
        """How many pools, threads, sessions and CUDA streams the runtime made so far."""
        with self._state.lock:
            return dict(self._state.made)

    @property
    def closed(self) -> bool:
        return self._state.closed

    def close(self, wait: bool = True) -> None:
        """Close the sessions (latest first), shut the pools down, and (``wait``) wait up to
        :data:`CLOSE_WAIT_SECONDS` for every thread of the runtime to end; again: nothing. In a process forked
        from the owner nothing is closed (its sessions and worker processes are the parent's)."""
        self._state.close(wait)

    def _check_open(self, what: str) -> None:
        if self._state.closed:
            raise RuntimeError(f"the {self.name} runtime is closed: cannot make {what} (build a new pipeline)")

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else (f"{len(self.threads())} threads, {len(self.sessions())} sessions, "
                                              f"{len(self.streams())} streams")
        return f"Runtime({self.name!r}, num_threads={self.num_threads}, device_id={self.device_id}: {state})"


def runtime_of(spec: Any) -> Runtime:
    """The runtime an operator was built with (``spec.runtime``, its pipeline's); for an operator made outside a
    pipeline (tests, benchmarks: an ``OpSpec`` without one) a runtime of its own, made once, kept on the spec and
    released when it is garbage collected."""
    rt = getattr(spec, "runtime", None)
    if rt is None:
        rt = Runtime(getattr(spec, "num_threads", 1) or 1, getattr(spec, "device_id", None), name="operator")
        try:
            spec.runtime = rt
        except AttributeError:  # a spec that takes no attribute: the runtime lives as long as the caller keeps it
            pass
    return rt


def run_coroutine(coro_fn: Callable[[], Any], deadline: float) -> Any:
    """Run ``coro_fn()`` to completion from synchronous code, giving up after ``deadline`` seconds (the S3 storage
    backend's requests). In the calling thread; where that thread already runs an event loop (a notebook), in a
    thread made for the call and joined before returning."""
    async def bounded():
        return await asyncio.wait_for(coro_fn(), deadline)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(bounded())
    box: dict[str, Any] = {}

    def target():
        try:
            box["value"] = asyncio.run(bounded())
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            box["error"] = e

    t = threading.Thread(target=target, name="sluice-s3")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
