"""Hybrid video decoding: NVDEC sessions and PyAV (CPU) threads decode one batch of clips together.

NVDEC and the CPU are different hardware, and either alone leaves the other idle. A batch of clip requests is cut
into *GOP jobs* (one group of pictures of one file: decode from its keyframe up to the last wanted frame in it);
the jobs, heaviest first, go into one queue that NVDEC workers (one per decoder session) and CPU workers (one
PyAV decoder thread each) both pull from. Each path therefore takes work in proportion to its speed at every
moment, with no estimate to get wrong; the only decision taken from measured speeds is at the end of a batch: a CPU
worker leaves the last jobs to NVDEC when NVDEC alone would finish everything left before the CPU finished one more
job (a CPU job takes about twice as long as an NVDEC one, so a late CPU job would otherwise be the batch's tail).
NVDEC workers take jobs from the heavy end of the queue, CPU workers from the light end.

A static split in proportion to measured speeds (``backends.image.scheduler.SplitScheduler``, as the JPEG decoder
uses, whose hardware decoder takes one call per batch) is not used here: video jobs are independent and coarse, so
pulling from one queue balances exactly where a static split leaves one path's leftovers as the tail.

Each path's workers are threads of their own (a CPU worker thread keeps its worker process), and batches
submitted one after the other (:meth:`HybridBackend.submit_batch`) overlap: a worker done with one batch's jobs
takes the next batch's while the other workers finish the first's last jobs.

CPU-decoded frames are copied to the GPU from pinned memory, one copy per job, in the CPU worker that decoded them
(on its own CUDA stream, so copies overlap decoding). With ``share_gops`` a group of pictures wanted by several
clips of the batch is decoded once for all of them. Example::

    backend = HybridBackend(device_id=0)
    frames = backend.decode_batch([("a.mp4", get_index("a.mp4"), [0, 60, 120]),
                                   ("b.mp4", get_index("b.mp4"), [5, 6])])   # [{frame: (H, W, 3) CUDA tensor}]
    backend.last_stats["cpu"]["jobs"], backend.last_stats["nvdec"]["jobs"]
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import threading
import time
import weakref
from collections import deque
from concurrent.futures import CancelledError, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from sluice._workers import Workers, cores_per_rank
from sluice.runtime import Runtime

from .cpu_worker import WorkerDied, WorkerProcess
from .index import Source, VideoError, VideoIndex, source_identity
from .memfile import MemoryFiles
from .nvdec import NVDEC_CODECS, NvdecBackend, NvdecUnsupported
from .pyav import PyAVBackend

logger = logging.getLogger(__name__)

PATHS = ("nvdec", "cpu")
NVDEC_READY_POLL_S = 0.01  # how often an NVDEC worker looks whether the decoders opened ahead are open
PROCESS_READY_POLL_S = 0.005  # how often a CPU worker thread looks whether its worker process is ready
PROCESS_READY_WAIT_S = 30.0  # longest a CPU worker thread waits for its process before decoding in the thread
SMOOTHING = 0.2  # weight of a new job's time in a path's seconds-per-frame estimate


@dataclass
class _Job:
    """One group of pictures of one file: decode from ``key`` up to the last of ``frames``."""

    source: Source
    idx: VideoIndex
    key: int
    frames: set = field(default_factory=set)
    requests: list = field(default_factory=list)  # indexes of the requests that use it
    nvdec_ok: bool = True
    result: dict | None = None
    index_key: str | None = None  # a memfd of bytes (``source`` its path): the content's index cache key

    @property
    def weight(self) -> int:
        """Frames decoded (presentation order, from the keyframe to the last wanted frame)."""
        return max(self.frames) - self.key + 1


#: Most CPU decoder workers a hybrid backend starts by default (each is a process of ~60 MB).
MAX_DEFAULT_CPU_WORKERS = 16
#: Whether the CPU jobs of files run in worker processes by default (``cpu_processes=None``); False: in the threads
#: (the video tests, which start no Python per worker unless they are about the processes).
CPU_PROCESSES = True


def default_cpu_workers(nvdec_sessions: int = 0) -> int:
    """CPU decoder workers of the hybrid backend (unless its ``cpu_workers`` says): this process's share of the
    cores it may run on (divided among the ``$LOCAL_WORLD_SIZE`` ranks of the host that torchrun starts), less one
    core for each NVDEC session, at most MAX_DEFAULT_CPU_WORKERS: eight ranks on a 128-core host get 16 workers
    each, not 128.

    Each NVDEC session's thread waits for its frames, then parses and submits the next pictures; while it waits
    for a core the engine idles. On the H200's 16 cores (the peer's clips of a 600 s 720p H.264 video, 7 sessions,
    two leases), 16 CPU workers gave 7,800-9,500 decoded frames/s, NVDEC slowed from 0.76 to 1.2-1.5 ms per frame;
    8 to 14 workers gave 11,700-16,100 (8: 14,100, 10: 14,400); NVDEC alone, 9,000. On the 60 s video, whose
    batches hold fewer and shared groups of pictures, 8 workers gave 12,000 frames/s, 12 gave 7,800-11,500 and
    16, 8,400."""
    return max(1, min(MAX_DEFAULT_CPU_WORKERS, cores_per_rank() - max(0, nvdec_sessions)))


def nvdec_usable() -> bool:
    """Whether NVDEC may decode here: a CUDA GPU, and PyNvVideoCodec installed (or already imported)."""
    if not torch.cuda.is_available():
        return False
    return "PyNvVideoCodec" in sys.modules or importlib.util.find_spec("PyNvVideoCodec") is not None


class HybridBackend:
    """Decodes frames on NVDEC and on the CPU at once; outputs are on GPU ``device_id`` (on the CPU without CUDA).

    ``sessions``: NVDEC decoder sessions (= NVDEC workers; 0 decodes on the CPU only); ``cpu_workers``: PyAV decoder
    threads (0: the CPU decodes only what NVDEC cannot; default: :func:`default_cpu_workers`); ``share_gops``: decode a
    group of pictures wanted by several requests of a batch once; ``cpu_processes``: CPU jobs of files run in worker
    processes (one per CPU worker thread, frames back through shared memory; see :mod:`.cpu_worker`) instead of in the
    threads, so that they share no GIL with the NVDEC threads (default: :data:`CPU_PROCESSES`; the processes run a
    small script of their own, so the caller's main module is never imported again). ``nvdec`` / ``cpu`` replace the
    backends used (tests). ``output_device="cpu"`` keeps the frames on the CPU (the CPU video reader:
    ``sessions=0``, PyAV in worker processes). ``workers``: the worker processes' owner (default: the
    ``runtime``'s; with neither, the backend's own, made on first use). ``runtime``: the pipeline's
    :class:`~sluice.runtime.Runtime`, which makes each path's worker threads (and those of the NVDEC backend made
    here) and their copy streams, and closes the backend with the pipeline; None: a runtime of its own.
    ``close()`` ends the processes (so does garbage collection) and the threads, and the NVDEC backend made here.
    """

    device = "cuda"

    def __init__(self, device_id: int = 0, sessions: int = 7, cpu_workers: int | None = None, *,
                 share_gops: bool = True, cpu_processes: bool | None = None, nvdec: NvdecBackend | None = None,
                 cpu: PyAVBackend | None = None, output_device: str | None = None,
                 workers: Workers | None = None, runtime: Runtime | None = None) -> None:
        if output_device not in (None, "cpu"):
            raise ValueError(f"Invalid output_device ({output_device!r}). Supported values are None (the GPU when "
                             "there is one) and 'cpu'.")
        self.device_id = int(device_id)
        if output_device == "cpu":
            self.device = "cpu"  # where the frames end (the class says "cuda")
        self._own_runtime = runtime is None
        self._runtime = self._new_runtime() if runtime is None else runtime
        self._own_nvdec = nvdec is None  # closed with this backend (one given is its giver's)
        self.nvdec = nvdec if nvdec is not None else NvdecBackend(device_id=device_id, sessions=max(1, sessions),
                                                                  runtime=self._runtime)
        self.nvdec_workers = self.nvdec.sessions if sessions else 0
        self.cpu = cpu if cpu is not None else PyAVBackend(threads=1, colors="nvdec")  # colours as NVDEC's
        # a core is left for each NVDEC session only where NVDEC can decode (else all are the CPU's from the start)
        sessions_run = self.nvdec_workers if nvdec is not None or nvdec_usable() else 0
        self.cpu_workers = default_cpu_workers(sessions_run) if cpu_workers is None else max(0, int(cpu_workers))
        self.share_gops = share_gops
        if cpu_processes is None:
            cpu_processes = CPU_PROCESSES
        self.cpu_processes = bool(cpu_processes)
        self._workers: list[WorkerProcess] = []  # every process started (closed with the backend)
        self._spare: list[WorkerProcess] = []  # started, not yet owned by a CPU worker thread
        if workers is None and runtime is not None:
            workers = runtime.workers()  # the pipeline's group, closed with the pipeline
        self._group = [workers] if workers is not None else []  # their owner (the backend's own: made on first use)
        self._own_group = workers is None
        self._finalizer = weakref.finalize(self, _close_workers, self._workers, self._group, self._own_group)
        self.last_stats: dict[str, dict[str, float]] = {}
        self._spf: dict[str, float] = {}  # measured seconds per decoded frame, per worker, of each path
        self._nvdec_broken: str | None = None
        self._cpu_formats: set[tuple] = set()  # (codec, width, height) NVDEC cannot decode
        self._pools: dict[str, ThreadPoolExecutor] = {}  # each path's worker threads (the runtime's)
        # encoded bytes are decoded from a memfd holding them, so that the worker processes and NVDEC's file
        # decoder, which open files by path, take them too (see .memfile)
        self._memory_files = MemoryFiles()
        self._lock = threading.Lock()
        self._local = threading.local()

    def _new_runtime(self) -> Runtime:
        """A runtime of the backend's own (one made outside a pipeline), on its GPU unless its frames stay on the
        CPU."""
        return Runtime(device_id=None if self.device == "cpu" else self.device_id, name="video")

    @property
    def out_device(self) -> torch.device:
        if self.device == "cpu" or not torch.cuda.is_available():
            return torch.device("cpu")
        return torch.device("cuda", self.device_id)

    # ------------------------------------------------------------------------------------------------ API
    def decode(self, source: Source, idx: VideoIndex, frames: Sequence[int]) -> dict[int, torch.Tensor]:
        """Decode the distinct ``frames`` of ``source`` (its groups of pictures spread over both paths)."""
        return self.decode_batch([(source, idx, frames)])[0]

    def decode_batch(self, requests: Sequence[tuple[Source, VideoIndex, Sequence[int]]]
                     ) -> list[dict[int, torch.Tensor]]:
        """Decode several requests ``(source, index, frames)`` at once; one ``{frame: HWC uint8 tensor}`` each.

        An exception raised for a job carries ``request_index``: the first request that needed it.
        """
        return self.submit_batch(requests).result()

    def submit_batch(self, requests: Sequence[tuple[Source, VideoIndex, Sequence[int]]]) -> "PendingBatch":
        """Start decoding a batch of requests and return at once; ``.result()`` waits for it (as
        :meth:`decode_batch` returns). Batches submitted one after the other overlap: a worker that has no more
        jobs in one batch (the end of a batch, where most workers of the other path wait for the last jobs) takes
        the next batch's jobs, so ``readers.video`` submits the batch after the current one ahead of time."""
        leases: list = []
        try:
            jobs, per_request = self._jobs(requests, leases)
        except BaseException:
            self._release_leases(leases)
            raise
        state = self._start(jobs)
        state.leases = leases
        return PendingBatch(self, requests, jobs, per_request, state)

    def _order_streams(self, jobs: list[_Job]) -> None:
        """Workers made the frames on the default stream (or synchronised their copies): the caller's stream waits
        for it, and the frames' memory is kept from reuse until the caller's stream is done with them."""
        device = self.out_device
        if device.type != "cuda":
            return
        current, default = torch.cuda.current_stream(device), torch.cuda.default_stream(device)
        if current == default:
            return
        current.wait_stream(default)
        seen = set()
        for job in jobs:
            for t in (job.result or {}).values():
                ptr = t.untyped_storage().data_ptr()
                if t.is_cuda and ptr not in seen:
                    seen.add(ptr)
                    t.record_stream(current)

    # ------------------------------------------------------------------------------------------ planning
    def _jobs(self, requests, leases: list) -> tuple[list[_Job], list[list[_Job]]]:
        """The batch's jobs, and each request's; the memfds its bytes are decoded from go into ``leases``."""
        jobs: dict[tuple, _Job] = {}
        per_request: list[list[_Job]] = []
        as_files: dict[tuple, object] = {}  # source_identity of bytes -> their memfd (None: decoded as bytes)
        for r, (source, idx, frames) in enumerate(requests):
            mine = []
            try:
                plan = idx.plan(frames)
            except Exception as e:  # noqa: BLE001 - re-raised naming the request
                e.request_index = r
                raise
            identity, memfd = source_identity(source), None
            if not isinstance(source, (str, os.PathLike)) and (self.cpu_processes or self.nvdec_workers):
                if identity not in as_files:
                    as_files[identity] = self._memory_files.lease(source)
                    if as_files[identity] is not None:
                        leases.append(as_files[identity])
                memfd = as_files[identity]
            for key, group in plan:
                jk = (identity, id(idx), key) if self.share_gops else (r, key)
                job = jobs.get(jk)
                if job is None:
                    nvdec_ok = idx.codec in NVDEC_CODECS and _format(idx) not in self._cpu_formats
                    job = jobs[jk] = _Job(source, idx, key, nvdec_ok=nvdec_ok)
                    if memfd is not None:
                        job.source, job.index_key = memfd.path, memfd.index_key
                job.frames.update(group)
                job.requests.append(r)
                mine.append(job)
            per_request.append(mine)
        return list(jobs.values()), per_request

    # --------------------------------------------------------------------------------------------- running
    def _start(self, jobs: list[_Job]) -> "_BatchState":
        """Queue a batch's jobs and its workers (each path's in that path's own threads, so that a CPU worker
        thread keeps its worker process from batch to batch); returns at once."""
        use_nvdec = self.nvdec_workers > 0 and self._nvdec_broken is None
        shared = deque(sorted((j for j in jobs if j.nvdec_ok and use_nvdec), key=lambda j: -j.weight))
        cpu_only = deque(j for j in jobs if not (j.nvdec_ok and use_nvdec))
        n_gpu = self.nvdec_workers if use_nvdec and shared else 0
        n_cpu = min(self.cpu_workers, len(jobs)) if self.cpu_workers else min(1, len(cpu_only))
        # cpu_workers=0: one worker decodes only what NVDEC cannot, and counts as no CPU path for the shared queue
        state = _BatchState(shared, cpu_only, {"nvdec": n_gpu, "cpu": n_cpu if self.cpu_workers else 0}, self._spf)
        for kind, count in (("nvdec", n_gpu), ("cpu", n_cpu)):
            if count:
                pool = self._path_pool(kind)
                state.futures += [pool.submit(self._worker, kind, state) for _ in range(count)]
        return state

    def _path_pool(self, kind: str) -> ThreadPoolExecutor:
        """The threads of one path's workers: NVDEC sessions, or CPU workers (whatever a batch needs at most)."""
        size = self.nvdec_workers if kind == "nvdec" else max(1, self.cpu_workers)
        with self._lock:
            pool = self._pools.get(kind)
            if pool is None:
                pool = self._pools[kind] = self._runtime.thread_pool(f"video-{kind}", size)
            return pool

    def _finish(self, state: "_BatchState") -> None:
        """Wait for a batch's workers, decode what they left (NVDEC failed after the CPU workers stopped, or no
        worker ran) here, and raise the batch's first error."""
        try:
            for f in state.futures:
                f.result()
            while state.error is None and (state.cpu_only or state.shared):
                job = (state.cpu_only or state.shared).popleft()
                self._do(job, "cpu", state)
        finally:
            self._release(state)
        if state.error is not None:
            raise state.error
        self.last_stats = state.stats

    def _release(self, state: "_BatchState") -> None:
        """The batch is done with its memfds (once; a cancelled batch's are released when it is cancelled: its
        workers still decoding hold the files open themselves)."""
        with state.lock:
            leases, state.leases = state.leases, []
        self._release_leases(leases)

    def _release_leases(self, leases: list) -> None:
        for lease in leases:
            self._memory_files.release(lease)

    def _worker(self, kind: str, state: "_BatchState") -> None:
        self._local.pool_worker = True  # a CPU worker thread, which may own a worker process
        while True:
            if kind == "nvdec" and self._nvdec_broken is not None:
                state.leave(kind)
                return
            if kind == "nvdec" and not self._nvdec_ready(state):
                return  # the CPU took every job while NVDEC's decoders were being opened
            if kind == "cpu" and not self._process_ready(state):
                return  # NVDEC took every job while this thread's worker process was starting
            job = state.take(kind)
            if job is None:
                return
            self._do(job, kind, state)
            if state.error is not None:
                state.leave(kind)
                return

    def _nvdec_ready(self, state: "_BatchState") -> bool:
        """Wait, while the batch still has jobs for NVDEC, for the decoders being opened ahead (a job taken before
        would wait for them, seconds in a fresh process, while the CPU workers could have decoded it); False when
        the batch ran out of such jobs first (this worker then has left it)."""
        ready = getattr(self.nvdec, "ready", None)
        return ready is None or _wait_in_batch(state, "nvdec", ready, NVDEC_READY_POLL_S)

    def _process_ready(self, state: "_BatchState") -> bool:
        """While NVDEC takes this batch's jobs, a CPU worker thread whose worker process is not ready yet waits for
        it (at most PROCESS_READY_WAIT_S) instead of decoding in the thread: PyAV in a thread holds the GIL for much
        of its work and slows every NVDEC thread, which then decodes the batch's first jobs alone. False when the
        batch ran out of jobs first (this worker then has left it). Without NVDEC it decodes in the thread
        meanwhile (nothing else would)."""
        if not (self.cpu_processes and self._local.pool_worker and state.workers["nvdec"] > 0
                and self._nvdec_broken is None):
            return True

        def ready() -> bool:
            try:
                return self._own_worker() is not None
            except WorkerDied:  # it could not start: _decode_cpu decodes in the thread and says why
                return True

        return _wait_in_batch(state, "cpu", ready, PROCESS_READY_POLL_S, PROCESS_READY_WAIT_S)

    def _do(self, job: _Job, kind: str, state: "_BatchState") -> None:
        if kind == "nvdec" and _format(job.idx) in self._cpu_formats:
            state.give_back(job)
            return
        start = time.perf_counter()
        self._local.cold = False
        try:
            job.result = self._decode_nvdec(job) if kind == "nvdec" else self._decode_cpu(job)
        except Exception as e:  # noqa: BLE001
            if kind == "nvdec":  # hand the job to the CPU, which decodes it or names what is wrong with the file
                if isinstance(e, NvdecUnsupported):  # this codec / size: straight to the CPU from now on
                    if _format(job.idx) not in self._cpu_formats:
                        self._cpu_formats.add(_format(job.idx))
                        logger.info("%s: decoding %s %dx%d on the CPU: %s", job.idx.name, *_format(job.idx), e)
                else:
                    if not isinstance(e, VideoError):  # no PyNvVideoCodec, no GPU: stop using NVDEC
                        self._nvdec_broken = str(e)
                    logger.warning("%s: NVDEC could not decode the group of pictures at keyframe %d (%s); "
                                   "decoding it on the CPU", job.idx.name, job.key, e)
                state.give_back(job)
                return
            e.request_index = job.requests[0]
            state.fail(e)
            return
        seconds = time.perf_counter() - start
        with state.lock:
            spf = seconds / job.weight
            old = self._spf.get(kind)
            if not self._local.cold:  # a job that started a worker process says nothing of the path's speed
                self._spf[kind] = spf if old is None else (1 - SMOOTHING) * old + SMOOTHING * spf
            s = state.stats[kind]
            s["jobs"] += 1
            s["frames"] += job.weight
            s["seconds"] += seconds

    def _decode_nvdec(self, job: _Job) -> dict[int, torch.Tensor]:
        return self.nvdec.decode(job.source, job.idx, sorted(job.frames))

    def start_workers(self) -> None:
        """Start the CPU worker processes now, without waiting for them (``readers.video`` calls this when the
        pipeline is built; otherwise the first CPU job of a file does). They are forked from one process that
        imported PyAV once (:mod:`sluice._workers`' fork server): until its process is ready, a CPU worker thread
        leaves the jobs to NVDEC, or without NVDEC decodes in the thread itself (:meth:`_process_ready`), so the
        first batches are not slower than without processes."""
        if not self.cpu_processes:
            return
        with self._lock:
            if self._workers:
                return
            if not self._group:
                self._group.append(Workers())
            for _ in range(max(1, self.cpu_workers)):  # none: one decodes what NVDEC cannot
                worker = WorkerProcess(self._group[0])
                worker.start()
                self._workers.append(worker)
                self._spare.append(worker)

    def get_ready(self, path: str | None = None) -> None:
        """Start now, without waiting, what the first batch would otherwise wait for: the CPU worker processes
        (:meth:`start_workers`) and, given the file the first batch reads, NVDEC's file decoders on it
        (:meth:`NvdecBackend.open_ahead`). ``readers.video`` calls this when its pipeline is built."""
        try:
            self.start_workers()
        except WorkerDied as exc:
            self._decode_in_threads(exc)
        if path is not None and self.nvdec_workers and self._nvdec_broken is None and hasattr(self.nvdec,
                                                                                                 "open_ahead"):
            self.nvdec.open_ahead(path)

    def _own_worker(self) -> WorkerProcess | None:
        """This CPU worker thread's process: a started one that is ready, which it keeps from then on; None while
        none is ready yet."""
        worker = getattr(self._local, "worker", None)
        if worker is not None:
            return worker
        self.start_workers()
        with self._lock:
            for k, candidate in enumerate(self._spare):
                if candidate.poll_ready():
                    worker = self._local.worker = self._spare.pop(k)
                    return worker
        return None

    def _decode_cpu(self, job: _Job) -> dict[int, torch.Tensor]:
        if self.cpu_processes and getattr(self._local, "pool_worker", False) and isinstance(job.source,
                                                                                       (str, os.PathLike)):
            try:
                worker = self._own_worker()
                if worker is not None:
                    with self._decode_in_process(job, worker) as frames:
                        return self._to_device(frames)
            except WorkerDied as exc:
                if not exc.at_start:
                    raise
                self._decode_in_threads(exc)
        return self._to_device(self.cpu.decode(job.source, job.idx, sorted(job.frames)))

    def _decode_in_threads(self, exc: WorkerDied) -> None:
        """The worker processes could not start (their interpreter or imports failed; the error is on stderr):
        decode in the threads from now on rather than fail every job."""
        self.cpu_processes = False
        logger.warning("video CPU worker processes cannot start (%s); decoding in threads instead", exc)

    def _to_device(self, frames: dict[int, np.ndarray]) -> dict[int, torch.Tensor]:
        if not frames:
            return {}
        numbers = list(frames)
        shapes = {frames[f].shape for f in numbers}
        if len(shapes) > 1 or self.out_device.type == "cpu":
            return {f: torch.from_numpy(np.array(a)) for f, a in frames.items()}
        # one pinned staging buffer and one host-to-device copy for the job, on this worker's own stream
        host = torch.empty((len(numbers), *shapes.pop()), dtype=torch.uint8, pin_memory=True)
        staged = host.numpy()
        for k, f in enumerate(numbers):
            staged[k] = frames[f]
        device = self.out_device
        with torch.cuda.device(device):
            stream = getattr(self._local, "stream", None)
            if stream is None:  # this worker thread's, made by the runtime
                stream = self._local.stream = self._runtime.stream(
                    f"video copy {id(self)}: thread {threading.get_ident()}", device=device)
            out = torch.empty(host.shape, dtype=torch.uint8, device=device)  # allocated on the default stream
            with torch.cuda.stream(stream):
                out.copy_(host, non_blocking=True)
            stream.synchronize()
        return {f: out[k] for k, f in enumerate(numbers)}

    @contextmanager
    def _decode_in_process(self, job: _Job, worker: WorkerProcess):
        """Decode a job in this CPU worker thread's own process (no GIL shared with the NVDEC threads); its frames
        come back as views of shared memory, used inside the ``with`` block."""
        self._local.cold = worker.fresh  # its first job opens the file and loads its index there
        frames = worker.decode(os.fspath(job.source), sorted(job.frames), self.cpu.colors, job.index_key,
                               job.idx.name)
        try:
            yield frames
        finally:
            frames.clear()  # the shared memory goes with its last view

    def close(self) -> None:
        """End the CPU worker processes and threads (also done when the backend is garbage collected or the
        interpreter exits)."""
        self._finalizer()
        with self._lock:
            self._spare.clear()
            self._finalizer = weakref.finalize(self, _close_workers, self._workers, self._group,
                                               self._own_group)  # for any later use
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)
        self._memory_files.close()
        if self._own_nvdec and hasattr(self.nvdec, "close"):
            self.nvdec.close()
        if self._own_runtime:
            self._runtime.close()
            self._runtime = self._new_runtime()  # for any later use


