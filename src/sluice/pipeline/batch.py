"""Batches: lists of samples whose shapes may differ, on the CPU or a CUDA device.

A batch is a list of torch tensors; a batch whose samples share one shape may also hold them as one dense
tensor (``dense``), the samples then being views of it. Dense storage is an optimisation, never an assumption:
every operator must accept ragged batches. The DALI-style methods (``at``, ``as_tensor``, ``as_cpu``,
``layout()``, ``shape()``, ``is_dense_tensor()``) let DALI code read sluice's outputs unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .to_host import samples_to_host

__all__ = ["Batch", "to_tensor", "host_empty", "is_page_locked", "gather_to"]

logger = logging.getLogger(__name__)

#: Storage addresses of the page-locked buffers host_empty made: Batch.to sends those without pinning a copy
#: first. Asking torch instead (Tensor.is_pinned) costs a CUDA driver query on the GPU stage's thread. torch's
#: host allocator keeps its blocks (only torch._C._host_emptyCache() returns them), so the set stays small; a
#: stale address would only make a non-blocking copy from ordinary memory, which CUDA does synchronously.
_page_locked: set[int] = set()
_pinning_failed = False

#: bytes: the smallest buffer host_empty(reuse=True) takes from the core's block cache (the C heap reuses smaller
#: blocks itself)
REUSED_FROM = 1 << 20


def host_empty(shape: Sequence[int], dtype: torch.dtype, *, pin: bool = False,
               device: torch.device | int | None = None, reuse: bool = False) -> torch.Tensor:
    """An uninitialised CPU tensor, page-locked with ``pin`` (then a GPU copy from it is one asynchronous DMA).

    Page-locked tensors come from torch's caching host allocator: a freed block is handed out again, with no new
    page-locking, and not before the non-blocking copies queued from it have finished (copy_ records an event on
    the copying stream for such blocks). ``device``: the GPU whose context is current while pinning (pinning
    would otherwise make a context on GPU 0). Where nothing can be page-locked (no CUDA driver, or the memory is
    exhausted) this says so once and returns ordinary memory. ``reuse``: an ordinary buffer of 1 MiB or more comes
    from the compiled core's block cache (``host_buffer``), which hands a block out again once every view of it is
    gone: torch's CPU allocator returns large blocks to the kernel, and a batch's fresh buffer then costs a page
    fault per 4 KiB on first touch, every batch (a CPU pipeline's `readers.file` ran at 0.31x a one-thread NumPy
    conversion of the same WAVs, 1.20x with the cache, benchmarks/audio_cpu_decode.py)."""
    global _pinning_failed
    if pin and not _pinning_failed:
        try:
            with torch.cuda.device(device if device is not None else torch.cuda.current_device()):
                out = torch.empty(tuple(shape), dtype=dtype, pin_memory=True)
            _page_locked.add(out.untyped_storage().data_ptr())
            return out
        except (RuntimeError, AssertionError) as exc:
            _pinning_failed = True
            logger.warning("cannot page-lock a %s buffer of shape %s (%s); using ordinary memory from now on",
                           dtype, tuple(shape), exc)
    if reuse:
        from sluice import native

        c = native.core()
        nbytes = int(np.prod(tuple(shape), dtype=np.int64)) * dtype.itemsize
        if c is not None and hasattr(c, "host_buffer") and nbytes >= REUSED_FROM:
            return torch.from_numpy(c.host_buffer(nbytes)).view(dtype).view(tuple(shape))
    return torch.empty(tuple(shape), dtype=dtype)


def is_page_locked(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` lies in a buffer :func:`host_empty` page-locked."""
    return tensor.untyped_storage().data_ptr() in _page_locked


