"""Triton kernels of :mod:`sluice.kernels.batched`: a ragged batch resampled in two launches.

Pass 1 (:func:`_hpass`) filters each needed source row horizontally into a float32 scratch buffer
``[N, RMAX, OWMAX, C]``; pass 2 (:func:`_vpass`) filters vertically and applies the epilogue (mirror,
``(x - mean) * mul + add``, channel padding, any output layout, rounding cast). Per-sample geometry comes from
two small tables (``ip``: int64, ``fp``: float64), so one launch covers the whole batch whatever the sizes.
The filter arithmetic mirrors :func:`sluice.kernels.resample.filter_table` (centres in float64).

Imported only when Triton and CUDA are present.
"""

from __future__ import annotations

import triton
import triton.language as tl

NI = 16  # int64 columns of the per-sample table
NF = 4   # float64 columns: y0, x0, y1, x1
# ip columns: SRC_OFF, IN_H, IN_W, OUT_H, OUT_W, ROW_LO, ROWS, TAPS_X, TAPS_Y, MIRROR, OUT_OFF, STRIDE_C, STRIDE_Y,
# STRIDE_X (0..13)


@triton.jit
def _filt(d, FID: tl.constexpr):
    a = tl.abs(d)
    if FID == 0:
        w = tl.where((d > -0.5) & (d <= 0.5), 1.0, 0.0)
    elif FID == 1:
        w = tl.maximum(1.0 - a, 0.0)
    elif FID == 2:
        w = tl.where(a < 1.0, (1.5 * a - 2.5) * a * a + 1.0,
                     tl.where(a < 2.0, (((a - 5.0) * a + 8.0) * a - 4.0) * -0.5, 0.0))
    elif FID == 3:
        small = a < 1e-8
        px = tl.where(small, 1.0, 3.141592653589793 * d)
        w = tl.where(small, 1.0, 3.0 * tl.sin(px) * tl.sin(px / 3.0) / (px * px))
        w = tl.where(a < 3.0, w, 0.0)
    else:
        w = tl.maximum(tl.exp(-2.0 * a * a) - 0.011108996538242306, 0.0)
    return w


@triton.jit
def _weight(d, shrink, FMIN: tl.constexpr, FMAG: tl.constexpr):
    if FMIN == FMAG:
        w = _filt(d, FMIN)
    else:
        w = tl.where(shrink, _filt(d, FMIN), _filt(d, FMAG))
    return w


@triton.jit
def _axis(lo, hi, out_n, o, FMIN: tl.constexpr, FMAG: tl.constexpr, RMIN: tl.constexpr, RMAG: tl.constexpr,
          AA: tl.constexpr):
    """Centre(s), filter scale, shrink flag and tap range of output coordinate(s) ``o`` on one axis."""
    scale = (hi - lo) / out_n.to(tl.float64)
    centre = lo + (o.to(tl.float64) + 0.5) * scale
    ascale = tl.abs(scale)
    shrink = ascale > 1.0
    if AA:
        fscale = tl.where(shrink, ascale, 1.0)
    else:
        fscale = ascale * 0.0 + 1.0
    radius = tl.where(shrink, RMIN, RMAG) * fscale
    start = tl.floor(centre - radius + 0.5)
    xmin = start.to(tl.int64)
    xmax = tl.floor(centre + radius + 0.5).to(tl.int64)
    inv = (1.0 / fscale).to(tl.float32)
    rel0 = ((start + 0.5 - centre) * inv).to(tl.float32)  # filter argument of the first tap; then + k * inv
    return centre, inv, rel0, shrink, xmin, xmax


@triton.jit
def _geometry(ip, fp, n):
    """Sample ``n``'s source offset, sizes, needed rows, tap counts and source region."""
    row = ip + n * 16
    src_off = tl.load(row + 0)
    H = tl.load(row + 1)
    W = tl.load(row + 2)
    OH = tl.load(row + 3)
    OW = tl.load(row + 4)
    row_lo = tl.load(row + 5)
    rows = tl.load(row + 6)
    taps_x = tl.load(row + 7)
    taps_y = tl.load(row + 8)
    f = fp + n * 4
    y0, x0, y1, x1 = tl.load(f), tl.load(f + 1), tl.load(f + 2), tl.load(f + 3)
    return src_off, H, W, OH, OW, row_lo, rows, taps_x, taps_y, y0, x0, y1, x1


