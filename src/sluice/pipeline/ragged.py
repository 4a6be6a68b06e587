"""The two buffer layouts of a ragged batch, and the batched conversions between them (any device, torch only).

A ragged batch is one buffer plus a shape per sample (:class:`sluice.pipeline.batch.Batch`), laid out one of two ways:

* **packed**: the samples back to back (or at given element offsets) in one 1-D tensor, each row-major in its own
  shape. Readers and CPU decoders write this: no byte is wasted, and it crosses to a GPU in one copy.
* **padded**: one ``(n, *largest)`` tensor whose row ``i`` holds sample ``i`` in its leading corner
  (``rows[i][:s0, :s1, ...]``); what lies beyond is padding. GPU kernels take this: every row has the same strides,
  so one launch covers the batch, with each sample's extent given as a tensor. Equal shapes (a dense batch) are the
  case with no padding.

:func:`packed_to_padded` and :func:`padded_to_packed` convert in one launch sequence for the whole batch (index
arithmetic on the device, one gather or one scatter), whatever the rank and the spread of shapes; long signals
(audio), whose index would be eight times their size, are copied row by row in one multi-tensor call instead,
and on a GPU by one Triton kernel (:mod:`sluice.kernels._triton_ragged`). The shapes live on the host (NumPy), where
every size decision is made without waiting for the device; :func:`shape_table` and :func:`valid_mask` put them on
the device once per batch shape, asynchronously.

Example::

    flat = torch.arange(7.0)                                   # samples of 3 and 4 elements
    shapes = np.array([[3], [4]])
    padded = packed_to_padded(flat, packed_offsets(shapes), shapes, fill=0.0)    # [[0, 1, 2, 0], [3, 4, 5, 6]]
    back = padded_to_packed(padded, shapes)                                     # tensor([0., 1., ..., 6.])
"""

from __future__ import annotations

import collections
import functools
import threading

import numpy as np
import torch

from sluice import env

__all__ = ["sample_sizes", "packed_offsets", "largest", "shape_table", "valid_mask", "packed_to_padded",
           "padded_to_packed", "fill_padding", "host_to_device"]


def sample_sizes(shapes: np.ndarray) -> np.ndarray:
    """Elements of each sample (``(n,)`` int64) of an ``(n, ndim)`` shape table (0-D samples hold one)."""
    shapes = np.asarray(shapes, dtype=np.int64)
    if shapes.ndim != 2:
        raise ValueError(f"a shape table is (samples, dims), got an array of shape {shapes.shape}")
    return np.prod(shapes, axis=1, dtype=np.int64) if shapes.shape[1] else np.ones(len(shapes), np.int64)


def packed_offsets(shapes: np.ndarray) -> np.ndarray:
    """Element offsets of samples packed back to back (an exclusive running sum of their sizes)."""
    sizes = sample_sizes(shapes)
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(sizes) else sizes


def largest(shapes: np.ndarray) -> tuple[int, ...]:
    """The per-axis maximum of a shape table: the extent of the padded form."""
    shapes = np.asarray(shapes, dtype=np.int64)
    if not len(shapes):
        return tuple(0 for _ in range(shapes.shape[1])) if shapes.ndim == 2 else ()
    return tuple(int(v) for v in shapes.max(axis=0))


def host_to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A small host array on ``device`` without synchronising the current stream: staged in page-locked memory and
    copied asynchronously (a plain ``.to("cuda")`` from pageable memory waits for the work queued before it)."""
    t = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cpu":
        return t
    return t.pin_memory().to(device, non_blocking=True)


#: The device copies of recent shape tables and masks: the operators of one batch ask for the same ones again (a
#: speech batch's padded signals, then its spectra, share their time extents), and each would otherwise cost a copy
#: and a few launches, each a trip through Python and the GIL on the device stage's thread. Keyed by the table's
#: bytes, the device and the extent; the few newest are kept.
_CACHE: collections.OrderedDict = collections.OrderedDict()
_CACHE_SIZE = 16
_CACHE_LOCK = threading.Lock()


def _cached(key: tuple, make):
    """``make()``'s tensor, made once per key and per CUDA stream (a tensor made on one stream is only read on it:
    another pipeline's stream could read it before it is made, or after the allocator gave its memory away)."""
    key = key + (torch.cuda.current_stream().cuda_stream,)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    value = make()
    with _CACHE_LOCK:
        _CACHE[key] = value
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return value


def shape_table(shapes: np.ndarray, device: torch.device) -> torch.Tensor:
    """The ``(n, ndim)`` int64 shape table on ``device`` (one asynchronous copy, kept for the next operators)."""
    table = np.ascontiguousarray(np.asarray(shapes, dtype=np.int64).reshape(len(shapes), -1))
    if torch.device(device).type == "cpu":
        return torch.from_numpy(table)
    return _cached(("table", table.tobytes(), table.shape, str(device)), lambda: host_to_device(table, device))