def _close_workers(workers: list[WorkerProcess], group: list[Workers], own: bool) -> None:
    """End the worker processes (all at once), and the group with its fork server when it is the backend's own.
    Nothing in a forked copy of the backend (a DataLoader worker whose garbage collector drops it): the processes
    are the parent's (``Workers`` checks)."""
    if group:
        group[0].release([w.worker for w in workers])
        if own:
            group[0].close()
            group.clear()
    workers.clear()


def _wait_in_batch(state: "_BatchState", kind: str, ready, poll_s: float, wait_s: float | None = None) -> bool:
    """Wait, polling every ``poll_s``, until ``ready()`` (or ``wait_s`` has passed), while the batch still has jobs
    for a worker of ``kind``; False, the worker having left the batch, when it failed or ran out of them first."""
    deadline = None if wait_s is None else time.monotonic() + wait_s
    while not ready():
        if state.error is not None or not state.has_jobs(kind):
            state.leave(kind)
            return False
        if deadline is not None and time.monotonic() >= deadline:
            return True
        time.sleep(poll_s)
    return True


def _format(idx: VideoIndex) -> tuple:
    return idx.codec, idx.width, idx.height


class PendingBatch:
    """A batch submitted to :meth:`HybridBackend.submit_batch`: ``result()`` waits for it and returns one
    ``{frame: tensor}`` per request (the same list every call); ``cancel()`` stops it (its workers take no more of
    its jobs; ``result()`` then raises)."""

    def __init__(self, backend: HybridBackend, requests, jobs: list[_Job], per_request: list[list[_Job]],
                 state: "_BatchState") -> None:
        self._backend, self._jobs, self._per_request, self._state = backend, jobs, per_request, state
        self._frames = [{int(f) for f in frames} for _, _, frames in requests]
        self._out: list[dict[int, torch.Tensor]] | None = None

    def result(self) -> list[dict[int, torch.Tensor]]:
        if self._out is None:
            try:
                self._backend._finish(self._state)
            except CancelledError:
                raise VideoError("the batch was cancelled (its video backend was closed)") from None
            self._backend._order_streams(self._jobs)
            out = []
            for wanted, jobs in zip(self._frames, self._per_request):
                got: dict[int, torch.Tensor] = {}
                for job in jobs:
                    got.update((f, t) for f, t in job.result.items() if f in wanted)
                out.append(got)
            self._out = out
        return self._out

    def cancel(self) -> None:
        self._state.fail(VideoError("the batch was cancelled"))
        self._backend._release(self._state)


