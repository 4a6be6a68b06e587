"""``fn.debayer``: demosaic single-channel Bayer images into RGB, as DALI's operator does.

``blue_position`` (one per sample) is ``(row, column)`` of the blue sensor in the 2 x 2 tile that starts at the
second row and column of the image, OpenCV's naming: ``(0, 0)`` BGGR (OpenCV's ``BayerBG``), ``(0, 1)`` GBRG,
``(1, 0)`` GRBG, ``(1, 1)`` RGGB.

Algorithms, as DALI names them: on the CPU, ``bilinear_ocv`` (the default), ``edgeaware_ocv``, ``vng_ocv`` (uint8
only) and ``gray_ocv`` (one grey channel out), OpenCV's ``demosaicing`` per sample. On the GPU, ``bilinear_ocv`` and
``default_npp`` (the default) run one torch kernel over the padded batch that equals OpenCV's bilinear demosaicing
exactly: a missing green is the rounded mean of the four direct neighbours, a missing red or blue the mean of the two
(same row or column) or four (diagonal) neighbours of that colour, and the outermost rows and columns repeat their
inner neighbours. DALI's ``default_npp`` is NVIDIA NPP's ``CFAToRGB`` (bilinear with a chroma correlation for
green), which is not available here: sluice's GPU ``default_npp`` is OpenCV's bilinear algorithm, so its greens may
differ from DALI's GPU output where colour changes sharply.

Input: uint8 or uint16, ``HW`` or ``HWC`` with one channel (sequences ``FHW``); output ``HWC``.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.kernels.image2d import gather_axis, pad_axis
from sluice.ops.image._padded import channels_first, extents_on, from_channels_first, image_layout
from sluice.ops.tensor._util import as_float_list
from sluice.pipeline.batch import Batch
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "bilinear_demosaic"]

CPU_ALGORITHMS = ("bilinear_ocv", "edgeaware_ocv", "vng_ocv", "gray_ocv")
GPU_ALGORITHMS = ("default_npp", "bilinear_ocv")

SCHEMA = OpSchema(
    "debayer",
    sequences="frames",
    doc="""Demosaics single-channel Bayer images into RGB (``HWC``).

    ``blue_position`` is the (row, column) of the blue sensor in the 2 x 2 tile starting at the image's second row
    and column: ``(0, 0)`` BGGR, ``(0, 1)`` GBRG, ``(1, 0)`` GRBG, ``(1, 1)`` RGGB (OpenCV's names). ``algorithm``:
    ``bilinear_ocv`` (CPU default), ``edgeaware_ocv``, ``vng_ocv``, ``gray_ocv`` on the CPU; ``default_npp`` (GPU
    default; here OpenCV's bilinear algorithm, see the module notes) and ``bilinear_ocv`` on the GPU. uint8 or
    uint16; ``HW``, ``HWC`` (1 channel) or sequences ``FHW``. Example::

        rgb = fn.debayer(raw, blue_position=[1, 1])     # RGGB sensor
    """,
    devices=("cpu", "gpu"),
    requires={"cpu": ("cv2",)},
    output_layout="HWC",
    args=[
        Arg("blue_position", "int_list", REQUIRED, "(row, column) of blue in the Bayer tile: [0, 0] BGGR, [0, 1] "
            "GBRG, [1, 0] GRBG, [1, 1] RGGB.", per_sample=True),
        Arg("algorithm", str, None, "Demosaicing algorithm; default: bilinear_ocv on the CPU, default_npp on the GPU.",
            choices=CPU_ALGORITHMS + ("default_npp",)),
    ],
)

_CV_PATTERN = {(0, 0): "BG", (0, 1): "GB", (1, 0): "GR", (1, 1): "RG"}
_CV_SUFFIX = {"bilinear_ocv": "2RGB", "edgeaware_ocv": "2RGB_EA", "vng_ocv": "2RGB_VNG", "gray_ocv": "2GRAY"}


def _blue(value, sample: int) -> tuple[int, int]:
    vals = [int(v) for v in as_float_list(value)]
    if len(vals) != 2 or any(v not in (0, 1) for v in vals):
        raise ValueError(f"debayer: blue_position must be two values, each 0 or 1, got {vals} for sample {sample}")
    return vals[0], vals[1]


def _check(dtype: torch.dtype, channels: int) -> None:
    if dtype not in (torch.uint8, torch.uint16):
        raise ValueError(f"debayer: supports uint8 and uint16 input, got {dtype}")
    if channels != 1:
        raise ValueError(f"debayer: the input must have one channel (a Bayer mosaic), got {channels}")


def bilinear_demosaic(raw: torch.Tensor, hw: np.ndarray, blue: np.ndarray) -> torch.Tensor:
    """OpenCV's bilinear demosaicing of a padded batch of mosaics (``(n, H, W)``, mosaic ``i`` in its leading
    ``hw[i]``, blue at ``blue[i]`` = (row, column) of the tile at (1, 1)): ``(n, 3, H, W)`` RGB, int64."""
    n, hmax, wmax = raw.shape
    dev = raw.device
    ext = extents_on(hw, dev)
    v = raw.to(torch.int64)
    p = pad_axis(pad_axis(v, 1, ext[:, 0], 1, 1, "reflect_101"), 2, ext[:, 1], 1, 1, "reflect_101")

    def at(dy: int, dx: int) -> torch.Tensor:
        return p[:, 1 + dy:1 + dy + hmax, 1 + dx:1 + dx + wmax]

    cross = torch.div(at(-1, 0) + at(1, 0) + at(0, -1) + at(0, 1) + 2, 4, rounding_mode="floor")
    diag = torch.div(at(-1, -1) + at(-1, 1) + at(1, -1) + at(1, 1) + 2, 4, rounding_mode="floor")
    horiz = torch.div(at(0, -1) + at(0, 1) + 1, 2, rounding_mode="floor")
    vert = torch.div(at(-1, 0) + at(1, 0) + 1, 2, rounding_mode="floor")
    parity = torch.from_numpy((1 + np.asarray(blue, np.int64).reshape(n, 2)) % 2).to(dev, non_blocking=True)
    y = torch.arange(hmax, device=dev).view(1, -1, 1) % 2
    x = torch.arange(wmax, device=dev).view(1, 1, -1) % 2
    blue_row = y == parity[:, 0].view(n, 1, 1)
    blue_col = x == parity[:, 1].view(n, 1, 1)
    is_b, is_r = blue_row & blue_col, ~blue_row & ~blue_col
    g_in_b_row, g_in_r_row = blue_row & ~blue_col, ~blue_row & blue_col
    red = torch.where(is_r, v, torch.where(is_b, diag, torch.where(g_in_r_row, horiz, vert)))
    blue_ = torch.where(is_b, v, torch.where(is_r, diag, torch.where(g_in_b_row, horiz, vert)))
    green = torch.where(is_r | is_b, cross, v)
    rgb = torch.stack([red, green, blue_], dim=1)
    # the outermost rows and columns repeat their inner neighbours (OpenCV's border rule)
    for axis, j in ((3, 1), (2, 0)):
        size = rgb.shape[axis]
        pos = torch.arange(size, device=dev).view(1, -1)
        last = ext[:, j].view(-1, 1) - 1
        index = torch.where(pos == 0, torch.ones_like(pos), torch.where(pos == last, last - 1, pos))
        index = index.clamp(0, size - 1)
        rgb = gather_axis(rgb, axis, index.expand(n, size))
    return rgb


@SCHEMA.sample_kernel("cpu")
def debayer_cpu(ctx, image: torch.Tensor, *, blue_position, algorithm=None, **_) -> torch.Tensor:
    """One sample with OpenCV's ``demosaicing`` (GIL released)."""
    import cv2

    layout = image_layout(ctx.layout, image.dim(), "debayer", ("HW", "HWC"))
    _check(image.dtype, 1 if layout == "HW" else image.shape[2])
    algorithm = algorithm or "bilinear_ocv"
    if algorithm not in CPU_ALGORITHMS:
        raise ValueError(f"debayer: algorithm '{algorithm}' runs on the GPU only; on the CPU use one of "
                         f"{', '.join(CPU_ALGORITHMS)}")
    if algorithm == "vng_ocv" and image.dtype != torch.uint8:
        raise ValueError("debayer: vng_ocv takes uint8 input only")
    code = getattr(cv2, f"COLOR_Bayer{_CV_PATTERN[_blue(blue_position, ctx.index)]}{_CV_SUFFIX[algorithm]}")
    src = np.ascontiguousarray(image.numpy().reshape(image.shape[0], image.shape[1]))
    out = cv2.demosaicing(src, code)
    return torch.from_numpy(out.reshape(out.shape[0], out.shape[1], -1))


@SCHEMA.batch_kernel("gpu")
def debayer_gpu(ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch:
    """The whole padded batch in one pass (OpenCV's bilinear algorithm)."""
    if not len(images):
        return Batch([], "HWC")
    algorithm = args.const("algorithm") or "default_npp"
    if algorithm not in GPU_ALGORITHMS:
        raise ValueError(f"debayer: algorithm '{algorithm}' runs on the CPU only; on the GPU use one of "
                         f"{', '.join(GPU_ALGORITHMS)}")
    layout = ctx.layout_of(images)
    x, hw, _ = channels_first(images, layout, "debayer", fill=None, supported=("HW", "HWC"))
    _check(x.dtype, x.shape[1])
    blue = np.array([_blue(v, i) for i, v in enumerate(args["blue_position"])], np.int64)
    rgb = bilinear_demosaic(x[:, 0], hw, blue)
    return from_channels_first(rgb.to(torch.int32).to(x.dtype), hw, "HWC")
