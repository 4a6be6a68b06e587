"""``fn.resize_crop_mirror``: resize, then crop, then flip, done as one resampling of the region the crop covers.

The output equals ``fn.flip(fn.crop(fn.resize(x, ...), ...), ...)``: the resize size follows ``fn.resize``'s rules
(:func:`sluice.ops.image._geometry.resize_params`), the crop window is placed on the resized size
(``crop`` / ``crop_h`` / ``crop_w`` at ``crop_pos_x`` / ``crop_pos_y``), and ``mirror`` is DALI's bit mask (1
horizontal, 2 vertical). The window is carried back through the resize to a source region, and only that region
is resampled (a flipped region samples mirrored), so no full-size intermediate is made. A window larger than the
resized image reads its edge. Images HWC, CHW, HW and their sequences; volumes are not implemented.

On the GPU the batch is two Triton launches (:func:`sluice.kernels.batched.resample_batch`), on the CPU the same
filter per sample.
"""

from __future__ import annotations

import numpy as np

from sluice.kernels.batched import resample_batch
from sluice.ops.image._geometry import crop_windows_batch, reject_volume, resize_params_batch, spatial_dims
from sluice.ops.image.crop import CROP_ARGS
from sluice.ops.image.resize import RESIZE_ARGS, check_dtype, filters, resampling_args, resize_sample_params
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "source_regions"]

_CROP = [a for a in CROP_ARGS if a.name not in ("out_of_bounds_policy", "fill_values")]

SCHEMA = OpSchema(
    "resize_crop_mirror",
    sequences="frames",
    doc="""Resize, crop and mirror in one operation: the result of ``resize`` followed by ``crop`` and ``flip``,
    computed by resampling only the region the crop window covers.

    Give the resize as ``fn.resize`` takes it (``resize_x``/``resize_y``, ``size``, ``resize_shorter``,
    ``resize_longer``, ``mode``, ``max_size``, ``roi_*``), the window as ``fn.crop`` does (``crop`` or
    ``crop_h``/``crop_w``, ``crop_pos_x``/``crop_pos_y``), and ``mirror`` as a bit mask (1: horizontal, 2:
    vertical). Example::

        out = fn.resize_crop_mirror(images, resize_shorter=256, crop=(224, 224), mirror=fn.random.coin_flip())
    """,
    devices=("cpu", "gpu"),
    args=RESIZE_ARGS + _CROP + [
        Arg("mirror", int, 0, "Flip bit mask: 1 horizontal, 2 vertical, 3 both (4, depthwise, applies to volumes "
            "only).", per_sample=True, min=0, max=7),
    ] + [a for a in resampling_args() if a.name not in {r.name for r in RESIZE_ARGS}],
)


def source_regions(hw: np.ndarray, args: BatchArgs) -> tuple[np.ndarray, np.ndarray]:
    """Per sample: the source region ``(y0, x0, y1, x1)`` (flipped where mirrored) and the output size ``(h, w)``."""
    n = len(hw)
    resize_sample_params((int(hw[0, 0]), int(hw[0, 1])), "HW", args.sample(0))  # checks the size is given one way
    rois, outs = resize_params_batch(hw, args, args.sample)
    wins = crop_windows_batch(outs, args).astype(np.float64)
    scale = (rois[:, 2:] - rois[:, :2]) / np.maximum(outs, 1)
    lo = rois[:, :2] + wins[:, :2] * scale
    hi = lo + wins[:, 2:] * scale
    mirror = np.array([int(m) for m in args["mirror"]], np.int64).reshape(n)
    flip_x, flip_y = (mirror & 1) != 0, (mirror & 2) != 0
    lo[flip_y, 0], hi[flip_y, 0] = hi[flip_y, 0].copy(), lo[flip_y, 0].copy()
    lo[flip_x, 1], hi[flip_x, 1] = hi[flip_x, 1].copy(), lo[flip_x, 1].copy()
    return np.stack([lo[:, 0], lo[:, 1], hi[:, 0], hi[:, 1]], 1), wins[:, 2:].astype(np.int64)


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def resize_crop_mirror(ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch:
    """The batch's source regions resampled at once (two Triton launches on the GPU, per sample on the CPU)."""
    n = len(images)
    layout = ctx.layout_of(images)
    reject_volume("resize_crop_mirror", layout, "HWC, CHW, HW and their sequences FHWC, FCHW, CFHW")
    if not n:
        return images
    samples = images.samples
    layout = layout or ("HWC" if samples[0].dim() == 3 else "HW")
    hd, wd, _ = spatial_dims(layout, samples[0].dim())
    hw = np.array([(s.shape[hd], s.shape[wd]) for s in samples], np.int64).reshape(n, 2)
    rois, outs = source_regions(hw, args)
    fmin, fmag = filters({k: args.const(k) for k in ("interp_type", "min_filter", "mag_filter")})
    dtype = check_dtype(args.const("dtype"), samples[0])
    if layout == "HW":
        samples = [s.unsqueeze(2) for s in samples]
    dense = bool((outs == outs[0]).all())
    inner = "CHW" if layout == "CHW" else "HWC"
    res = resample_batch(samples, rois, outs, fmin, fmag, args.const("antialias"), dtype=dtype,
                         output_layout=inner, dense=dense, layout=inner)
    if layout == "HW":
        res = res[..., 0] if dense else [r[..., 0] for r in res]
    return Batch.from_dense(res, layout) if dense else Batch(res, layout)