class _BatchState:
    """The queues of one batch, shared by its workers; per-path statistics; the first error.

    ``workers``: how many workers each path has in this batch; ``spf``: measured seconds per frame of a worker of
    each path (empty until measured)."""

    def __init__(self, shared: deque, cpu_only: deque, workers: dict[str, int], spf: dict[str, float]) -> None:
        self.shared, self.cpu_only = shared, cpu_only
        self.workers, self.spf = workers, spf
        self.active = dict(workers)  # workers of each path still taking jobs
        self.remaining = sum(j.weight for j in shared)  # frames queued for either path
        self.remaining_cpu_only = sum(j.weight for j in cpu_only)
        self.lock = threading.Lock()
        self.error: BaseException | None = None
        self.futures: list = []  # the batch's workers
        self.leases: list = []  # the memfds its bytes are decoded from (HybridBackend._release)
        self.stats = {p: {"jobs": 0, "frames": 0, "seconds": 0.0} for p in PATHS}

    def take(self, kind: str) -> _Job | None:
        """The next job for a worker of ``kind``, or None when it should stop.

        The path whose worker is faster per frame takes the heaviest job, the other the lightest; a worker leaves
        a job to the other path when that path alone would finish everything queued for it before this worker
        finished the job (the end of a batch), judged from the measured speeds, and only while that path still
        has workers taking jobs (else both paths could leave the last jobs to each other). A worker given None
        has left the batch."""
        with self.lock:
            job = self._next(kind)
            if job is None:
                self.active[kind] -= 1
            return job

    def has_jobs(self, kind: str) -> bool:
        """Whether jobs a worker of ``kind`` may take are queued (read without the lock: a hint for waiting)."""
        return bool(self.shared or (kind == "cpu" and self.cpu_only))

    def leave(self, kind: str) -> None:
        """A worker of ``kind`` stops before ``take`` said so (NVDEC failed, or the batch failed)."""
        with self.lock:
            self.active[kind] -= 1

    def _next(self, kind: str) -> _Job | None:
        if self.error is not None:
            return None
        if kind == "cpu" and self.cpu_only:
            job = self.cpu_only.popleft()
            self.remaining_cpu_only -= job.weight
            return job
        if not self.shared or self.workers[kind] == 0:
            return None
        other = "cpu" if kind == "nvdec" else "nvdec"
        mine, theirs = self.spf.get(kind), self.spf.get(other)
        measured = mine is not None and theirs is not None and self.workers[other] > 0
        heavy_first = mine <= theirs if measured else kind == "nvdec"
        job = self.shared[0] if heavy_first else self.shared[-1]
        if measured and self.active[other] > 0:
            queued_for_other = self.remaining + (self.remaining_cpu_only if other == "cpu" else 0)
            if job.weight * mine > queued_for_other * theirs / self.workers[other]:
                return None  # the other path alone finishes what is left before this job would be done here
        if heavy_first:
            self.shared.popleft()
        else:
            self.shared.pop()
        self.remaining -= job.weight
        return job

    def give_back(self, job: _Job) -> None:
        with self.lock:
            job.nvdec_ok = False
            self.cpu_only.append(job)

    def fail(self, error: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error = error


def path_shares(stats: dict) -> dict[str, float]:
    """Share of the decoded frames each path took in a batch (from ``HybridBackend.last_stats``)."""
    total = sum(s["frames"] for s in stats.values()) or 1
    return {p: float(np.round(s["frames"] / total, 3)) for p, s in stats.items()}
