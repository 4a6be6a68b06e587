"""GPU samples copied to host memory in one pass, through page-locked staging buffers (``Batch.as_cpu``).

torch's ``Tensor.cpu()`` copies into ordinary memory: CUDA then goes through a staging buffer of the driver's and
one CPU thread, which also takes a page fault on every fresh 4 KiB page of the destination. On the H200 a batch
of 16 clips of 16 720p frames (708 MB) came back at 1.2 GB/s that way, 0.6 s a batch
(``python benchmarks/diag/to_host.py``). Here the batch goes by DMA into two page-locked buffers of
``STAGE_BYTES`` on a side stream, in turn, while torch's CPU threads copy the other one out (faulting the pages in
in parallel) into host memory advised to transparent huge pages: 16-18 GB/s. Small samples share a staging
buffer's fill. Each sample gets host memory of its own, in ordinary (not page-locked) pages, as ``Tensor.cpu()``
gives: keeping or saving one sample keeps or saves only its own bytes. Example::

    host = samples_to_host([frames_a, frames_b])    # CUDA tensors -> CPU tensors with equal contents
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import threading
from collections.abc import Sequence

import torch

logger = logging.getLogger(__name__)

#: bytes of each of the two page-locked staging buffers (per thread that copies, per GPU)
STAGE_BYTES = 16 << 20
#: batches smaller than this go sample by sample through ``Tensor.cpu()`` (the staging's setup is not worth it)
STAGED_FROM = 1 << 20
#: samples from this size get a mapping of their own, advised to huge pages; smaller ones come from torch's heap
MAPPED_FROM = 1 << 20

_local = threading.local()


def samples_to_host(samples: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """CPU copies of ``samples`` (tensors on one CUDA device, any dtypes and shapes), equal to ``[s.cpu() for s in
    samples]``; when this returns, the copies are complete."""
    sizes = [s.numel() * s.element_size() for s in samples]
    devices = {s.device for s in samples}
    if (sum(sizes) < STAGED_FROM or len(devices) != 1 or next(iter(devices)).type != "cuda"
            or any(s.is_complex() or s.is_quantized for s in samples)):
        return [s.cpu() for s in samples]
    try:
        stages = _stages(next(iter(devices)))
    except RuntimeError as e:  # page-locked memory refused: the plain copy still works
        logger.warning("page-locked staging buffers could not be made (%s); copying to the host as torch does", e)
        return [s.cpu() for s in samples]
    out, pairs = [], []
    for s, size in zip(samples, sizes):
        if not size:
            out.append(torch.empty(s.shape, dtype=s.dtype))
            continue
        host = _host_bytes(size)
        out.append(host.view(s.dtype).view(s.shape))
        pairs.append((s.contiguous().reshape(-1).view(torch.uint8), host))
    copy_through_stages(plan_fills(pairs, STAGE_BYTES), stages)
    return out


def plan_fills(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]], stage_bytes: int) -> list[list[tuple]]:
    """``(source bytes, destination bytes)`` pairs cut into fills of one staging buffer: each fill a list of
    ``(source segment, destination segment, offset in the buffer)``, at most ``stage_bytes`` in all; a large sample
    spans several fills, small ones share one."""
    fills: list[list[tuple]] = []
    current: list[tuple] = []
    used = 0
    for src, dst in pairs:
        at, n = 0, src.numel()
        while at < n:
            take = min(n - at, stage_bytes - used)
            current.append((src[at:at + take], dst[at:at + take], used))
            used += take
            at += take
            if used == stage_bytes:
                fills.append(current)
                current, used = [], 0
    if current:
        fills.append(current)
    return fills


def copy_through_stages(fills: list[list[tuple]], stages) -> None:
    """Each fill's segments into a staging buffer (DMA on the stages' side stream, which first waits for the
    caller's stream, where the samples were made), then out of it by the CPU: the next fill's DMA runs while the
    CPU copies this one out. ``stages``: ``(stream or None, two buffers, two events)``; with no stream (tests on
    the CPU) the copies are made on the caller's thread in the same order."""
    stream, buffers, events = stages
    if stream is not None:
        stream.wait_stream(torch.cuda.current_stream(stream.device))
    pending = None
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        for k, fill in enumerate(fills):
            slot = k % 2  # its last fill (k - 2) was copied out on the previous turn
            for src, _, at in fill:
                buffers[slot][at:at + src.numel()].copy_(src, non_blocking=True)
            events[slot].record(stream)
            if pending is not None:
                _copy_out(*pending, buffers, events)
            pending = (slot, fill)
        if pending is not None:
            _copy_out(*pending, buffers, events)


def _copy_out(slot: int, fill: list[tuple], buffers, events) -> None:
    events[slot].synchronize()
    for _, dst, at in fill:
        dst.copy_(buffers[slot][at:at + dst.numel()])


def _stages(device: torch.device):
    """This thread's side stream, two page-locked staging buffers and their events on ``device`` (made once)."""
    per_device = getattr(_local, "stages", None)
    if per_device is None:
        per_device = _local.stages = {}
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in per_device:
        with torch.cuda.device(index):
            buffers = [torch.empty(STAGE_BYTES, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
            per_device[index] = (torch.cuda.Stream(index), buffers, [torch.cuda.Event() for _ in range(2)])
    return per_device[index]


def _host_bytes(nbytes: int) -> torch.Tensor:
    """Host memory for one sample: a mapping of its own for large ones (:func:`_fresh_host_bytes`), torch's heap
    for small ones (a mapping per sample would cost a system call and a page each)."""
    return _fresh_host_bytes(nbytes) if nbytes >= MAPPED_FROM else torch.empty(nbytes, dtype=torch.uint8)


def _fresh_host_bytes(nbytes: int) -> torch.Tensor:
    """``nbytes`` (> 0) of fresh anonymous memory as a uint8 tensor, advised to transparent huge pages (fewer page
    faults: 2.4 against 1.2 GB/s for a plain copy into it on the H200); freed when no tensor uses it."""
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            buf.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # a kernel without transparent huge pages: 4 KiB pages, as torch's own memory
            pass
    return torch.frombuffer(buf, dtype=torch.uint8)
