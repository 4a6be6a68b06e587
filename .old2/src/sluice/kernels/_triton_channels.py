"""Triton kernels of the colour operators and of ``fn.gaussian_blur`` (:mod:`sluice.ops.image._color_affine`,
:mod:`sluice.ops.image._blur_triton`): a per-sample affine map of the channels, and a separable convolution along
one axis. Both round integer outputs to nearest, ties to even, and clamp.

Imported on first use, only where Triton and CUDA are present (importing Triton takes a second of start-up).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["affine_kernel", "blur_axis_kernel", "round_half_even"]


@triton.jit
def round_half_even(v):
    """Round to nearest, ties to even (DALI's rounding of integer outputs)."""
    r = tl.floor(v + 0.5)
    tie = (r - v) == 0.5
    odd = (r - 2.0 * tl.floor(r * 0.5)) != 0.0
    return tl.where(tie & odd, r - 1.0, r)


@triton.jit
def affine_kernel(x_ptr, m_ptr, o_ptr, y_ptr, P, lo, hi, C_IN: tl.constexpr, C_OUT: tl.constexpr,
                  OUT_INT: tl.constexpr, BLOCK: tl.constexpr):
    n = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < P
    x_base = x_ptr + n.to(tl.int64) * P * C_IN
    y_base = y_ptr + n.to(tl.int64) * P * C_OUT
    m_base = m_ptr + n * (C_OUT * C_IN)
    o_base = o_ptr + n * C_OUT
    x0 = tl.load(x_base + offs * C_IN, mask=mask, other=0).to(tl.float32)
    if C_IN == 3:
        x1 = tl.load(x_base + offs * C_IN + 1, mask=mask, other=0).to(tl.float32)
        x2 = tl.load(x_base + offs * C_IN + 2, mask=mask, other=0).to(tl.float32)
    for co in tl.static_range(C_OUT):
        acc = tl.load(o_base + co) + tl.load(m_base + co * C_IN) * x0
        if C_IN == 3:
            acc += tl.load(m_base + co * C_IN + 1) * x1
            acc += tl.load(m_base + co * C_IN + 2) * x2
        if OUT_INT:
            acc = tl.minimum(tl.maximum(round_half_even(acc), lo), hi)
        tl.store(y_base + offs * C_OUT + co, acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def blur_axis_kernel(x_ptr, w_ptr, y_ptr, total, L, inner, period, K, R, lo, hi, OUT_INT: tl.constexpr,
                     BLOCK: tl.constexpr):
    n = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    base = n.to(tl.int64) * total
    li = (offs // inner) % L
    row = offs - li * inner  # offset of element l = 0 on this line
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in range(0, K):
        j = li + k - R
        j = ((j % period) + period) % period
        j = tl.where(j >= L, period - j, j)  # reflect-101; a 1-long axis has period 1, so j is 0
        v = tl.load(x_ptr + base + row + j * inner, mask=mask, other=0).to(tl.float32)
        acc += tl.load(w_ptr + n * K + k) * v
    if OUT_INT:
        acc = tl.minimum(tl.maximum(round_half_even(acc), lo), hi)
    tl.store(y_ptr + base + offs, acc.to(y_ptr.dtype.element_ty), mask=mask)
