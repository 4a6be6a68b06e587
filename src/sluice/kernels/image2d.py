"""Whole-batch image kernels over the padded form of a ragged batch: borders, separable filters, window reductions
and resampling at arbitrary coordinates, each sample read within its own extent.

A batch is one ``(n, ...)`` tensor whose row ``i`` holds sample ``i`` in its leading corner
(:meth:`sluice.pipeline.batch.Batch.padded`); every function takes the samples' extents as an ``(n,)`` (or
``(n, 2)``) int64 tensor, so that a border reflects or repeats at the sample's own edge, never at the padding. Each
is a bounded number of torch launches for the whole batch (a loop over filter taps, never over samples) and runs on
any device: the same code is the GPU kernel and, on CPU tensors, its test.

Border modes follow OpenCV's names and rules: ``constant`` (outside reads a fill value), ``replicate``
(``aaa|abcd|ddd``), ``reflect`` (``cba|abcd|dcb``), ``reflect_101`` (``dcb|abcd|cba``), ``wrap`` (``bcd|abcd|abc``).
Coordinates given to :func:`sample2d` are OpenCV's: pixel ``i`` is centred at ``i``.

Example::

    >>> x = torch.arange(6.0).view(1, 1, 6)                      # one sample of 4 elements, padded to 6
    >>> idx, ok = border_map(torch.arange(-2, 8).view(1, -1), torch.tensor([[4]]), "reflect_101")
    >>> idx.tolist()
    [[2, 1, 0, 1, 2, 3, 2, 1, 0, 1]]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["BORDER_MODES", "border_map", "gather_axis", "pad_axis", "conv_axis", "window_reduce", "window_median",
           "sample2d", "extent_mask"]

BORDER_MODES = ("constant", "replicate", "reflect", "reflect_101", "wrap")


def check_border(mode: str, op: str) -> str:
    """``mode`` if it is one of :data:`BORDER_MODES`, else a ValueError naming ``op``."""
    if mode not in BORDER_MODES:
        raise ValueError(f"{op}: invalid border_mode ({mode!r}). Supported values are "
                         f"{', '.join(repr(m) for m in BORDER_MODES)}.")
    return mode


def border_map(pos: torch.Tensor, length: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """For integer positions ``pos`` on an axis of ``length`` elements (broadcastable int64 tensors): the index each
    reads under border ``mode`` and whether it lies inside (``constant`` reads outside positions as a fill value:
    their index is clamped and ``inside`` is False; every other mode is always inside). Empty axes read index 0."""
    length = length.clamp_min(1)
    inside = (pos >= 0) & (pos < length)
    if mode == "constant" or mode == "replicate":
        idx = torch.minimum(pos.clamp_min(0), length - 1)
        return idx, inside if mode == "constant" else torch.ones_like(inside)
    if mode == "wrap":
        return torch.remainder(pos, length), torch.ones_like(inside)
    if mode == "reflect":
        q = torch.remainder(pos, 2 * length)
        return torch.where(q < length, q, 2 * length - 1 - q), torch.ones_like(inside)
    if mode == "reflect_101":
        period = (2 * (length - 1)).clamp_min(1)
        q = torch.remainder(pos, period)
        idx = torch.where(q < length, q, period - q)
        return torch.where(length == 1, torch.zeros_like(idx), idx), torch.ones_like(inside)
    raise ValueError(f"unknown border mode {mode!r}; use one of {BORDER_MODES}")


def _along(t: torch.Tensor, axis: int, ndim: int) -> torch.Tensor:
    """An ``(n, L)`` per-sample table shaped to broadcast along ``axis`` of an ``ndim``-D batch tensor."""
    shape = [1] * ndim
    shape[0], shape[axis] = t.shape[0], t.shape[1]
    return t.reshape(shape)


def gather_axis(x: torch.Tensor, axis: int, index: torch.Tensor) -> torch.Tensor:
    """``x[b, ..., index[b, j], ...]`` along ``axis`` (>= 1) for every sample ``b``: one gather."""
    shape = list(x.shape)
    shape[axis] = index.shape[1]
    return torch.gather(x, axis, _along(index, axis, x.dim()).expand(shape))


def pad_axis(x: torch.Tensor, axis: int, lengths: torch.Tensor, before: int, after: int, mode: str,
             fill: float | torch.Tensor = 0.0) -> torch.Tensor:
    """``x`` extended along ``axis`` by ``before`` and ``after`` elements, each sample bordered at its own length
    (``lengths``, ``(n,)``): position ``p`` of the result is position ``p - before`` of the sample under ``mode``.
    ``fill`` (a number, or a tensor broadcasting to the result) is what ``constant`` reads outside."""
    size = x.shape[axis]
    pos = torch.arange(-before, size + after, device=x.device).unsqueeze(0)
    idx, inside = border_map(pos, lengths.view(-1, 1), mode)
    out = gather_axis(x, axis, idx)
    if mode == "constant":
        out = torch.where(_along(inside, axis, x.dim()), out,
                          torch.as_tensor(fill, dtype=out.dtype, device=out.device))
    return out


def conv_axis(x: torch.Tensor, axis: int, weights: torch.Tensor, lengths: torch.Tensor,
              mode: str = "reflect_101") -> torch.Tensor:
    """Correlate float ``x`` along ``axis`` with per-sample odd-length windows ``weights`` (``(n, K)``, centred;
    a shorter window is zero-padded on both sides), bordered at each sample's length. One gather plus one
    multiply-add per tap."""
    k = weights.shape[1]
    r = k // 2
    xp = pad_axis(x, axis, lengths, r, r, mode)
    size = x.shape[axis]
    w = weights.to(device=x.device, dtype=x.dtype)
    out = None
    for t in range(k):
        part = xp.narrow(axis, t, size) * _along(w[:, t:t + 1], axis, x.dim())
        out = part if out is None else out + part
    return out


def extent_mask(shape: Sequence[int], extents: torch.Tensor, axes: Sequence[int]) -> torch.Tensor:
    """Bool ``(n, ...)`` mask (broadcasting over the other axes) of the elements inside each sample's extent on
    ``axes``; ``extents`` is ``(n, len(axes))``."""
    n, ndim = shape[0], len(shape)
    mask = torch.ones((n,) + (1,) * (ndim - 1), dtype=torch.bool, device=extents.device)
    for j, axis in enumerate(axes):
        view = [1] * ndim
        view[axis] = shape[axis]
        pos = torch.arange(shape[axis], device=extents.device).view(view)
        mask = mask & (pos < extents[:, j].view((n,) + (1,) * (ndim - 1)))
    return mask


def window_reduce(x: torch.Tensor, axes: tuple[int, int], extents: torch.Tensor, sizes: torch.Tensor,
                  anchors: torch.Tensor, op: str, mode: str, fill: float | None = None) -> torch.Tensor:
    """The maximum (``op="max"``) or minimum (``"min"``) of every rectangular window: OpenCV's ``dilate`` and
    ``erode`` with a rectangular structuring element. ``axes`` are the (H, W) axes, ``extents`` ``(n, 2)`` each
    sample's (H, W), ``sizes`` ``(n, 2)`` each sample's window (h, w) and ``anchors`` ``(n, 2)`` its anchor (y, x)
    within the window: output ``(y, x)`` covers rows ``y - ay .. y - ay + h - 1``. Outside the sample, ``mode``;
    ``constant`` with ``fill=None`` ignores the outside (OpenCV's default border value for morphology). Separable:
    rows, then columns; one masked gather per tap. ``sizes`` and ``anchors`` are host (CPU) tensors: they decide
    the number of taps without waiting for the device."""
    big = torch.finfo(x.dtype).max if x.dtype.is_floating_point else torch.iinfo(x.dtype).max
    neutral = -big if op == "max" else big
    reduce = torch.maximum if op == "max" else torch.minimum
    out = x
    for j, axis in enumerate(axes):
        kmax = int(sizes[:, j].max())
        size = out.shape[axis]
        amax = int(anchors[:, j].max())
        before, after = amax, kmax
        padded = pad_axis(out, axis, extents[:, j], before, after, mode, neutral if fill is None else fill)
        acc = None
        for t in range(kmax):
            # tap t of sample b reads offset t - anchor[b]: position y + t - a + before in the padded axis
            start = (before - anchors[:, j] + t).to(x.device, non_blocking=True)
            part = gather_axis(padded, axis, start.view(-1, 1) + torch.arange(size, device=x.device).view(1, -1))
            use = _along((sizes[:, j] > t).view(-1, 1).to(x.device, non_blocking=True), axis, x.dim())
            part = torch.where(use, part, torch.as_tensor(neutral, dtype=out.dtype, device=out.device))
            acc = part if acc is None else reduce(acc, part)
        out = acc
    return out


def window_median(x: torch.Tensor, axes: tuple[int, int], extents: torch.Tensor, sizes: torch.Tensor,
                  mode: str = "replicate") -> torch.Tensor:
    """The median of every centred window (odd sizes ``(n, 2)`` as (h, w)), bordered by ``mode`` (OpenCV's
    ``medianBlur`` repeats the edge). All ``kh * kw`` taps are gathered and sorted at once; a sample whose window
    is smaller than the batch's largest fills the taps it does not use with alternately the lowest and the highest
    value (a tap and its mirror
    image about the centre get one each), which leaves the middle of the sorted taps, the median, unchanged.
    ``sizes`` is a host (CPU) tensor."""
    kh, kw = int(sizes[:, 0].max()), int(sizes[:, 1].max())
    rh, rw = kh // 2, kw // 2
    ay, ax = axes
    padded = pad_axis(pad_axis(x, ay, extents[:, 0], rh, rh, mode), ax, extents[:, 1], rw, rw, mode)
    h, w = x.shape[ay], x.shape[ax]
    nd = x.dim()
    low = torch.finfo(x.dtype).min if x.dtype.is_floating_point else torch.iinfo(x.dtype).min
    high = torch.finfo(x.dtype).max if x.dtype.is_floating_point else torch.iinfo(x.dtype).max
    taps = []
    for dy in range(-rh, rh + 1):
        for dx in range(-rw, rw + 1):
            part = padded.narrow(ay, rh + dy, h).narrow(ax, rw + dx, w)
            used = (2 * abs(dy) < sizes[:, 0]) & (2 * abs(dx) < sizes[:, 1])
            if not bool(used.all()):
                # taps (dy, dx) and (-dy, -dx) are unused together: one gets the lowest value, the other the highest
                filler = torch.as_tensor(low if (dy, dx) > (0, 0) else high, dtype=x.dtype, device=x.device)
                part = torch.where(used.view((-1,) + (1,) * (nd - 1)).to(x.device, non_blocking=True), part, filler)
            taps.append(part)
    stacked = torch.stack(taps, dim=-1)
    return stacked.sort(dim=-1).values.select(-1, len(taps) // 2)


_CUBIC_A = -0.75  # OpenCV's bicubic


def _cubic_weights(f: torch.Tensor) -> list[torch.Tensor]:
    """OpenCV's four bicubic weights for fractional offset ``f`` (taps at -1, 0, 1, 2)."""
    a = _CUBIC_A
    w0 = ((a * (f + 1) - 5 * a) * (f + 1) + 8 * a) * (f + 1) - 4 * a
    w1 = ((a + 2) * f - (a + 3)) * f * f + 1
    w2 = ((a + 2) * (1 - f) - (a + 3)) * (1 - f) * (1 - f) + 1
    return [w0, w1, w2, 1.0 - w0 - w1 - w2]


def sample2d(x: torch.Tensor, extents: torch.Tensor, px: torch.Tensor, py: torch.Tensor, interp: str = "linear",
             mode: str = "constant", fill: float | Sequence[float] | torch.Tensor = 0.0) -> torch.Tensor:
    """Resample a channel-first float batch ``x`` (``(n, C, H, W)``, sample ``b`` in its leading ``extents[b]``
    = (h, w)) at OpenCV coordinates ``px``, ``py`` (``(n, Ho, Wo)``; pixel ``i`` centred at ``i``): ``nn``
    (the nearest pixel), ``linear`` (2 x 2 taps) or ``cubic`` (4 x 4 taps, OpenCV's a = -0.75). A tap
    outside the sample reads through border ``mode``; ``constant`` reads ``fill`` (one value or one per channel).
    ``nn`` rounds halves to even, as OpenCV's ``saturate_cast`` does.
    Returns ``(n, C, Ho, Wo)`` float."""
    n, c, hmax, wmax = x.shape
    flat = x.reshape(n, c, hmax * wmax)
    ho, wo = px.shape[1], px.shape[2]
    hlen = extents[:, 0].view(n, 1, 1)
    wlen = extents[:, 1].view(n, 1, 1)
    fill_t = torch.as_tensor(fill, dtype=x.dtype, device=x.device).reshape(-1)
    fill_t = fill_t.expand(c).reshape(1, c, 1) if fill_t.numel() == 1 else fill_t.reshape(1, c, 1)

    def tap(iy: torch.Tensor, ix: torch.Tensor) -> torch.Tensor:
        yy, oky = border_map(iy, hlen, mode)
        xx, okx = border_map(ix, wlen, mode)
        index = (yy * wmax + xx).reshape(n, 1, ho * wo).expand(n, c, ho * wo)
        vals = torch.gather(flat, 2, index)
        if mode == "constant":
            vals = torch.where((oky & okx).reshape(n, 1, ho * wo), vals, fill_t)
        return vals

    if interp == "nn":
        out = tap(torch.round(py).long(), torch.round(px).long())
        return out.reshape(n, c, ho, wo)
    fy0, fx0 = torch.floor(py), torch.floor(px)
    fy, fx = (py - fy0).reshape(n, 1, ho * wo), (px - fx0).reshape(n, 1, ho * wo)
    y0, x0 = fy0.long(), fx0.long()
    if interp == "linear":
        wy, wx, offsets = [1 - fy, fy], [1 - fx, fx], (0, 1)
    elif interp == "cubic":
        wy, wx, offsets = _cubic_weights(fy), _cubic_weights(fx), (-1, 0, 1, 2)
    else:
        raise ValueError(f"unknown interpolation {interp!r}; use 'nn', 'linear' or 'cubic'")
    out = None
    for i, oy in enumerate(offsets):
        row = None
        for j, ox in enumerate(offsets):
            part = tap(y0 + oy, x0 + ox) * wx[j]
            row = part if row is None else row + part
        row = row * wy[i]
        out = row if out is None else out + row
    return out.reshape(n, c, ho, wo)
