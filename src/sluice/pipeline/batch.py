"""Batches: one buffer plus a shape per sample, on the CPU or a CUDA device (DALI's ``TensorList``).

The samples of a batch may differ in shape; they are views of one buffer, dense (equal shapes), packed (back to
back) or padded (one row each), converted in one launch sequence when a kernel needs the other layout
(:mod:`sluice.pipeline.ragged`). Every operator accepts ragged batches. The DALI-style methods (``at``, ``as_tensor``, ``as_cpu``,
``layout()``, ``shape()``, ``is_dense_tensor()``) let DALI code read sluice's outputs unchanged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sluice import native

from . import ragged
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


#: bytes: page-locked requests of this size or more share size classes and are page-locked ahead (_PinnedBlocks)
POOLED_FROM = 1 << 20


class _PinnedBlocks:
    """How :func:`host_empty` asks torch's caching host allocator for large page-locked buffers, so that a pipeline
    in its steady state never waits for page-locking.

    Page-locking a new block costs 35-90 ms for 128 MiB (cudaHostAlloc, measured on an H200), and torch's allocator
    makes a new block whenever every cached one of the request's size class (a power of two) is in use or has
    copies pending. A pipeline holds a batch buffer in each queue and stage, so the number in flight grows now and
    then over the first hundred batches, and each growth stalled a stage: the Whisper program's batches took
    3 ms at their median and 40-95 ms at each of nine such allocations. So:

    * a request of at least :data:`POOLED_FROM` bytes and more than a quarter of the largest class handed out so
      far takes that largest class, so that ragged batches of about one size (55-90 MB a batch: classes of 64 and
      128 MiB) share one set of blocks instead of filling two;
    * when torch had to page-lock a block for a request (its ``num_host_alloc`` grew), :attr:`AHEAD` more blocks of
      that class are page-locked at once (:attr:`LATER` after the first time) and handed back to its cache: the
      first batch pays for the blocks its queues will hold, and a later shortfall is not met one stall at a time.

    Blocks stay in torch's cache (as they did before); copies queued from them keep them out of use until they
    have run (torch records an event for each)."""

    #: blocks page-locked ahead the first time torch page-locks one of a class for a request, and each later time
    AHEAD, LATER = 4, 1

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._largest = 0
        self._classes: set[int] = set()
        stats = getattr(torch.cuda, "host_memory_stats", None)
        self._allocations = (lambda: stats().get("num_host_alloc", 0)) if stats is not None else None

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes < POOLED_FROM or self._allocations is None:
            return torch.empty(shape, dtype=dtype, pin_memory=True)
        with self._lock:
            size = pinned_class(nbytes, self._largest)
            self._largest = max(self._largest, size)
            before = self._allocations()
            block = torch.empty(size, dtype=torch.uint8, pin_memory=True)
            if self._allocations() > before:  # none of this class was free: page-lock the next ones now
                count = self.AHEAD if size not in self._classes else self.LATER
                self._classes.add(size)
                ahead = [torch.empty(size, dtype=torch.uint8, pin_memory=True) for _ in range(count)]
                del ahead                      # back into torch's cache, free at once (no copies queued)
        return block[:nbytes].view(dtype).view(shape)


def pinned_class(nbytes: int, largest: int) -> int:
    """The size of the block :class:`_PinnedBlocks` asks torch for, for ``nbytes`` (at least POOLED_FROM) when
    ``largest`` is the largest class handed out so far: the power of two holding ``nbytes``, or ``largest`` for a
    request of more than a quarter of it."""
    size = 1 << (int(nbytes) - 1).bit_length()
    return max(size, largest) if 4 * nbytes > largest else size


_PINNED = _PinnedBlocks()


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
                out = _PINNED.empty(tuple(shape), dtype)
            _page_locked.add(out.untyped_storage().data_ptr())
            return out
        except (RuntimeError, AssertionError) as exc:
            _pinning_failed = True
            logger.warning("cannot page-lock a %s buffer of shape %s (%s); using ordinary memory from now on",
                           dtype, tuple(shape), exc)
    if reuse:
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
    """A batch: one buffer plus a shape per sample, on the CPU or a CUDA device (DALI's ``TensorList``).

    The buffer is laid out one of three ways, and the samples are views of it, made only when asked for:

    * **dense** (:meth:`from_dense`): every sample has one shape; the batch is one ``N x ...`` tensor;
    * **packed** (:meth:`from_packed`): the samples back to back in one 1-D tensor (or at given offsets in it);
      readers and CPU decoders write this, and it crosses to a GPU in one copy;
    * **padded** (:meth:`from_padded`): one ``N x largest`` tensor, sample ``i`` in the leading corner of row
      ``i``; GPU kernels take this, one launch for the whole batch with each sample's extent as a tensor.

    Kernels ask for the layout they work on (:meth:`padded`, :meth:`packed_form`) and get it converted once, in one
    launch sequence (:mod:`sluice.pipeline.ragged`); :meth:`shapes_array` gives every sample's shape without touching
    the data. A batch built from a list of tensors (``Batch([...])``) is the form of operators that make each
    sample apart; it is packed into one buffer when a kernel or a copy to the GPU asks for it.

    Example::

        b = Batch([torch.zeros(2, 3), torch.ones(4, 3)], layout="HW")
        b.shape()                   # [(2, 3), (4, 3)]
        rows, shapes = b.padded()   # rows: (2, 4, 3), zero below the first sample; shapes: [[2, 3], [4, 3]]
    """

    __slots__ = ("_samples", "_dense", "_packed", "_padded", "_shapes", "_fill", "_layout", "source_info")

    def __init__(self, samples: Sequence[torch.Tensor], layout: str = "", source_info: Sequence[str] | None = None):
        self._samples = list(samples)
        self._dense: torch.Tensor | None = None
        self._packed: tuple[torch.Tensor, np.ndarray, np.ndarray | None] | None = None
        self._padded: torch.Tensor | None = None
        self._shapes: np.ndarray | None = None
        self._fill: float | None = None
        self._layout = layout or ""
        self.source_info = _source_info(source_info, len(self._samples))
        if self._samples:
            dev = self._samples[0].device
            if any(s.device != dev for s in self._samples):
                raise ValueError("all samples of a batch must be on one device, got "
                                 f"{sorted({str(s.device) for s in self._samples})}")

    @classmethod
    def _empty(cls, layout: str, n: int, source_info: Sequence[str] | None) -> Batch:
        batch = cls.__new__(cls)
        batch._samples = batch._dense = batch._packed = batch._padded = batch._shapes = batch._fill = None
        batch._layout = layout or ""
        batch.source_info = [""] * n if source_info is None else _source_info(source_info, n)
        return batch

    @classmethod
    def from_dense(cls, tensor: torch.Tensor, layout: str = "", source_info: Sequence[str] | None = None) -> Batch:
        """A uniform batch held as one N x ... tensor; the samples are views of it, made only when asked for
        (a batch of 256 would otherwise cost 256 view objects per operator)."""
        if tensor.dim() == 0:
            raise ValueError("a dense batch needs a leading batch dimension")
        batch = cls._empty(layout, tensor.shape[0], source_info)
        batch._dense = tensor
        return batch

    @classmethod
    def from_packed(cls, flat: torch.Tensor, shapes: np.ndarray, layout: str = "",
                    source_info: Sequence[str] | None = None, offsets: np.ndarray | None = None) -> Batch:
        """A ragged batch whose samples lie in the 1-D contiguous tensor ``flat``: sample ``i`` is ``prod(shapes[i])``
        elements, row-major in shape ``shapes[i]`` (an ``(n, ndim)`` int array), back to back, or from element
        ``offsets[i]`` when given (samples cut from a larger buffer without copying, such as ``slice``'s). The
        per-sample views are made only when asked for; kernels read the buffer itself (:meth:`packed_form`)."""
        shapes = np.asarray(shapes, dtype=np.int64)
        if shapes.ndim != 2:
            raise ValueError(f"shapes must be an (n, ndim) array, got shape {shapes.shape}")
        batch = cls._empty(layout, shapes.shape[0], source_info)
        if offsets is not None:
            offsets = np.asarray(offsets, dtype=np.int64)
            if offsets.shape != (shapes.shape[0],):
                raise ValueError(f"{len(offsets)} offsets for {shapes.shape[0]} samples")
            if len(offsets) and (np.array_equal(offsets, ragged.packed_offsets(shapes))):
                offsets = None
        batch._packed = (flat, shapes, offsets)
        return batch

    @classmethod
    def from_padded(cls, tensor: torch.Tensor, shapes: np.ndarray, layout: str = "",
                    source_info: Sequence[str] | None = None, fill: float | None = None) -> Batch:
        """A ragged batch held as one ``N x largest`` tensor: sample ``i`` is the leading corner of row ``i`` of
        extent ``shapes[i]``. ``fill``: the value the padding holds, when the kernel that made it knows it (None:
        anything; :meth:`padded` fills it when a kernel needs a value there). Equal shapes make a dense batch."""
        shapes = np.asarray(shapes, dtype=np.int64).reshape(tensor.shape[0], -1) if tensor.dim() else shapes
        if tensor.dim() == 0:
            raise ValueError("a padded batch needs a leading batch dimension")
        if shapes.shape[1] != tensor.dim() - 1:
            raise ValueError(f"shapes of {shapes.shape[1]} dims for a padded tensor of shape {tuple(tensor.shape)}")
        if len(shapes) and (shapes > np.asarray(tensor.shape[1:], np.int64)).any():
            raise ValueError(f"a sample shape exceeds the padded extent {tuple(tensor.shape[1:])}")
        if (shapes == np.asarray(tensor.shape[1:], np.int64)).all():
            return cls.from_dense(tensor, layout, source_info)
        batch = cls._empty(layout, tensor.shape[0], source_info)
        batch._padded, batch._shapes, batch._fill = tensor, shapes, fill
        return batch

    # ---- contents -------------------------------------------------------------------------------------------
    @property
    def samples(self) -> list[torch.Tensor]:
        if self._samples is None:
            if self._dense is not None:
                self._samples = list(self._dense.unbind(0))
            elif self._padded is not None:
                self._samples = [row[tuple(slice(0, d) for d in shape)]
                                 for row, shape in zip(self._padded.unbind(0), self._shapes.tolist())]
            else:
                flat, shapes, offsets = self._packed
                sizes = ragged.sample_sizes(shapes).tolist()
                if offsets is None:
                    parts = flat[: sum(sizes)].split(sizes)
                else:
                    parts = [flat[o: o + k] for o, k in zip(offsets.tolist(), sizes)]
                self._samples = [p.view(tuple(shape)) for p, shape in zip(parts, shapes.tolist())]
        return self._samples

    @property
    def packed(self) -> tuple[torch.Tensor, np.ndarray] | None:
        """``(flat, shapes)`` when the batch is held packed back to back (:meth:`from_packed` without offsets),
        else None. :meth:`packed_form` gives any batch packed."""
        if self._packed is None or self._packed[2] is not None:
            return None
        return self._packed[0], self._packed[1]

    @property
    def dense(self) -> torch.Tensor | None:
        """The dense N x ... tensor when the batch was built from one, else None."""
        return self._dense

    @property
    def storage(self) -> str:
        """How the batch holds its samples now: ``"dense"``, ``"packed"``, ``"padded"`` or ``"samples"`` (a list of
        tensors)."""
        if self._dense is not None:
            return "dense"
        if self._padded is not None:
            return "padded"
        return "packed" if self._packed is not None else "samples"

    @property
    def padding_fill(self) -> float | None:
        """The value the padding of a padded batch holds, when known (None: unknown, or no padding)."""
        return self._fill if self._padded is not None else None

    def shapes_array(self) -> np.ndarray:
        """Every sample's shape as an ``(n, ndim)`` int64 array, without touching the data (samples of different
        ranks, only possible in a batch built from a list, raise)."""
        if self._shapes is None:
            if self._dense is not None:
                self._shapes = np.broadcast_to(np.asarray(self._dense.shape[1:], np.int64),
                                               (self._dense.shape[0], self._dense.dim() - 1))
            elif self._packed is not None:
                self._shapes = self._packed[1]
            else:
                ranks = {s.dim() for s in self._samples}
                if len(ranks) > 1:
                    raise ValueError(f"the samples of this batch differ in rank ({sorted(ranks)})")
                rank = ranks.pop() if ranks else 0
                self._shapes = np.array([tuple(s.shape) for s in self._samples], np.int64).reshape(
                    len(self._samples), rank)
        return self._shapes

    def padded(self, fill: float | None = 0.0) -> tuple[torch.Tensor, np.ndarray]:
        """The batch as one ``N x largest`` tensor and the shape table: sample ``i`` in the leading corner of row
        ``i``, the rest ``fill`` (None: any value, for kernels that never read the padding). Converted once, in
        one launch sequence, and kept."""
        shapes = self.shapes_array()
        if self._dense is not None:
            return self._dense, shapes
        if self._padded is None or (fill is not None and self._fill != fill):
            if self._padded is not None:
                self._padded = ragged.fill_padding(self._padded, shapes, fill)
            else:
                flat, shapes, offsets = self.packed_form()
                self._padded = ragged.packed_to_padded(flat, offsets, shapes, fill)
            self._fill = fill
        return self._padded, shapes

    def signal_rows(self) -> tuple[torch.Tensor, np.ndarray, np.ndarray] | None:
        """``(buffer, start of each sample in it, lengths)`` of a batch of 1-D samples as it lies, for the row
        kernels that read each signal in place: packed (at any offsets), or padded or dense (row ``i`` at
        ``i * extent``); None for other ranks or a padded form that is not contiguous."""
        shapes = self.shapes_array()
        if shapes.ndim != 2 or shapes.shape[1] != 1:
            return None
        if self.storage == "packed":
            flat, _, offsets = self.packed_form()
            return flat, np.asarray(offsets, np.int64), shapes[:, 0]
        if self.storage in ("padded", "dense"):
            rows = self.padded(fill=None)[0]
            if not rows.is_contiguous():
                return None
            return rows.reshape(-1), np.arange(len(self), dtype=np.int64) * rows.shape[1], shapes[:, 0]
        return None

    def packed_form(self) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """``(flat, shapes, offsets)``: the batch's samples in one 1-D tensor, sample ``i`` row-major from element
        ``offsets[i]``; converted (one copy or one scatter) unless the batch is held so."""
        if self._packed is not None:
            flat, shapes, offsets = self._packed
            return flat, shapes, ragged.packed_offsets(shapes) if offsets is None else offsets
        shapes = self.shapes_array()
        if self._dense is not None:
            dense = self._dense if self._dense.is_contiguous() else self._dense.contiguous()
            flat = dense.reshape(-1)
        elif self._padded is not None:
            flat = ragged.padded_to_packed(self._padded, shapes)
        else:
            samples = self._samples
            if any(s.dtype != samples[0].dtype for s in samples):
                raise ValueError("the samples of this batch differ in type; one buffer holds one type")
            flat = torch.cat([s.reshape(-1) for s in samples]) if samples else torch.empty(0)
        self._packed = (flat, shapes, None)
        return flat, shapes, ragged.packed_offsets(shapes)

    def shape_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        """The ``(n, ndim)`` int64 shape table on ``device`` (default: the batch's), copied asynchronously."""
        return ragged.shape_table(self.shapes_array(), torch.device(device) if device else self.torch_device)

    def __len__(self) -> int:
        if self._dense is not None:
            return self._dense.shape[0]
        if self._padded is not None:
            return self._padded.shape[0]
        return len(self._packed[1]) if self._samples is None else len(self._samples)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self._dense[i] if self._samples is None and self._dense is not None else self.samples[i]

    def __iter__(self):
        return iter(self.samples)

    @property
    def device(self) -> str:
        """``"cpu"`` or ``"gpu"``."""
        return "gpu" if self.torch_device.type == "cuda" else "cpu"

    def _buffer(self) -> torch.Tensor | None:
        if self._dense is not None:
            return self._dense
        if self._padded is not None:
            return self._padded
        if self._packed is not None:
            return self._packed[0]
        return self._samples[0] if self._samples else None

    @property
    def torch_device(self) -> torch.device:
        buffer = self._buffer()
        return buffer.device if buffer is not None else torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype | None:
        if self._packed is not None and self._dense is None and self._padded is None and not len(self._packed[1]):
            return None
        buffer = self._buffer()
        return buffer.dtype if buffer is not None else None

    def layout(self) -> str:
        """The layout string, e.g. ``"HWC"``; empty when unknown."""
        return self._layout

    def with_layout(self, layout: str) -> Batch:
        """The same samples under another layout name (no data is moved)."""
        out = Batch.__new__(Batch)
        for name in Batch.__slots__:
            setattr(out, name, getattr(self, name))
        out._layout = layout
        return out

    def shape(self) -> list[tuple[int, ...]]:
        """The shape of each sample."""
        if self._dense is not None:
            return [tuple(self._dense.shape[1:])] * self._dense.shape[0]
        if self._samples is None:
            return [tuple(s) for s in self.shapes_array().tolist()]
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
            if self._packed is not None:
                flat, shapes, offsets = self.packed_form()
                self._dense = ragged.packed_to_padded(flat, offsets, shapes, None)
            else:
                self._dense = torch.stack(self.samples)
            self._samples = self._packed = self._padded = None
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
        if self._padded is not None:
            return Batch.from_padded(samples_to_host([self._padded])[0], self._shapes, self._layout,
                                     self.source_info, self._fill)
        return Batch(samples_to_host(self.samples), self._layout, self.source_info)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The batch on ``device``. From the host to a GPU it crosses in ONE copy: a dense, padded or packed batch
        from where it lies (a page-locked copy of it first with ``non_blocking``, unless it lies in page-locked
        memory already; for samples at offsets in a larger buffer, the span they cover); a list of samples gathered
        back to back into one staging buffer (page-locked with ``non_blocking``), a packed batch on the device."""
        device = torch.device(device)
        if device.type == "cuda" and self.torch_device.type == "cpu" and len(self):
            if self._dense is not None:
                moved = _one_copy(self._dense, device, non_blocking)
                return Batch.from_dense(moved, self._layout, self.source_info)
            if self._padded is not None:
                return Batch.from_padded(_one_copy(self._padded, device, non_blocking), self._shapes, self._layout,
                                         self.source_info, self._fill)
            if self._packed is not None:
                flat, shapes, offsets = self._packed
                if offsets is None:
                    return Batch.from_packed(_one_copy(flat, device, non_blocking), shapes, self._layout,
                                             self.source_info)
                sizes = ragged.sample_sizes(shapes)
                lo, hi = int(offsets.min()), int((offsets + sizes).max())
                return Batch.from_packed(_one_copy(flat[lo:hi], device, non_blocking), shapes, self._layout,
                                         self.source_info, offsets - lo)
            return self._gathered_to(device, non_blocking)
        if self._dense is not None or (len(self) > 1 and self.is_dense_tensor()):
            dense = self.as_tensor()
            return Batch.from_dense(dense.to(device, non_blocking=non_blocking), self._layout, self.source_info)
        if self._padded is not None:
            return Batch.from_padded(self._padded.to(device, non_blocking=non_blocking), self._shapes, self._layout,
                                     self.source_info, self._fill)
        return Batch([s.to(device, non_blocking=non_blocking) for s in self.samples], self._layout, self.source_info)

    def _gathered_to(self, device: torch.device, pin: bool) -> Batch:
        samples = self.samples
        if any(s.dtype != samples[0].dtype for s in samples):  # one buffer holds one type
            return Batch([s.to(device, non_blocking=pin) for s in samples], self._layout, self.source_info)
        moved = gather_to(samples, device, pin)
        shape = samples[0].shape
        if all(s.shape == shape for s in samples):
            return Batch.from_dense(moved.view((len(samples),) + tuple(shape)), self._layout, self.source_info)
        return Batch.from_packed(moved, self.shapes_array(), self._layout, self.source_info)

    def __repr__(self) -> str:
        shapes = self.shape()
        shown = shapes if len(shapes) <= 4 else shapes[:4] + ["..."]
        return f"Batch(n={len(self)}, device={self.device!r}, dtype={self.dtype}, layout={self._layout!r}, shapes={shown})"


def _source_info(source_info: Sequence[str] | None, n: int) -> list[str]:
    info = list(source_info) if source_info is not None else [""] * n
    if len(info) != n:
        raise ValueError(f"source_info has {len(info)} entries for {n} samples")
    return info


def _one_copy(tensor: torch.Tensor, device: torch.device, non_blocking: bool) -> torch.Tensor:
    """A host tensor on the GPU in one copy; asynchronous from page-locked memory: the tensor's own when
    host_empty made it (no query, no copy) or it is pinned already, else a page-locked copy from host_empty."""
    if non_blocking and not is_page_locked(tensor) and not tensor.is_pinned():
        staged = host_empty(tuple(tensor.shape), tensor.dtype, pin=True, device=device)
        tensor = staged.copy_(tensor) if is_page_locked(staged) else tensor  # else a synchronous copy
    return tensor.to(device, non_blocking=non_blocking)


def gather_to(samples: Sequence[torch.Tensor], device: torch.device, pin: bool) -> torch.Tensor:
    """CPU ``samples`` (one dtype, any shapes) on ``device`` after one copy: gathered back to back into a staging
    buffer (page-locked with ``pin``, and the copy then asynchronous) and copied. Returns the copied buffer (the
    samples back to back, as :meth:`Batch.from_packed` takes them).

    The staging buffer comes from torch's caching host allocator each time: its blocks are reused rather than
    page-locked afresh, and a block goes back into use only once the copies queued from it have run, so a batch in
    flight is never overwritten by the next one."""
    sizes = [s.numel() for s in samples]
    stage = host_empty((sum(sizes),), samples[0].dtype, pin=pin, device=device if device.type == "cuda" else None)
    torch.cat([s.reshape(-1) for s in samples], out=stage)
    return stage.to(device, non_blocking=pin)