def to_tensor(data: Any) -> torch.Tensor:
    """Turn one sample (NumPy, torch, bytes, scalars, anything with ``__array__``, ``__cuda_array_interface__``
    or ``__dlpack__``) into a torch tensor without copying where the source allows it."""
    if isinstance(data, torch.Tensor):
        return data
    if isinstance(data, np.ndarray):
        if data.dtype == object:
            raise TypeError("object arrays cannot be samples; pass numeric arrays or bytes")
        if not data.flags.writeable:
            data = data.copy()  # torch.from_numpy warns on read-only arrays and may not write through them
        return torch.from_numpy(np.ascontiguousarray(data)) if data.ndim else torch.as_tensor(data)
    if isinstance(data, (bytes, bytearray, memoryview)):
        return torch.frombuffer(bytearray(data), dtype=torch.uint8) if len(data) else torch.empty(0, torch.uint8)
    if hasattr(data, "__cuda_array_interface__") or hasattr(data, "__dlpack__"):
        try:
            return torch.from_dlpack(data)
        except Exception:  # noqa: BLE001 - fall back to the array interface below
            if hasattr(data, "__cuda_array_interface__"):
                return torch.as_tensor(data, device="cuda")
    if hasattr(data, "__array__"):
        return to_tensor(np.asarray(data))
    if isinstance(data, (bool, int, float, np.generic)) or (isinstance(data, (list, tuple))):
        return torch.as_tensor(np.asarray(data))
    raise TypeError(f"cannot make a tensor of {type(data).__name__}; pass NumPy arrays, torch tensors, bytes, or "
                    "objects with __array__, __cuda_array_interface__ or __dlpack__")


