"""``fn.clahe``: Contrast Limited Adaptive Histogram Equalization of uint8 images, OpenCV's algorithm.

The image is cut into ``tiles_x`` x ``tiles_y`` tiles (an image whose size the tiles do not divide is first extended,
reflecting without repeating the edge, by ``tiles - size % tiles`` rows and columns, as OpenCV does); each tile's
256-bin histogram is clipped at ``max(int(clip_limit * tile_area / 256), 1)``, the excess spread evenly (the
remainder one by one, every ``256 // remainder`` bins) and turned into a lookup table ``round(cdf * 255 /
tile_area)``; every pixel then blends the tables of its four nearest tile centres bilinearly.

Grey images (``HW``, ``HWC`` with one channel) are equalised directly. RGB images (``HWC``, three channels, R first)
with ``luma_only`` are equalised on the lightness of CIE Lab (OpenCV's 8-bit ``RGB2Lab``, L scaled to 0..255) and
converted back; without it each channel is equalised on its own.

The CPU kernel is OpenCV itself (``cv2.createCLAHE`` per sample, as DALI's CPU operator). The GPU kernel does the
same arithmetic for the whole padded batch in torch (histograms by one ``bincount``, tables, one blend), in
float32 where OpenCV uses float32; its Lab conversion is the float formula where OpenCV's 8-bit conversion uses
fixed-point tables, so colour outputs may differ from the CPU's by a few levels (grey outputs by at most one).
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.kernels.image2d import border_map
from sluice.ops.image._padded import channels_first, from_channels_first, image_layout
from sluice.pipeline.batch import Batch
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "clahe_planes", "rgb_to_lab", "lab_to_rgb"]

BINS = 256

SCHEMA = OpSchema(
    "clahe",
    sequences="frames",
    doc="""Contrast Limited Adaptive Histogram Equalization (OpenCV's algorithm) of uint8 grey (``HW``, ``HWC``
    with 1 channel) or RGB (``HWC``, 3 channels) images.

    The image is divided into ``tiles_x`` x ``tiles_y`` tiles; each tile's histogram is clipped at ``clip_limit *
    tile_area / bins``, the excess redistributed, and equalised; pixels blend the four nearest tiles' tables
    bilinearly. RGB images are equalised on their Lab lightness (``luma_only``, the default; channels must be in
    RGB order) or channel by channel. Example::

        out = fn.clahe(images, tiles_x=8, tiles_y=8, clip_limit=2.0)
    """,
    devices=("cpu", "gpu"),
    requires={"cpu": ("cv2",)},
    args=[
        Arg("tiles_x", int, REQUIRED, "Number of tiles along the width.", min=1),
        Arg("tiles_y", int, REQUIRED, "Number of tiles along the height.", min=1),
        Arg("clip_limit", float, REQUIRED, "Relative clip limit: a bin holds at most clip_limit * tile_area / bins "
            "(at least 1); 0 or less disables clipping."),
        Arg("bins", int, 256, "Number of histogram bins; a power of 2. uint8 images use 256, as OpenCV and DALI's "
            "kernels do.", min=1),
        Arg("luma_only", bool, True, "For RGB images, equalise the lightness only (else each channel)."),
    ],
)

# OpenCV's sRGB -> XYZ matrix and D65 white point (color_lab.cpp)
_RGB2XYZ = np.array([[0.412453, 0.357580, 0.180423],
                     [0.212671, 0.715160, 0.072169],
                     [0.019334, 0.119193, 0.950227]], np.float64)
_WHITE = np.array([0.950456, 1.0, 1.088754], np.float64)


def rgb_to_lab(rgb: torch.Tensor) -> torch.Tensor:
    """Float RGB (0..255, channel axis 1) to Lab as OpenCV's 8-bit ``RGB2Lab`` stores it: ``L * 255 / 100``,
    ``a + 128``, ``b + 128``, rounded to integers (as float32)."""
    c = rgb / 255.0
    lin = torch.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = torch.as_tensor(_RGB2XYZ / _WHITE[:, None], dtype=rgb.dtype, device=rgb.device)
    xyz = torch.einsum("ij,bj...->bi...", m, lin)
    f = torch.where(xyz > 0.008856, xyz.clamp_min(0) ** (1.0 / 3.0), 7.787 * xyz + 16.0 / 116.0)
    fx, fy, fz = f[:, 0], f[:, 1], f[:, 2]
    lab = torch.stack([(116.0 * fy - 16.0) * 255.0 / 100.0, 500.0 * (fx - fy) + 128.0, 200.0 * (fy - fz) + 128.0], dim=1)
    return torch.round(lab).clamp(0, 255)


def lab_to_rgb(lab: torch.Tensor) -> torch.Tensor:
    """8-bit Lab (as :func:`rgb_to_lab` gives it, channel axis 1) back to float RGB 0..255 (not rounded)."""
    lightness = lab[:, 0] * (100.0 / 255.0)
    a, b = lab[:, 1] - 128.0, lab[:, 2] - 128.0
    fy = (lightness + 16.0) / 116.0
    f = torch.stack([fy + a / 500.0, fy, fy - b / 200.0], dim=1)
    xyz = torch.where(f > 6.0 / 29.0, f ** 3, (f - 16.0 / 116.0) * 3.0 * (6.0 / 29.0) ** 2)
    xyz = xyz * torch.as_tensor(_WHITE, dtype=lab.dtype, device=lab.device).view(1, 3, *([1] * (lab.dim() - 2)))
    m = torch.as_tensor(np.linalg.inv(_RGB2XYZ), dtype=lab.dtype, device=lab.device)
    lin = torch.einsum("ij,bj...->bi...", m, xyz).clamp(0, 1)
    return torch.where(lin <= 0.0031308, 12.92 * lin, 1.055 * lin ** (1.0 / 2.4) - 0.055) * 255.0


def clahe_planes(planes: torch.Tensor, hw: np.ndarray, tiles_x: int, tiles_y: int, clip_limit: float) -> torch.Tensor:
    """CLAHE of a padded batch of uint8-valued planes (``(m, H, W)``, any integer or float dtype holding 0..255),
    plane ``i`` in its leading ``hw[i]`` = (h, w). Returns float32 0..255 (rounded), OpenCV's result."""
    m, hmax, wmax = planes.shape
    dev = planes.device
    h, w = hw[:, 0], hw[:, 1]
    exact = (h % tiles_y == 0) & (w % tiles_x == 0)
    eh = np.where(exact, h, h + tiles_y - h % tiles_y)  # OpenCV pads both axes when either is not divisible
    ew = np.where(exact, w, w + tiles_x - w % tiles_x)
    th, tw = eh // tiles_y, ew // tiles_x
    area = th * tw
    geometry = torch.from_numpy(np.stack([h, w, eh, ew, th, tw], 1).astype(np.int64)).to(dev, non_blocking=True)
    gh, gw, geh, gew, gth, gtw = (geometry[:, k] for k in range(6))
    hem, wem = int(eh.max()), int(ew.max())
    # the extended planes: reflect-101 of each plane at its own edge
    rows, _ = border_map(torch.arange(hem, device=dev).view(1, -1), gh.view(-1, 1), "reflect_101")
    cols, _ = border_map(torch.arange(wem, device=dev).view(1, -1), gw.view(-1, 1), "reflect_101")
    values = planes.to(torch.int64)
    ext = torch.gather(torch.gather(values, 1, rows.unsqueeze(2).expand(m, hem, wmax)), 2,
                       cols.unsqueeze(1).expand(m, hem, wem))
    y = torch.arange(hem, device=dev).view(1, -1, 1)
    x = torch.arange(wem, device=dev).view(1, 1, -1)
    inside = (y < geh.view(-1, 1, 1)) & (x < gew.view(-1, 1, 1))
    ty = torch.div(y, gth.view(-1, 1, 1), rounding_mode="floor").clamp(max=tiles_y - 1)
    tx = torch.div(x, gtw.view(-1, 1, 1), rounding_mode="floor").clamp(max=tiles_x - 1)
    tiles = tiles_y * tiles_x
    bin_index = ((torch.arange(m, device=dev).view(-1, 1, 1) * tiles + ty * tiles_x + tx) * BINS + ext)
    dump = m * tiles * BINS
    bin_index = torch.where(inside, bin_index, torch.full((), dump, device=dev))
    hist = torch.bincount(bin_index.reshape(-1), minlength=dump + 1)[:dump].view(m, tiles, BINS)
    if clip_limit > 0:
        limit = torch.from_numpy(np.maximum((clip_limit * area / BINS).astype(np.int64), 1)).to(dev).view(m, 1, 1)
        clipped = (hist - limit).clamp_min(0).sum(-1, keepdim=True)
        hist = torch.minimum(hist, limit)
        batch = torch.div(clipped, BINS, rounding_mode="floor")
        residual = clipped - batch * BINS
        step = torch.div(BINS, residual.clamp_min(1), rounding_mode="floor").clamp_min(1)
        bins = torch.arange(BINS, device=dev).view(1, 1, -1)
        extra = (residual > 0) & (bins % step == 0) & (torch.div(bins, step, rounding_mode="floor") < residual)
        hist = hist + batch + extra.to(hist.dtype)
    scale = torch.from_numpy((np.float32(BINS - 1) / area.astype(np.float32)).astype(np.float32)).to(dev)
    lut = torch.round(torch.cumsum(hist, -1).to(torch.float32) * scale.view(m, 1, 1)).clamp(0, 255)
    # blend the four nearest tiles' tables (OpenCV's float32 arithmetic)
    inv_th = (1.0 / th.astype(np.float32)).astype(np.float32)
    inv_tw = (1.0 / tw.astype(np.float32)).astype(np.float32)
    inv = torch.from_numpy(np.stack([inv_th, inv_tw], 1)).to(dev)
    tyf = torch.arange(hmax, device=dev, dtype=torch.float32).view(1, -1) * inv[:, :1] - 0.5
    txf = torch.arange(wmax, device=dev, dtype=torch.float32).view(1, -1) * inv[:, 1:] - 0.5
    ty1, tx1 = torch.floor(tyf), torch.floor(txf)
    ya, xa = (tyf - ty1).view(m, hmax, 1), (txf - tx1).view(m, 1, wmax)
    ty1, tx1 = ty1.long(), tx1.long()
    ty2, tx2 = (ty1 + 1).clamp(max=tiles_y - 1), (tx1 + 1).clamp(max=tiles_x - 1)
    ty1, tx1 = ty1.clamp(0, tiles_y - 1), tx1.clamp(0, tiles_x - 1)  # (beyond a plane's extent: padding)
    flat = lut.view(m, tiles * BINS)
    src = values.clamp(0, BINS - 1)

    def look(tyi: torch.Tensor, txi: torch.Tensor) -> torch.Tensor:
        index = (tyi.view(m, hmax, 1) * tiles_x + txi.view(m, 1, wmax)) * BINS + src
        return torch.gather(flat, 1, index.view(m, -1)).view(m, hmax, wmax)

    res = (look(ty1, tx1) * (1 - xa) + look(ty1, tx2) * xa) * (1 - ya) + \
        (look(ty2, tx1) * (1 - xa) + look(ty2, tx2) * xa) * ya
    return torch.round(res).clamp(0, 255)


