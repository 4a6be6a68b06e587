"""``fn.random_resized_crop``: a random window (area and aspect ratio as Inception's) resized to ``size``.

The window comes from :func:`sluice.native.crop_window.random_crop_window` with the sample's seeded
generator, so the CPU and GPU operators pick the same windows; the resampling is resize's (antialiased when
shrinking). On the GPU the whole batch is one Triton kernel pair into a dense batch.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import types
from sluice.kernels.batched import resample_batch
from sluice.kernels.resample import resample
from sluice.native.crop_window import random_crop_window
from sluice.ops.image._geometry import as_list, out_dtype, reject_volume, spatial_dims
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, OpSchema

__all__ = ["SCHEMA"]

SCHEMA = OpSchema(
    "random_resized_crop",
    sequences="frames",
    doc="""Crop a random window (``random_area`` of the image, aspect ratio in ``random_aspect_ratio``) and resize
    it to ``size``.

    Example::

        images = fn.random_resized_crop(images, size=(224, 224), device="gpu")
    """,
    devices=("cpu", "gpu"),
    random=True,
    args=[
        Arg("size", "float_list", None, "Output size (H, W) (or one value for both). Required.",
            min=1),
        Arg("random_area", "float_list", [0.08, 1.0], "Range of the window's area as a fraction of the image's."),
        Arg("random_aspect_ratio", "float_list", [3 / 4, 4 / 3], "Range of the window's width / height."),
        Arg("num_attempts", int, 10, "Draws before falling back to a centred window.", min=1),
        Arg("interp_type", types.DALIInterpType, types.INTERP_LINEAR, "Interpolation."),
        Arg("min_filter", types.DALIInterpType, None, "Filter when shrinking (default: interp_type)."),
        Arg("mag_filter", types.DALIInterpType, None, "Filter when enlarging (default: interp_type)."),
        Arg("antialias", bool, True, "Widen the filter when shrinking."),
        Arg("dtype", types.DALIDataType, None, "Output type: the input's (default) or FLOAT."),
        Arg("minibatch_size", int, 32, "Accepted for DALI compatibility."),
        Arg("temp_buffer_hint", int, 0, "Accepted for DALI compatibility."),
    ],
)


def _size(args) -> tuple[int, int]:
    size = as_list(args.get("size") if isinstance(args, dict) else args, 2, "size")
    if not size or any(v <= 0 for v in size):
        raise ValueError(f"Invalid size ({size or None}): random_resized_crop needs the output size (H, W) > 0.")
    return int(size[0]), int(size[1])


def _window(rng: np.random.Generator, shape: tuple[int, ...], layout: str, args: dict) -> tuple[float, ...]:
    reject_volume("random_resized_crop", layout, "HWC, CHW, HW and the sequences FHWC, FCHW, CFHW")
    hd, wd, _ = spatial_dims(layout, len(shape))
    y, x, h, w = random_crop_window(rng, int(shape[hd]), int(shape[wd]), args.get("random_area") or [0.08, 1.0],
                                    args.get("random_aspect_ratio") or [3 / 4, 4 / 3], args.get("num_attempts", 10))
    return float(y), float(x), float(y + h), float(x + w)


def _filters(args: dict):
    interp = args.get("interp_type") or types.INTERP_LINEAR
    return args.get("min_filter") or interp, args.get("mag_filter") or interp


@SCHEMA.sample_kernel("cpu")
def random_resized_crop_cpu(ctx, image: torch.Tensor, **args) -> torch.Tensor:
    """One sample: draw the window with the sample's generator, then resample it."""
    layout = ctx.layout or ("HWC" if image.dim() == 3 else "HW")
    roi = _window(ctx.rng, tuple(image.shape), layout, args)
    fmin, fmag = _filters(args)
    return resample(image, roi, _size(args), fmin, fmag, args.get("antialias", True),
                    out_dtype(args.get("dtype"), image.dtype), "CHW" if layout == "CHW" else "HWC")


@SCHEMA.batch_kernel("gpu")
def random_resized_crop_gpu(ctx, images: Batch, *, args) -> Batch:
    """Windows drawn per sample (same generators as the CPU kernel), one kernel pair for the batch."""
    layout = ctx.layout_of(images) or "HWC"
    samples = images.samples
    n = len(samples)
    if n == 0:
        return Batch([], layout)
    const = args.sample(0)
    rois = np.array([_window(ctx.sample_rng(i, reuse=True), tuple(s.shape), layout, const) for i, s in enumerate(samples)])
    outs = np.array([_size(const)] * n, dtype=np.int64)
    fmin, fmag = _filters(const)
    res = resample_batch(samples, rois, outs, fmin, fmag, const.get("antialias", True),
                         dtype=out_dtype(const.get("dtype"), samples[0].dtype),
                         output_layout="CHW" if layout == "CHW" else "HWC", dense=True,
                         layout="CHW" if layout == "CHW" else "HWC")
    return Batch.from_dense(res, layout)
