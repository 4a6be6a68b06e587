"""Triton kernel of ``fn.preemphasis_filter`` on a GPU (:mod:`sluice.ops.audio.preemphasis`): a batch of 1-D
signals read where they lie (the packed form, at any offsets, or the rows of a padded one) and filtered into the
rows of the padded output, in ONE launch for the batch.

The torch path made the padded form first and then filtered it with a shifted copy: about ten launches and as many
temporaries, each a trip through the GIL for the device stage's thread, which shares it with the CPU stage's.

Imported on first use, only where Triton and CUDA are present (importing Triton takes a second of start-up).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["preemphasis_kernel", "BLOCK", "BORDERS"]

BLOCK = 2048
BORDERS = {"zero": 0, "clamp": 1, "reflect": 2}


@triton.jit
def preemphasis_kernel(x_ptr, table_ptr, coeff_ptr, out_ptr, extent, coeff, PER_SAMPLE: tl.constexpr,
                       BORDER: tl.constexpr, BLOCK: tl.constexpr):
    """Row ``i`` of the ``(n, extent)`` float32 output: ``y[t] = x[t] - c * x[t - 1]`` for ``t < length_i`` with
    ``x[-1]`` the border value (0, ``x[0]``, or ``x[1]`` when the signal has two samples or more), 0 beyond.
    ``table`` holds ``(start_i, length_i)`` as int64 pairs; ``c`` is ``coeff``, or ``coeff_ptr[i]``."""
    i = tl.program_id(1)
    t = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    start = tl.load(table_ptr + 2 * i)
    length = tl.load(table_ptr + 2 * i + 1)
    inside = t < length
    base = x_ptr + start
    x = tl.load(base + t, mask=inside, other=0).to(tl.float32)
    prev = tl.load(base + t - 1, mask=inside & (t > 0), other=0).to(tl.float32)
    if BORDER == 1:
        prev = tl.where(t == 0, x, prev)
    if BORDER == 2:
        two = (t * 0 + length) > 1          # as a block: a scalar mask is not a load's mask everywhere
        second = tl.load(base + t + 1, mask=(t == 0) & two, other=0).to(tl.float32)
        prev = tl.where(t == 0, tl.where(two, second, x), prev)
    if PER_SAMPLE:
        c = tl.load(coeff_ptr + i)
    else:
        c = coeff
    y = tl.where(inside, x - c * prev, 0.0)
    tl.store(out_ptr + i.to(tl.int64) * extent + t, y, mask=t < extent)
