"""GPU samples copied to host memory in one pass, through page-locked staging buffers (``Batch.as_cpu``).

torch's ``Tensor.cpu()`` copies into ordinary memory: CUDA then goes through a staging buffer of the driver's and
one CPU thread, which also takes a page fault on every fresh 4 KiB page of the destination. On the H200 a batch
of 16 clips of 16 720p frames (708 MB) came back at 1.2 GB/s that way, 0.6 s a batch
(``python benchmarks/diag/to_host.py``). Here the batch goes by DMA into two page-locked buffers of
``STAGE_BYTES`` on a side stream, in turn, while torch's CPU threads copy the other one into a single host buffer
for the whole batch (its pages faulted in by those threads, and advised to transparent huge pages): 16-18 GB/s.
The samples come back as views of that buffer, in ordinary (not page-locked) memory that lives as long as any of
them. Example::

    host = samples_to_host([frames_a, frames_b])    # CUDA tensors -> CPU tensors with equal contents
"""

from __future__ import annotations

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
ALIGN = 64  # each sample's offset in the host buffer: aligned for any dtype, and for vector loads

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
    offsets, total = plan_offsets(sizes)
    host = _fresh_host_bytes(total)
    out, pieces = [], []
    for s, size, at in zip(samples, sizes, offsets):
        out.append(host[at:at + size].view(s.dtype).view(s.shape) if size else torch.empty(s.shape, dtype=s.dtype))
        if size:
            flat = s.contiguous().reshape(-1).view(torch.uint8)
            pieces += [(flat[a:a + STAGE_BYTES], at + a) for a in range(0, size, STAGE_BYTES)]
    _copy_pieces(pieces, host, stages)
    return out


def plan_offsets(sizes: Sequence[int], align: int = ALIGN) -> tuple[list[int], int]:
    """Each sample's byte offset in one host buffer (aligned to ``align``) and the buffer's size."""
    offsets, at = [], 0
    for size in sizes:
        offsets.append(at)
        at += -(-size // align) * align
    return offsets, at


def _copy_pieces(pieces: list, host: torch.Tensor, stages) -> None:
    """Each ``(device bytes, host offset)`` piece by DMA into a staging buffer, then by the CPU into ``host``: the
    next piece's DMA runs while the CPU copies this one."""
    stream, buffers, events = stages
    stream.wait_stream(torch.cuda.current_stream(stream.device))  # the samples were made on the caller's stream
    pending = None
    with torch.cuda.stream(stream):
        for k, (src, at) in enumerate(pieces):
            slot = k % 2  # its last contents (piece k - 2) were copied out on the previous turn
            buffers[slot][:src.numel()].copy_(src, non_blocking=True)
            events[slot].record(stream)
            if pending is not None:
                _drain(pending, host, buffers, events)
            pending = (slot, at, src.numel())
        if pending is not None:
            _drain(pending, host, buffers, events)


def _drain(pending: tuple[int, int, int], host: torch.Tensor, buffers, events) -> None:
    slot, at, size = pending
    events[slot].synchronize()
    host[at:at + size].copy_(buffers[slot][:size])


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


def _fresh_host_bytes(nbytes: int) -> torch.Tensor:
    """``nbytes`` of fresh anonymous memory as a uint8 tensor, advised to transparent huge pages (fewer page
    faults: 2.4 against 1.2 GB/s for a plain copy into it on the H200); freed when no tensor uses it."""
    buf = mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            buf.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # a kernel without transparent huge pages: 4 KiB pages, as torch's own memory
            pass
    return torch.frombuffer(buf, dtype=torch.uint8, count=nbytes) if nbytes else torch.empty(0, dtype=torch.uint8)