def _settings(args: BatchArgs) -> tuple[int, int, float, bool]:
    bins = args.const("bins")
    if bins & (bins - 1):
        raise ValueError(f"clahe: bins must be a power of 2, got {bins}")
    return args.const("tiles_x"), args.const("tiles_y"), float(args.const("clip_limit")), bool(args.const("luma_only"))


def _check_input(dtype: torch.dtype, channels: int) -> None:
    if dtype != torch.uint8:
        raise ValueError(f"clahe: supports uint8 images only, got {dtype}")
    if channels not in (1, 3):
        raise ValueError(f"clahe: supports 1 (grey) or 3 (RGB) channels, got {channels}")


@SCHEMA.sample_kernel("cpu")
def clahe_cpu(ctx, image: torch.Tensor, *, tiles_x, tiles_y, clip_limit, bins, luma_only, **_) -> torch.Tensor:
    """One sample with OpenCV (GIL released): DALI's CPU operator."""
    import cv2

    layout = image_layout(ctx.layout, image.dim(), "clahe", ("HWC", "HW"))
    _check_input(image.dtype, image.shape[2] if layout == "HWC" else 1)
    if bins & (bins - 1):
        raise ValueError(f"clahe: bins must be a power of 2, got {bins}")
    op = cv2.createCLAHE(clipLimit=float(clip_limit), tileGridSize=(int(tiles_x), int(tiles_y)))
    src = np.ascontiguousarray(image.numpy())
    if src.ndim == 2 or src.shape[2] == 1:
        return torch.from_numpy(op.apply(src.reshape(src.shape[:2])).reshape(src.shape))
    if luma_only:
        lab = cv2.cvtColor(src, cv2.COLOR_RGB2Lab)
        lab[..., 0] = op.apply(np.ascontiguousarray(lab[..., 0]))
        return torch.from_numpy(cv2.cvtColor(lab, cv2.COLOR_Lab2RGB))
    return torch.from_numpy(np.stack([op.apply(np.ascontiguousarray(src[..., c])) for c in range(3)], -1))


@SCHEMA.batch_kernel("gpu")
def clahe_gpu(ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch:
    """The whole padded batch: one bincount for every tile's histogram, the tables, one bilinear blend."""
    if not len(images):
        return images
    tiles_x, tiles_y, clip, luma = _settings(args)
    layout = ctx.layout_of(images)
    x, hw, layout = channels_first(images, layout, "clahe", fill=None, supported=("HWC", "HW"))
    n, c = x.shape[0], x.shape[1]
    _check_input(x.dtype, c)
    if c == 3 and luma:
        lab = rgb_to_lab(x.to(torch.float32))
        lab[:, 0] = clahe_planes(lab[:, 0], hw, tiles_x, tiles_y, clip)
        y = lab_to_rgb(lab)
    else:
        planes = x.reshape(n * c, x.shape[2], x.shape[3])
        y = clahe_planes(planes, np.repeat(hw, c, axis=0), tiles_x, tiles_y, clip).view(x.shape)
    return from_channels_first(y, hw, layout, torch.uint8)
