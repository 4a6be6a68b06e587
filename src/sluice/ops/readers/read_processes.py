"""Batches of files read by worker processes into shared memory that the GPU copies from by DMA.

Reading a GPU pipeline's batches in the pipeline's threads holds the GIL for a few microseconds a file (open, the
read call, close, the views), and the GPU stage's thread needs the same GIL: on the H200 the audio pipeline ran at
75 % of its reader, and plain reads of 882 KB files stopped scaling at 8 threads (27.0k files/s) where 16
processes reached 52.9k (46.7 GB/s). Here worker processes open, read and close the files, straight into a
shared memory block; the pipeline's thread only takes the sizes and sends each worker its run of files.

A batch lands in one of a few *slots*: shared memory blocks page-locked once (``cudaHostRegister``), reused for
later batches. A slot is free again when every tensor of its batch is gone and the copies queued from it on the
pipeline's stream are done (an event recorded when the last view dies). When all slots are in use (a consumer
keeps batches) and no more may be made, the batch is read by the caller's threads instead: never a wait.

Each worker process runs this module's worker side through :mod:`sluice._pipes`, without sluice or torch (the
standard library only): it starts in a fraction of a second, never re-runs the training script, and exits when its
stdin closes, so it cannot outlive the pipeline's process. A worker that dies is restarted; the files it had are
read by the caller, so no batch is lost. An error reading a file names it, as the thread path's does.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import weakref
from multiprocessing import shared_memory

if __name__ == "_sluice_worker":  # the worker process (see sluice._pipes): neither sluice nor torch
    from __main__ import receive as _receive
    from __main__ import send as _send
    from __main__ import serve as _serve_requests
else:
    import numpy as np
    import torch

    from sluice._pipes import cores_per_rank
    from sluice._pipes import receive as _receive
    from sluice._pipes import send as _send
    from sluice._pipes import start as _start_worker
    from sluice._pipes import stop as _stop_worker
    from sluice.errors import SampleError

logger = logging.getLogger(__name__)

#: Slots (batches in flight) at most; a batch that finds none free is read by the caller's threads.
MAX_SLOTS = 8


def read_processes_default() -> int:
    """Worker processes of GPU pipelines' file readers: ``$SLUICE_READ_PROCESSES`` (0 reads in the pipeline's
    threads), else half this process's share of the cores (those it may run on, divided among the
    ``$LOCAL_WORLD_SIZE`` ranks torchrun starts on the host), 2 to 8. On the H200's 16 cores 8 read fastest
    (4: 0.87x, 16: 0.64x, in the WAV log-mel pipeline)."""
    value = os.environ.get("SLUICE_READ_PROCESSES")
    if value is not None:
        try:
            return max(0, int(value))
        except ValueError:
            raise ValueError(f"SLUICE_READ_PROCESSES must be a number of processes (0: threads), not {value!r}") \
                from None
    return min(8, max(2, cores_per_rank() // 2))


class _Worker:
    """One reading process; one request at a time (the reader's lock)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.forget: list[str] = []  # buffers closed since this process last heard: it unmaps them

    def start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = _start_worker(__file__)
            self.forget = []  # a new process maps nothing yet
        return self.proc

    def close(self) -> None:
        proc, self.proc = self.proc, None
        _stop_worker(proc)


class _Slot:
    """A shared memory block a batch is read into (page-locked when the pipeline uses a GPU)."""

    def __init__(self, nbytes: int, device_id: int | None) -> None:
        self.shm = shared_memory.SharedMemory(create=True, size=max(nbytes, 1 << 20))
        self.capacity = self.shm.size
        try:
            # reserve the pages now: a full /dev/shm (64 MB in a default Docker container) is then an error
            # here, not a SIGBUS in whichever process first writes past what it can hold
            os.posix_fallocate(self.shm._fd, 0, self.capacity)
        except OSError as e:
            self.shm.close()
            self.shm.unlink()
            raise OSError(f"cannot reserve a {self.capacity >> 20} MiB shared batch buffer ({e.strerror or e}); "
                          f"is /dev/shm large enough? (Docker: --shm-size)") from None
        except AttributeError:  # no posix_fallocate (macOS)
            pass
        self.device_id = device_id
        self.registered = False
        self.in_use = False
        self.event = None  # recorded on the pipeline's stream when the batch's last view died
        host = np.ndarray((self.capacity,), np.uint8, buffer=self.shm.buf)
        self.base = host.ctypes.data
        if device_id is not None:
            with torch.cuda.device(device_id):
                code = torch.cuda.cudart().cudaHostRegister(self.base, self.capacity, 0)
            self.registered = int(code) == 0
            if not self.registered:
                self.shm.close()
                self.shm.unlink()
                raise OSError(f"cannot page-lock a {self.capacity >> 20} MiB shared batch buffer "
                              f"(cudaHostRegister error {int(code)})")
        del host

    def free(self) -> bool:
        return not self.in_use and (self.event is None or self.event.query())

    def close(self) -> None:
        if self.event is not None:
            self.event.synchronize()
        if self.registered:
            with torch.cuda.device(self.device_id):
                torch.cuda.cudart().cudaHostUnregister(self.base)
        self.shm.close()
        self.shm.unlink()


class ProcessReader:
    """Reads batches of files with ``processes`` worker processes into reused shared memory slots, page-locked on
    GPU ``device_id`` (None: ordinary shared memory). ``stream``: the CUDA stream consumers copy the batches on
    (a slot is reused only after the copies queued on it are done)."""

    def __init__(self, processes: int, device_id: int | None = None, stream=None) -> None:
        self.workers = [_Worker() for _ in range(max(1, processes))]
        self.device_id, self.stream = device_id, stream
        self.slots: list[_Slot] = []
        self._lock = threading.Lock()
        self._warned = False
        self._broken = False  # a buffer could not be made: no new ones
        self.stats = {"process_batches": 0, "thread_batches": 0, "worker_restarts": 0}
        self._finalizer = weakref.finalize(self, ProcessReader._close, self.workers, self.slots)

    @property
    def pinned(self) -> bool:
        """Whether the batches lie in page-locked memory."""
        return self.device_id is not None

    # ---------------------------------------------------------------------------------------------- reading
    def read(self, paths: list[str], sizes: list[int], offsets: list[int]) -> tuple[torch.Tensor, list[int],
                                                                                     list[int]] | None:
        """Read ``paths`` (of ``sizes`` bytes, at ``offsets`` of the batch) into a slot: the batch's buffer, the
        bytes read per file, and the files that grew since their sizes were taken (read them apart). None when no
        slot is free (read the batch another way). A file that cannot be read raises a SampleError naming it."""
        total = offsets[-1]
        with self._lock:
            slot = self._take_slot(total)
            if slot is None:
                self.stats["thread_batches"] += 1
                return None
            try:
                got, grown = self._read_into(slot, paths, sizes, offsets)
            except SampleError:  # every answer was read: the workers are in step
                slot.in_use = False
                raise
            except BaseException:  # interrupted mid-exchange: answers may be left unread, start the workers anew
                slot.in_use = False
                for worker in self.workers:
                    worker.close()
                raise
            self.stats["process_batches"] += 1
        # a fresh array over the slot per batch: its finaliser runs when the batch's last tensor is gone
        host = np.ndarray((total,), np.uint8, buffer=slot.shm.buf)
        weakref.finalize(host, self._release, slot)
        return torch.from_numpy(host), got, grown

    def _take_slot(self, nbytes: int) -> _Slot | None:
        for slot in self.slots:
            if slot.free():
                if slot.capacity < nbytes:  # too small for this batch: replace it
                    slot.close()
                    for worker in self.workers:
                        worker.forget.append(slot.shm.name)
                    self.slots.remove(slot)
                    break
                slot.in_use, slot.event = True, None
                return slot
        if len(self.slots) < MAX_SLOTS and not self._broken:
            try:
                slot = self._new_slot(nbytes)
            except OSError as e:  # no shared or page-locked memory for it: this reader's threads read from now on
                self._broken = True
                logger.warning("fn.readers.file: %s; batches are read by the pipeline's threads from now on", e)
                return None
            self.slots.append(slot)
            slot.in_use = True
            return slot
        if not self._warned:
            self._warned = True
            logger.info("fn.readers.file: all %d shared batch buffers are held (batches kept by a consumer); such "
                        "batches are read by the pipeline's threads", MAX_SLOTS)
        return None

    def _new_slot(self, nbytes: int) -> _Slot:
        return _Slot(nbytes + (nbytes >> 3), self.device_id)  # room for batches a little larger

    def _release(self, slot: _Slot) -> None:
        """The last view of the slot's batch died: free it once the copies queued from it are done."""
        if self.stream is not None:
            try:
                event = torch.cuda.Event()
                event.record(self.stream)
                slot.event = event
            except Exception:  # noqa: BLE001 - the interpreter shutting down: nothing copies any more
                pass
        slot.in_use = False

    def _read_into(self, slot: _Slot, paths: list[str], sizes: list[int], offsets: list[int]):
        n = len(paths)
        got, grown = [0] * n, []
        runs = _runs_by_bytes(sizes, len(self.workers))
        sent = []
        for worker, run in zip(self.workers, runs):
            files = [(i, paths[i], offsets[i], sizes[i]) for i in run]
            try:
                proc = worker.start()
                forget, worker.forget = worker.forget, []
                _send(proc.stdin, ("read", slot.shm.name, files, forget))
                sent.append((worker, run))
            except (OSError, BrokenPipeError):
                sent.append((worker, None))
        error = None
        for worker, run in sent:
            answer = None
            if run is not None:
                try:
                    answer = _receive(worker.proc.stdout)
                except (EOFError, OSError):
                    answer = None
            if answer is None:  # the process died: read its files here, start a new one next batch
                self.stats["worker_restarts"] += 1
                logger.warning("fn.readers.file: a reading process exited (code %s); its files are read by the "
                               "pipeline and the process restarted", worker.proc.poll() if worker.proc else None)
                worker.close()
                run = run if run is not None else next(r for w, r in zip(self.workers, runs) if w is worker)
                answer = _read_here(slot.shm.buf, [(i, paths[i], offsets[i], sizes[i]) for i in run])
            kind, payload = answer
            if kind == "error":
                error = error or payload
                continue
            for i, count, grew in payload:
                got[i] = count
                if grew:
                    grown.append(i)
        if error is not None:
            i, message = error
            raise SampleError(i, paths[i], OSError(f"cannot read '{paths[i]}': {message}"))
        return got, grown

    # ---------------------------------------------------------------------------------------------- closing
    def close(self) -> None:
        """End the worker processes and free the slots (waits for copies still queued from them)."""
        self._finalizer()

    @staticmethod
    def _close(workers: list[_Worker], slots: list[_Slot]) -> None:
        for worker in workers:
            worker.close()
        for slot in slots:
            try:
                slot.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass
        slots.clear()


def _runs_by_bytes(sizes: list[int], parts: int) -> list[range]:
    """Contiguous runs of the files with about the same number of bytes each, at most ``parts`` of them."""
    n = len(sizes)
    parts = max(1, min(parts, n))
    if n == 0:
        return [range(0)]
    total = sum(sizes) or 1
    bounds, acc, target = [0], 0, total / parts
    for i, size in enumerate(sizes):
        acc += size
        if acc >= target * len(bounds) and len(bounds) < parts and i + 1 < n:
            bounds.append(i + 1)
    bounds.append(n)
    return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


# ---------------------------------------------------------------------------------------------- both sides
def _read_here(buf, files: list[tuple[int, str, int, int]]) -> tuple[str, object]:
    """Read ``files`` ((sample, path, offset, size)) into ``buf``: ("ok", [(sample, bytes read, grew)]) or
    ("error", (sample, reason)) for the first that cannot be read. A file is read until its slot is full or it
    ends; one spare byte shows a file that grew since its size was taken."""
    out = []
    spare = bytearray(1)
    for i, path, offset, size in files:
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                view, got, grew = buf[offset: offset + size], 0, False
                while True:
                    more = os.readv(fd, [view[got:], spare])
                    if got + more > size:
                        got, grew = size, True
                        break
                    got += more
                    if not more or got == size:
                        break
                view.release()
            finally:
                os.close(fd)
        except OSError as e:
            return "error", (i, e.strerror or str(e))
        out.append((i, got, grew))
    return "ok", out


def _serve() -> None:
    blocks: dict[str, shared_memory.SharedMemory] = {}

    def handle(request):
        _, name, files, forget = request
        for old in forget:
            if old in blocks:
                blocks.pop(old).close()
        try:
            block = blocks.get(name)
            if block is None:
                block = blocks[name] = _attach(name)
            return _read_here(block.buf, files)
        except Exception as exc:  # noqa: BLE001 - sent to the caller
            return "error", (files[0][0] if files else 0, f"{type(exc).__name__}: {exc}")

    _serve_requests(handle)


def _attach(name: str) -> shared_memory.SharedMemory:
    """The caller's block, not tracked here: the caller owns it, this process must not unlink it at exit."""
    try:
        return shared_memory.SharedMemory(name=name, track=False)  # Python >= 3.13
    except TypeError:
        from multiprocessing import resource_tracker

        block = shared_memory.SharedMemory(name=name)
        try:
            resource_tracker.unregister(block._name, "shared_memory")
        except Exception:  # noqa: BLE001
            pass
        return block