class Batch:
    """A batch of samples (torch tensors), possibly of different shapes, all on one device.

    Example::

        b = Batch([torch.zeros(2, 3), torch.ones(4, 3)], layout="HW")
        b.shape()      # [(2, 3), (4, 3)]
        b.device       # 'cpu'
    """

    __slots__ = ("_samples", "_dense", "_packed", "_layout", "source_info")

    def __init__(self, samples: Sequence[torch.Tensor], layout: str = "", source_info: Sequence[str] | None = None):
        self._samples = list(samples)
        self._dense: torch.Tensor | None = None
        self._packed: tuple[torch.Tensor, np.ndarray] | None = None
        self._layout = layout or ""
        self.source_info = list(source_info) if source_info is not None else [""] * len(self._samples)
        if len(self.source_info) != len(self._samples):
            raise ValueError(f"source_info has {len(self.source_info)} entries for {len(self._samples)} samples")
        if self._samples:
            dev = self._samples[0].device
            if any(s.device != dev for s in self._samples):
                raise ValueError("all samples of a batch must be on one device, got "
                                 f"{sorted({str(s.device) for s in self._samples})}")

    @classmethod
    def from_dense(cls, tensor: torch.Tensor, layout: str = "", source_info: Sequence[str] | None = None) -> Batch:
        """A uniform batch held as one N x ... tensor; the samples are views of it, made only when asked for
        (a batch of 256 would otherwise cost 256 view objects per operator)."""
        if tensor.dim() == 0:
            raise ValueError("a dense batch needs a leading batch dimension")
        batch = cls.__new__(cls)
        batch._samples = None
        batch._dense = tensor
        batch._packed = None
        batch._layout = layout or ""
        n = tensor.shape[0]
        batch.source_info = list(source_info) if source_info is not None else [""] * n
        if len(batch.source_info) != n:
            raise ValueError(f"source_info has {len(batch.source_info)} entries for {n} samples")
        return batch

    @classmethod
    def from_packed(cls, flat: torch.Tensor, shapes: np.ndarray, layout: str = "",
                    source_info: Sequence[str] | None = None) -> Batch:
        """A ragged batch whose samples lie back to back in the 1-D contiguous tensor ``flat``: sample ``i`` is the
        next ``prod(shapes[i])`` elements, of shape ``shapes[i]`` (an ``(n, ndim)`` int array). The per-sample views
        are made only when asked for; kernels that take the whole batch read ``packed`` instead (readers.file's
        buffer, the mixed image decoders' crops)."""
        shapes = np.asarray(shapes, dtype=np.int64)
        batch = cls.__new__(cls)
        batch._samples = None
        batch._dense = None
        batch._packed = (flat, shapes)
        batch._layout = layout or ""
        n = shapes.shape[0]
        batch.source_info = list(source_info) if source_info is not None else [""] * n
        if len(batch.source_info) != n:
            raise ValueError(f"source_info has {len(batch.source_info)} entries for {n} samples")
        return batch

    # ---- contents -------------------------------------------------------------------------------------------
    @property
    def samples(self) -> list[torch.Tensor]:
        if self._samples is None:
            if self._dense is not None:
                self._samples = list(self._dense.unbind(0))
            else:
                flat, shapes = self._packed
                sizes = np.prod(shapes, axis=1).tolist() if shapes.shape[1] else [1] * len(shapes)
                parts = flat[: sum(sizes)].split(sizes)
                self._samples = [p.view(*shape) for p, shape in zip(parts, shapes.tolist())]
        return self._samples

    @property
    def packed(self) -> tuple[torch.Tensor, np.ndarray] | None:
        """``(flat, shapes)`` when the batch was built with :meth:`from_packed`, else None."""
        return self._packed

    @property
    def dense(self) -> torch.Tensor | None:
        """The dense N x ... tensor when the batch was built from one, else None."""
        return self._dense

    def __len__(self) -> int:
        if self._dense is not None:
            return self._dense.shape[0]
        return len(self._packed[1]) if self._samples is None else len(self._samples)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self._dense[i] if self._samples is None and self._dense is not None else self.samples[i]

    def __iter__(self):
        return iter(self.samples)

    @property
    def device(self) -> str:
        """``"cpu"`` or ``"gpu"``."""
        if self._dense is not None:
            return "gpu" if self._dense.is_cuda else "cpu"
        if self._packed is not None:
            return "gpu" if self._packed[0].is_cuda else "cpu"
        return "gpu" if self._samples and self._samples[0].is_cuda else "cpu"

    @property
    def torch_device(self) -> torch.device:
        if self._dense is not None:
            return self._dense.device
        if self._packed is not None:
            return self._packed[0].device
        return self._samples[0].device if self._samples else torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype | None:
        if self._dense is not None:
            return self._dense.dtype
        if self._packed is not None:
            return self._packed[0].dtype if len(self._packed[1]) else None
        return self._samples[0].dtype if self._samples else None

    def layout(self) -> str:
        """The layout string, e.g. ``"HWC"``; empty when unknown."""
        return self._layout

    def with_layout(self, layout: str) -> Batch:
        """The same samples under another layout name (no data is moved)."""
        out = Batch.__new__(Batch)
        out._samples, out._dense, out._packed = self._samples, self._dense, self._packed
        out._layout, out.source_info = layout, self.source_info
        return out

    def shape(self) -> list[tuple[int, ...]]:
        """The shape of each sample."""
        if self._dense is not None:
            return [tuple(self._dense.shape[1:])] * self._dense.shape[0]
        if self._samples is None:
            return [tuple(s) for s in self._packed[1].tolist()]
        return [tuple(s.shape) for s in self._samples]

    def is_dense_tensor(self) -> bool:
        """Whether all samples share one shape (so the batch can be one tensor)."""
        if self._dense is not None:
            return True
        shapes = self.shape()
        if self._samples is None:
            return all(s == shapes[0] for s in shapes)
        return all(s == shapes[0] for s in shapes) and all(x.dtype == self._samples[0].dtype for x in self._samples)

    def as_tensor(self) -> torch.Tensor:
        """The batch as one N x ... tensor; raises when the samples differ in shape."""
        if self._dense is None:
            if not self.is_dense_tensor():
                shapes = sorted(set(self.shape()))[:4]
                raise ValueError(f"the samples of this batch differ in shape ({shapes} ...); pad them to one shape "
                                 "(fn.pad, fn.resize, fn.crop) or read them one by one")
            if not len(self):
                raise ValueError("an empty batch has no dense tensor")
            self._dense = torch.stack(self.samples)
            self._samples = self._packed = None
        return self._dense

    def at(self, i: int) -> np.ndarray:
        """Sample ``i`` as a NumPy array (CPU batches; as DALI's ``TensorListCPU.at``)."""
        sample = self[i]
        if sample.is_cuda:
            raise TypeError("at() reads CPU batches; call as_cpu() first")
        return sample.numpy()

    def as_array(self) -> np.ndarray:
        """The dense batch as a NumPy array."""
        return self.as_cpu().as_tensor().numpy()

    def as_cpu(self) -> Batch:
        """A copy of the batch in host memory (through page-locked staging buffers: see :mod:`.to_host`)."""
        if self.device == "cpu":
            return self
        if self._dense is not None:
            return Batch.from_dense(samples_to_host([self._dense])[0], self._layout, self.source_info)
        return Batch(samples_to_host(self.samples), self._layout, self.source_info)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The batch on ``device``. From the host to a GPU it crosses in ONE copy: a dense or packed batch from
        where it lies (a page-locked copy of it first with ``non_blocking``, unless it lies in page-locked memory
        already); a list of samples gathered back to back into one staging buffer (page-locked with
        ``non_blocking``), then split into views on the device."""
        device = torch.device(device)
        if device.type == "cuda" and self.torch_device.type == "cpu" and len(self):
            if self._dense is not None:
                moved = _one_copy(self._dense, device, non_blocking)
                return Batch.from_dense(moved, self._layout, self.source_info)
            if self._packed is not None:
                flat, shapes = self._packed
                return Batch.from_packed(_one_copy(flat, device, non_blocking), shapes, self._layout,
                                         self.source_info)
            return self._gathered_to(device, non_blocking)
        if self._dense is not None or (len(self) > 1 and self.is_dense_tensor()):
            dense = self.as_tensor()
            return Batch.from_dense(dense.to(device, non_blocking=non_blocking), self._layout, self.source_info)
        return Batch([s.to(device, non_blocking=non_blocking) for s in self.samples], self._layout, self.source_info)

    def _gathered_to(self, device: torch.device, pin: bool) -> Batch:
        samples = self.samples
        if any(s.dtype != samples[0].dtype for s in samples):  # one buffer holds one type
            return Batch([s.to(device, non_blocking=pin) for s in samples], self._layout, self.source_info)
        moved, parts = gather_to(samples, device, pin)
        shape = samples[0].shape
        if all(s.shape == shape for s in samples):
            return Batch.from_dense(moved.view((len(samples),) + tuple(shape)), self._layout, self.source_info)
        return Batch(parts, self._layout, self.source_info)

    def __repr__(self) -> str:
        shapes = self.shape()
        shown = shapes if len(shapes) <= 4 else shapes[:4] + ["..."]
        return f"Batch(n={len(self)}, device={self.device!r}, dtype={self.dtype}, layout={self._layout!r}, shapes={shown})"


def _one_copy(tensor: torch.Tensor, device: torch.device, non_blocking: bool) -> torch.Tensor:
    """A host tensor on the GPU in one copy; asynchronous from page-locked memory: the tensor's own when
    host_empty made it (no query, no copy) or it is pinned already (pin_memory then returns it), else a copy."""
    if non_blocking and not is_page_locked(tensor):
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=non_blocking)


def gather_to(samples: Sequence[torch.Tensor], device: torch.device, pin: bool) -> tuple[torch.Tensor, list]:
    """CPU ``samples`` (one dtype, any shapes) on ``device`` after one copy: gathered back to back into a staging
    buffer (page-locked with ``pin``, and the copy then asynchronous), copied, and split there. Returns the copied
    buffer and the samples as views of it.

    The staging buffer comes from torch's caching host allocator each time: its blocks are reused rather than
    page-locked afresh, and a block goes back into use only once the copies queued from it have run, so a batch in
    flight is never overwritten by the next one."""
    sizes = [s.numel() for s in samples]
    stage = host_empty((sum(sizes),), samples[0].dtype, pin=pin, device=device if device.type == "cuda" else None)
    torch.cat([s.reshape(-1) for s in samples], out=stage)
    moved = stage.to(device, non_blocking=pin)
    return moved, [part.view(s.shape) for part, s in zip(moved.split(sizes), samples)]
