"""Triton kernels of ragged batches on a GPU, each ONE launch for the batch:

* :func:`rows_kernel` (:func:`sluice.pipeline.ragged.packed_to_padded` of 1-D samples): every sample's elements
  copied from where it lies in the packed buffer into its row of the padded form, the rest of the row ``fill``;
* :func:`normalize_rows_kernel` (``fn.normalize`` over the ragged last axis, a speech program's time axis): each
  row's mean and variance over its sample's length, and the normalised row;
* :func:`draw_kernel` (``fn.random.normal``, ``uniform`` and ``coin_flip`` given an input: one value per element):
  the counter-based generator of :mod:`sluice.kernels.counter_rng` (the same 32-bit hash in int64 arithmetic, so
  the same bits as its torch ops, which take about 60 launches over int64 temporaries of the batch's size for a
  normal value).

The torch equivalent of the first needed either an index as large as the padded form (eight bytes an element: 290 MB
for a batch of 64 utterances of up to 35 s) or one view per sample for a multi-tensor copy; each of those views is a
Python object whose making and freeing goes through the GIL, which the device stage's thread shares with the CPU
stage's. The second replaces a dozen launches and as many temporaries of the padded form's size.

Imported on first use, only where Triton and CUDA are present (importing Triton takes a second of start-up).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["rows_kernel", "normalize_rows_kernel", "draw_kernel", "BLOCK", "ROW_BLOCK", "DRAW_BLOCK"]

BLOCK = 2048
ROW_BLOCK = 512    # normalize_rows_kernel: one program a row, rows of a few thousand values
DRAW_BLOCK = 1024  # draw_kernel: elements a program


@triton.jit
def rows_kernel(flat_ptr, table_ptr, out_ptr, extent, fill, FILL: tl.constexpr, BLOCK: tl.constexpr):
    """Row ``i`` of the ``(n, extent)`` output: ``flat[start_i + t]`` for ``t < length_i``, else ``fill`` (with
    ``FILL``; 0 otherwise). ``table`` holds ``(start_i, length_i)`` as int64 pairs."""
    i = tl.program_id(1)
    t = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    start = tl.load(table_ptr + 2 * i)
    length = tl.load(table_ptr + 2 * i + 1)
    inside = t < length
    x = tl.load(flat_ptr + start + t, mask=inside, other=0)
    if FILL:
        x = tl.where(inside, x, fill)
    tl.store(out_ptr + i.to(tl.int64) * extent + t, x.to(out_ptr.dtype.element_ty), mask=t < extent)


@triton.jit
def normalize_rows_kernel(x_ptr, len_ptr, out_ptr, rows, extent, ddof, epsilon, scale, shift,
                          BLOCK: tl.constexpr):
    """Row ``r`` of sample ``i = r // rows`` of a padded batch ``(n * rows, extent)``: its first ``len_ptr[i]``
    values made ``(x - mean) / sqrt(var + epsilon) * scale + shift`` (``var`` over ``count - ddof``, 0 when no
    degree of freedom is left; a zero ``var + epsilon`` gives ``shift``), the rest of the row ``shift``.
    :func:`sluice.ops.tensor.normalize.normalize_padded`'s arithmetic, the sums taken block by block."""
    r = tl.program_id(0).to(tl.int64)
    count = tl.load(len_ptr + r // rows)
    row = x_ptr + r * extent
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, extent, BLOCK):
        t = start + tl.arange(0, BLOCK)
        total += tl.load(row + t, mask=t < count, other=0.0).to(tl.float32)
    n = tl.maximum(count, 1).to(tl.float32)
    mean = tl.sum(total, axis=0) / n
    squares = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, extent, BLOCK):
        t = start + tl.arange(0, BLOCK)
        d = tl.load(row + t, mask=t < count, other=0.0).to(tl.float32) - mean
        squares += tl.where(t < count, d * d, 0.0)
    dof = tl.maximum(count - ddof, 1).to(tl.float32)
    var = tl.where(count > ddof, tl.sum(squares, axis=0) / dof, 0.0)
    v = var + epsilon
    inv = tl.where(v > 0, 1.0 / tl.sqrt(tl.maximum(v, 1e-38)), 0.0) * scale
    out = out_ptr + r * extent
    for start in range(0, extent, BLOCK):
        t = start + tl.arange(0, BLOCK)
        inside = t < count
        x = tl.load(row + t, mask=inside, other=0.0).to(tl.float32)
        tl.store(out + t, tl.where(inside, (x - mean) * inv + shift, shift), mask=t < extent)


@triton.jit
def _mix(x):
    """counter_rng.mix32 on int64 holding 32-bit values (the products stay below 2**63)."""
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & 0xFFFFFFFF
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & 0xFFFFFFFF
    return x ^ (x >> 15)


@triton.jit
def draw_kernel(table_ptr, params_ptr, out_ptr, KIND: tl.constexpr, BLOCK: tl.constexpr):
    """Sample ``i = program_id(1)``, elements ``t`` of block ``program_id(0)``: the table row ``(start, size, key1,
    stream0, stream1, threshold)`` (int64; ``streamS`` is ``(key2 + S * 0x9E3779B9) & 0xFFFFFFFF``) and the float32
    params ``(p0, p1)``. KIND 0: ``p0 + p1 * sqrt(-2 log u1) cos(2 pi u2)`` (u1 in (0, 1] from stream 0, u2 in
    [0, 1) from stream 1); 1: ``p0 + p1 * u`` (stream 0); 2: ``top24 < threshold`` (stream 0; the threshold is
    ``ceil(p * 2**24)``, so that the comparison is ``u < p`` exactly)."""
    i = tl.program_id(1)
    t = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    row = table_ptr + i * 6
    start = tl.load(row)
    size = tl.load(row + 1)
    key1 = tl.load(row + 2)
    inside = t < size
    base = _mix((t & 0xFFFFFFFF) ^ key1)
    top0 = _mix(base ^ tl.load(row + 3)) >> 8
    if KIND == 2:
        value = top0 < tl.load(row + 5)
    else:
        p0 = tl.load(params_ptr + i * 2)
        p1 = tl.load(params_ptr + i * 2 + 1)
        if KIND == 0:
            u1 = (top0 + 1).to(tl.float32) * 5.9604644775390625e-08
            u2 = (_mix(base ^ tl.load(row + 4)) >> 8).to(tl.float32) * 5.9604644775390625e-08
            z = tl.sqrt(-2.0 * tl.log(u1)) * tl.cos(6.283185307179586 * u2)
            value = p0 + p1 * z
        else:
            value = p0 + p1 * (top0.to(tl.float32) * 5.9604644775390625e-08)
    tl.store(out_ptr + start + t, value.to(out_ptr.dtype.element_ty), mask=inside)
