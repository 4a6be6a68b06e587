"""The padded, channel-first view of a ragged image batch that the batch kernels of :mod:`sluice.kernels.image2d`
work on, and the way back to the batch's own layout.

Example::

    x, hw, layout = channels_first(images, "HWC", "laplacian")     # x: (n, C, Hmax, Wmax), hw: (n, 2) int64
    y = some_kernel(x.float(), ...)
    out = from_channels_first(y, hw, layout, torch.uint8)           # a Batch of HWC samples, ragged or dense
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.kernels.image2d import sample2d
from sluice.ops.tensor._util import convert_saturate
from sluice.pipeline import ragged
from sluice.pipeline.batch import Batch

__all__ = ["channels_first", "from_channels_first", "extents_on", "image_layout", "output_grid", "resampled"]

_LAYOUTS = ("HWC", "CHW", "HW")


def image_layout(layout: str, ndim: int, op: str, supported: tuple[str, ...] = _LAYOUTS) -> str:
    """The layout of 2-D images (``HWC`` for 3-D samples without one, ``HW`` for 2-D); a ValueError naming ``op``
    for any other (volumes, sequences the schema did not unfold)."""
    layout = layout or ("HWC" if ndim == 3 else "HW" if ndim == 2 else "")
    if layout not in supported or len(layout) != ndim:
        raise ValueError(f"fn.{op}: unsupported layout {layout!r} for {ndim}-D samples; supported layouts: "
                         f"{', '.join(supported)} (and their sequences, F first).")
    return layout


def channels_first(images: Batch, layout: str, op: str, fill: float | None = 0.0,
                   supported: tuple[str, ...] = _LAYOUTS) -> tuple[torch.Tensor, np.ndarray, str]:
    """The batch as one ``(n, C, Hmax, Wmax)`` tensor (a view of its padded form; ``fill`` in the padding, None:
    anything), each sample's ``(h, w)`` as an ``(n, 2)`` int64 array, and the layout."""
    shapes = images.shapes_array()
    layout = image_layout(layout, shapes.shape[1], op, supported)
    padded, shapes = images.padded(fill=fill)
    hw = np.ascontiguousarray(shapes[:, [layout.index("H"), layout.index("W")]], dtype=np.int64)
    if layout == "HWC":
        x = padded.permute(0, 3, 1, 2)
    elif layout == "HW":
        x = padded.unsqueeze(1)
    else:
        x = padded
    return x, hw, layout


def extents_on(hw: np.ndarray, device: torch.device) -> torch.Tensor:
    """The ``(n, 2)`` extents on ``device`` (one asynchronous copy)."""
    return ragged.shape_table(np.asarray(hw, np.int64).reshape(-1, 2), device)


def from_channels_first(y: torch.Tensor, hw: np.ndarray, layout: str, dtype: torch.dtype | None = None) -> Batch:
    """A Batch in ``layout`` from a channel-first ``(n, C, H, W)`` result whose sample ``i`` is its leading
    ``hw[i]``; float values are rounded to nearest and saturated into ``dtype`` (default: ``y``'s)."""
    if dtype is not None and dtype != y.dtype:
        y = convert_saturate(y, dtype)
    n, c = y.shape[0], y.shape[1]
    hw = np.asarray(hw, np.int64).reshape(n, 2)
    if layout == "HWC":
        t = y.permute(0, 2, 3, 1).contiguous()
        shapes = np.concatenate([hw, np.full((n, 1), c, np.int64)], axis=1)
    elif layout == "HW":
        t = y[:, 0].contiguous()
        shapes = hw
    else:
        t = y.contiguous()
        shapes = np.concatenate([np.full((n, 1), c, np.int64), hw], axis=1)
    return Batch.from_padded(t, shapes, layout)


def output_grid(out_hw: np.ndarray, device: torch.device, dtype: torch.dtype = torch.float64
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The OpenCV coordinates (x, y) of every pixel of the padded output, each ``(1, Hmax, Wmax)``."""
    oh, ow = int(out_hw[:, 0].max()), int(out_hw[:, 1].max())
    ys, xs = torch.meshgrid(torch.arange(oh, device=device, dtype=dtype), torch.arange(ow, device=device, dtype=dtype),
                            indexing="ij")
    return xs.unsqueeze(0), ys.unsqueeze(0)


def resampled(x: torch.Tensor, hw: np.ndarray, layout: str, px: torch.Tensor, py: torch.Tensor, out_hw: np.ndarray,
              interp: str, mode: str = "constant", fill=0.0, dtype: torch.dtype | None = None) -> Batch:
    """The channel-first batch ``x`` (sample ``i`` in its leading ``hw[i]``) sampled at OpenCV coordinates ``px``,
    ``py`` (``(n, Ho, Wo)``, any float type) by :func:`sluice.kernels.image2d.sample2d`: a Batch in ``layout``,
    sample ``i`` of ``out_hw[i]``, rounded and saturated into ``dtype`` (default ``x``'s)."""
    y = sample2d(x.to(torch.float32), extents_on(hw, x.device), px.to(torch.float32), py.to(torch.float32), interp,
                 mode, fill)
    return from_channels_first(y, out_hw, layout, dtype or x.dtype)