def _axis_index(k: int, ndim: int, extent: int, device: torch.device) -> torch.Tensor:
    """``arange(extent)`` shaped to broadcast along axis ``k`` of an ``(n, *largest)`` tensor."""
    view = [1] * (ndim + 1)
    view[k + 1] = extent
    return torch.arange(extent, device=device).view(view)


def valid_mask(shapes: np.ndarray, extent: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """``(n, ...)`` bool, broadcastable to ``(n, *extent)``: True where an element of the padded form belongs to its
    sample. Axes on which every sample has the whole extent are left out (extent 1), so that a speech batch's mask is
    ``(n, 1, frames)``; kept for the next operators of the batch."""
    shapes = np.asarray(shapes, dtype=np.int64).reshape(len(shapes), -1)
    extent = tuple(int(e) for e in extent)

    def make() -> torch.Tensor:
        n, ndim = shapes.shape
        mask = torch.ones((n,) + (1,) * ndim, dtype=torch.bool, device=device)
        ragged_axes = [k for k in range(ndim) if (shapes[:, k] != extent[k]).any()]
        if ragged_axes:
            table = shape_table(shapes, device)
            for k in ragged_axes:
                mask = mask & (_axis_index(k, ndim, extent[k], device) < table[:, k].view((n,) + (1,) * ndim))
        return mask

    if torch.device(device).type == "cpu":
        return make()
    return _cached(("mask", shapes.tobytes(), shapes.shape, extent, str(device)), make)


def _element_index(offsets: np.ndarray, shapes: np.ndarray, extent: tuple[int, ...],
                   device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """For every element of the ``(n, *extent)`` padded form: its index in the packed buffer (sample ``i`` at
    ``offsets[i]``, row-major in its own shape), and whether it belongs to its sample at all."""
    n, ndim = shapes.shape
    strides = np.ones((n, ndim), np.int64)
    for k in range(ndim - 2, -1, -1):
        strides[:, k] = strides[:, k + 1] * shapes[:, k + 1]
    table = host_to_device(np.concatenate([np.asarray(offsets, np.int64)[:, None], shapes, strides], axis=1), device)
    col = (n,) + (1,) * ndim
    index = table[:, 0].view(col)
    mask = None
    for k in range(ndim):
        ax = _axis_index(k, ndim, extent[k], device)
        index = index + ax * table[:, 1 + ndim + k].view(col)
        inside = ax < table[:, 1 + k].view(col)
        mask = inside if mask is None else mask & inside
    return index, mask


#: Mean elements per sample from which 1-D samples are made padded by copies rather than by one gather.
_COPY_FROM = 4096


def packed_to_padded(flat: torch.Tensor, offsets: np.ndarray, shapes: np.ndarray, fill: float | None = 0.0,
                     extent: tuple[int, ...] | None = None) -> torch.Tensor:
    """The padded form of a packed batch: sample ``i`` (``prod(shapes[i])`` elements from ``flat[offsets[i]]``,
    row-major) in the leading corner of row ``i`` of an ``(n, *extent)`` tensor (default: the largest shape), the
    rest ``fill`` (None: left as it comes, for kernels that never read it). One gather on ``flat``'s device, or one
    multi-tensor copy for long signals."""
    shapes = np.asarray(shapes, dtype=np.int64)
    n, ndim = shapes.shape
    extent = largest(shapes) if extent is None else tuple(int(e) for e in extent)
    dev = flat.device
    if n == 0 or int(np.prod(extent)) == 0 or flat.numel() == 0:
        return flat.new_full((n, *extent), 0 if fill is None else fill)
    if ndim == 0:
        return flat[host_to_device(np.asarray(offsets, np.int64), dev)]
    size = int(np.prod(extent))
    if (shapes == np.asarray(extent, np.int64)).all() and _evenly_spaced(offsets, size):
        # equal shapes at equal distances (a packed dense batch: signals, a slice's patches): a strided view, no
        # gather (for volumes the gather's index alone was 8 bytes an element)
        strides = [int(v) for v in np.cumprod([1, *extent[:0:-1]])[::-1]]
        return flat.as_strided((n, *extent), (int(offsets[1] - offsets[0]) if n > 1 else size, *strides),
                               flat.storage_offset() + int(offsets[0]))
    if ndim == 1 and flat.is_cuda and flat.dtype in _ROWS_KERNEL_TYPES and not env.eager() \
            and triton_kernels() is not None:
        return _padded_rows(flat, offsets, shapes[:, 0], extent[0], fill)
    if ndim == 1 and int(shapes[:, 0].sum()) >= _COPY_FROM * n:
        # long signals (audio): one copy per signal, made by one multi-tensor call, rather than an index of the
        # padded form's size (8 bytes per element) for one gather
        out = flat.new_empty((n, extent[0])) if fill is None else flat.new_full((n, extent[0]), fill)
        starts, lengths = np.asarray(offsets, np.int64).tolist(), shapes[:, 0].tolist()
        rows = [(out[i, :k], flat[o: o + k]) for i, (o, k) in enumerate(zip(starts, lengths)) if k]
        if rows:
            torch._foreach_copy_([r[0] for r in rows], [r[1] for r in rows], non_blocking=True)
        return out
    if ndim == 1:
        # signals: the index of element t of row i is offsets[i] + min(t, length - 1) (a real element, whatever
        # lies past the signal), and the mask is the batch's cached one
        starts = np.minimum(np.asarray(offsets, np.int64), flat.numel() - 1)     # an empty sample may sit at the end
        table = host_to_device(np.stack([starts, np.maximum(shapes[:, 0] - 1, 0)], 1), dev)
        index = torch.minimum(torch.arange(extent[0], device=dev)[None, :], table[:, 1:]) + table[:, :1]
        out = flat[index]
        if fill is not None:
            out = torch.where(valid_mask(shapes, extent, dev), out, torch.full((), fill, dtype=out.dtype, device=dev))
        return out
    index, mask = _element_index(offsets, shapes, extent, dev)
    index = torch.where(mask, index, torch.zeros((), dtype=index.dtype, device=dev))
    out = flat[index]
    if fill is not None:
        out = torch.where(mask, out, torch.full((), fill, dtype=out.dtype, device=dev))
    return out


#: Sample types :func:`_padded_rows` copies (Triton has no bool pointers, and complex types are not samples).
_ROWS_KERNEL_TYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8, torch.int8,
                                torch.int16, torch.int32, torch.int64})