# The batch's largest extents change from batch to batch: not specialised on (each new value divisible by 16, or
# not, would compile the kernel again, a second's stall inside a running pipeline).
@triton.jit(do_not_specialize=["RMAX", "OWMAX"])
def _hpass(src, tmp, ip, fp, RMAX, OWMAX, C: tl.constexpr, CP: tl.constexpr,
           FMIN: tl.constexpr, FMAG: tl.constexpr, RMIN: tl.constexpr, RMAG: tl.constexpr, AA: tl.constexpr,
           BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # int64 offsets: scratch and outputs can pass 2**31 elements
    n = pid // RMAX
    r = pid - n * RMAX
    ox = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    c = tl.arange(0, CP)
    src_off, H, W, OH, OW, row_lo, rows, taps, taps_y, y0, x0, y1, x1 = _geometry(ip, fp, n)
    mask = (ox < OW) & (ox * 0 + r < rows)  # vector-only masks (scalar & vector trips the interpreter)
    cmask = c < C
    y = tl.minimum(row_lo + r, H - 1)
    base = src + src_off + y * W * C
    centre, inv, rel0, shrink, xmin, xmax = _axis(x0, x1, OW, ox, FMIN, FMAG, RMIN, RMAG, AA)
    acc = tl.zeros((BLOCK, CP), dtype=tl.float32)
    wsum = tl.zeros((BLOCK,), dtype=tl.float32)
    for k in range(0, taps):
        x = xmin + k
        valid = mask & (x >= 0) & (x < W) & (x < xmax)
        w = tl.where(valid, _weight(rel0 + k * inv, shrink, FMIN, FMAG), 0.0)
        wsum += w
        v = tl.load(base + x[:, None] * C + c[None, :], mask=valid[:, None] & cmask[None, :], other=0)
        acc += w[:, None] * v.to(tl.float32)
    xn = tl.minimum(tl.maximum(tl.floor(centre).to(tl.int64), 0), W - 1)
    empty = mask & (wsum == 0.0)
    vn = tl.load(base + xn[:, None] * C + c[None, :], mask=empty[:, None] & cmask[None, :], other=0)
    res = tl.where(empty[:, None], vn.to(tl.float32), acc / tl.where(empty, 1.0, wsum)[:, None])
    dst = tmp + ((n * RMAX + r) * OWMAX + ox[:, None]) * C + c[None, :]
    tl.store(dst, res, mask=mask[:, None] & cmask[None, :])


@triton.jit(do_not_specialize=["RMAX", "OWMAX", "OHMAX"])
def _vpass(tmp, out, ip, fp, nrm, RMAX, OWMAX, OHMAX, C: tl.constexpr, CP: tl.constexpr, COUT: tl.constexpr,
           FMIN: tl.constexpr, FMAG: tl.constexpr, RMIN: tl.constexpr, RMAG: tl.constexpr, AA: tl.constexpr,
           NORM: tl.constexpr, IS_INT: tl.constexpr, LO: tl.constexpr, HI: tl.constexpr, MID_INT: tl.constexpr,
           MID_LO: tl.constexpr, MID_HI: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # int64 offsets: scratch and outputs can pass 2**31 elements
    n = pid // OHMAX
    oy = pid - n * OHMAX
    ox = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    c = tl.arange(0, CP)
    src_off, H, W, OH, OW, row_lo, rows, taps_x, taps, y0, x0, y1, x1 = _geometry(ip, fp, n)
    row = ip + n * 16
    mirror = tl.load(row + 9)
    out_off = tl.load(row + 10)
    sc = tl.load(row + 11)
    sy = tl.load(row + 12)
    sx = tl.load(row + 13)
    mask = (ox < OW) & (ox * 0 + oy < OH)
    cmask = c < C
    centre, inv, rel0, shrink, ymin, ymax = _axis(y0, y1, OH, oy, FMIN, FMAG, RMIN, RMAG, AA)
    acc = tl.zeros((BLOCK, CP), dtype=tl.float32)
    wsum = (y0 * 0.0).to(tl.float32)
    base = tmp + (n * RMAX) * OWMAX * C + ox[:, None] * C + c[None, :]
    lmask = mask[:, None] & cmask[None, :]
    for k in range(0, taps):
        y = ymin + k
        valid = (y >= 0) & (y < H) & (y < ymax) & (y >= row_lo) & (y < row_lo + rows)
        w = tl.where(valid, _weight(rel0 + k * inv, shrink, FMIN, FMAG), 0.0)
        wsum += w
        vvec = (ox * 0 + valid.to(tl.int32)) > 0
        v = tl.load(base + (y - row_lo) * OWMAX * C, mask=lmask & vvec[:, None], other=0.0)
        acc += w * v
    yn = tl.minimum(tl.maximum(tl.floor(centre).to(tl.int64), 0), H - 1)
    rn = tl.minimum(tl.maximum(yn - row_lo, 0), rows - 1)
    empty = wsum == 0.0
    evec = ((ox * 0 + empty.to(tl.int32)) > 0)[:, None]
    vn = tl.load(base + rn * OWMAX * C, mask=lmask & evec, other=0.0)
    v = tl.where(evec, vn, acc / tl.where(empty, 1.0, wsum))
    if MID_INT:  # the value an unfused integer resize would have stored
        v = tl.where(v >= 0, tl.floor(v + 0.5), -tl.floor(0.5 - v))
        v = tl.minimum(tl.maximum(v, MID_LO), MID_HI)
    if NORM:
        nmask = c < COUT
        mean = tl.load(nrm + (n * COUT + c) * 3 + 0, mask=nmask, other=0.0)
        mul = tl.load(nrm + (n * COUT + c) * 3 + 1, mask=nmask, other=0.0)
        add = tl.load(nrm + (n * COUT + c) * 3 + 2, mask=nmask, other=0.0)
        v = (v - mean[None, :]) * mul[None, :] + add[None, :]
    if IS_INT:
        v = tl.where(v >= 0, tl.floor(v + 0.5), -tl.floor(0.5 - v))
        v = tl.minimum(tl.maximum(v, LO), HI)
    oxw = tl.where(mirror != 0, OW - 1 - ox, ox)
    dst = out + out_off + c[None, :] * sc + oy * sy + oxw[:, None] * sx
    tl.store(dst, v.to(out.dtype.element_ty), mask=mask[:, None] & (c < COUT)[None, :])


def launch(flat_src, tmp, out, ip, fp, nrm, *, normalize: bool, n: int, rmax: int, owmax: int, ohmax: int, c: int,
           cout: int,
           fmin: int, fmag: int, rmin: float, rmag: float, antialias: bool, is_int: bool, lo: float, hi: float,
           mid: tuple[float, float] | None = None, block: int | None = None) -> None:
    """Run both passes on the current CUDA stream. ``antialias`` must already be False for a nearest min filter."""
    cp = triton.next_power_of_2(max(c, cout))
    if block is None:  # one program per output row up to 256 wide (224 -> 256: 88 % of lanes busy)
        block = max(32, min(256, triton.next_power_of_2(owmax)))
    grid1 = (n * rmax, triton.cdiv(owmax, block))
    _hpass[grid1](flat_src, tmp, ip, fp, rmax, owmax, C=c, CP=cp, FMIN=fmin, FMAG=fmag, RMIN=rmin, RMAG=rmag,
                  AA=antialias, BLOCK=block)
    grid2 = (n * ohmax, triton.cdiv(owmax, block))
    _vpass[grid2](tmp, out, ip, fp, nrm, rmax, owmax, ohmax, C=c, CP=cp, COUT=cout, FMIN=fmin, FMAG=fmag,
                  RMIN=rmin, RMAG=rmag, AA=antialias, NORM=normalize, IS_INT=is_int, LO=lo, HI=hi,
                  MID_INT=mid is not None, MID_LO=mid[0] if mid else 0.0, MID_HI=mid[1] if mid else 0.0,
                  BLOCK=block)