@functools.cache
def triton_kernels():
    """:mod:`sluice.kernels._triton_ragged`, or None without Triton (the torch paths run then): the ragged kernels
    of this module and of the operators (``normalize``, the ``random`` draws given an input)."""
    try:
        # imported here, on the first GPU batch: Triton is optional, and importing it takes a second
        from sluice.kernels import _triton_ragged
    except ImportError:
        return None
    return _triton_ragged


def row_table(starts: np.ndarray, lengths: np.ndarray, device: torch.device) -> torch.Tensor:
    """``(start, length)`` of each 1-D sample as int64 pairs on ``device``: the table the Triton row kernels read
    (:mod:`sluice.kernels._triton_ragged`, :mod:`sluice.kernels.audio._triton_audio`)."""
    return host_to_device(np.stack([np.asarray(starts, np.int64), np.asarray(lengths, np.int64)], 1), device)


def _padded_rows(flat: torch.Tensor, offsets: np.ndarray, lengths: np.ndarray, extent: int,
                 fill: float | None) -> torch.Tensor:
    """The padded form of 1-D samples on a GPU, by one Triton launch (:mod:`sluice.kernels._triton_ragged`)."""
    n = len(lengths)
    out = flat.new_empty((n, extent))
    table = row_table(offsets, lengths, flat.device)
    k = triton_kernels()
    # the fill as the sample type holds it (-3 in uint8 is 253, as torch's full gives): Triton converts in range only
    value = 0.0 if fill is None else float(torch.tensor(fill).to(flat.dtype))
    k.rows_kernel[(-(-extent // k.BLOCK), n)](flat, table, out, extent, value, FILL=fill is not None, BLOCK=k.BLOCK)
    return out


def _evenly_spaced(offsets: np.ndarray, size: int) -> bool:
    offsets = np.asarray(offsets, np.int64)
    if len(offsets) < 2:
        return True
    step = offsets[1] - offsets[0]
    return bool((np.diff(offsets) == step).all()) and step >= size


def padded_to_packed(padded: torch.Tensor, shapes: np.ndarray) -> torch.Tensor:
    """The samples of a padded batch packed back to back into one 1-D tensor (one scatter on its device)."""
    shapes = np.asarray(shapes, dtype=np.int64)
    n, ndim = shapes.shape
    sizes = sample_sizes(shapes)
    total = int(sizes.sum())
    if n == 0 or total == 0:
        return padded.new_empty(total)
    extent = tuple(padded.shape[1:])
    if all(tuple(s) == extent for s in shapes.tolist()):
        return padded.reshape(-1) if padded.is_contiguous() else padded.contiguous().reshape(-1)
    dev = padded.device
    index, mask = _element_index(packed_offsets(shapes), shapes, extent, dev)
    # padding goes to one spare element past the end, dropped after the scatter
    index = torch.where(mask, index, torch.full((), total, dtype=index.dtype, device=dev))
    out = padded.new_empty(total + 1)
    out.scatter_(0, index.reshape(-1), padded.reshape(-1))
    return out[:total]


def fill_padding(padded: torch.Tensor, shapes: np.ndarray, fill: float) -> torch.Tensor:
    """A copy of ``padded`` whose padding holds ``fill`` (the samples unchanged)."""
    mask = valid_mask(shapes, tuple(padded.shape[1:]), padded.device)
    return torch.where(mask, padded, torch.full((), fill, dtype=padded.dtype, device=padded.device))
