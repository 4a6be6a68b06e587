"""The fused GPU operator ``[crop ->] resize -> crop_mirror_normalize``: one node, one kernel pair.

Users write ordinary DALI graphs::

    images = fn.decoders.image_random_crop(jpegs, device="mixed")
    images = fn.resize(images, size=(224, 224), device="gpu")
    out = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(), dtype=types.FLOAT16, ...)

and the rewrite :func:`sluice.pipeline.passes.fusion.fuse` replaces the chain (declared by the three operators'
``FusionStage`` metadata) by one node of this operator. Its kernel maps every output pixel back through the crop
window and the resize into the decoded image and runs :func:`sluice.kernels.batched.resample_batch` once:
crop -> antialiased resize -> mirror -> normalise -> layout -> cast, straight into the dense ``N x C x H x W``
batch. An integer resize output is still rounded (in registers) before normalising, so the fused result equals the
unfused one up to float rounding. Windows that leave the image, other layouts and volumes fall back, per batch, to
the three operators' own kernels one after the other.

The node's arguments are the three operators' arguments under their stages' prefixes (``k.``, ``r.``, ``c.``) and
``has_crop``, whether a leading ``fn.crop`` was fused. Users never write it: it is not registered as ``fn.x``.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.kernels.batched import Packed, resample_batch
from sluice.ops.image import crop, crop_mirror_normalize, resize
from sluice.ops.image._geometry import CROP_RESIZE_NORMALIZE, crop_windows_batch, out_dtype, resize_params_batch
from sluice.ops.image.crop import crop_one, crop_volumes
from sluice.ops.image.crop_mirror_normalize import (crop_mirror_normalize_gpu, frame_output_layout, norm_batch,
                                                    output_layout_of)
from sluice.ops.image.resize import check_dtype, filters, resize_gpu
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "fused_gpu"]

_STAGES = tuple(m.SCHEMA.fusion for m in (crop, resize, crop_mirror_normalize))
_K, _R, _C = (stage.prefix for stage in _STAGES)
_HAS_CROP = _STAGES[0].flag


def _fused_args() -> list[Arg]:
    out = []
    for mod, prefix in ((crop, _K), (resize, _R), (crop_mirror_normalize, _C)):
        for a in mod.SCHEMA.args.values():
            out.append(Arg(prefix + a.name, a.type, a.default, a.doc, a.per_sample, a.choices))
    out.append(Arg(_HAS_CROP, bool, False, "Whether a leading fn.crop was fused."))
    return out


SCHEMA = OpSchema(
    "_fused_crop_resize_crop_mirror_normalize",
    doc="""[crop ->] resize -> crop_mirror_normalize as one GPU node (made by sluice.pipeline.passes.fusion.fuse).""",
    devices=("gpu",),
    sequences="frames",  # a batch of clips is the batch of their frames: one kernel pair for all of them
    output_layout=lambda a, lay: output_layout_of(a.get(_C + "output_layout"), lay[0] if lay else ""),
    args=_fused_args(),
    register=False,
    fuses=CROP_RESIZE_NORMALIZE,
)


@SCHEMA.batch_kernel("gpu")
def fused_gpu(ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch:
    """Map each output pixel through crop_mirror_normalize's window, resize's ROI and crop's window at once.

    The geometry is computed with NumPy over the whole batch (no per-sample Python on the hot path)."""
    layout = ctx.layout_of(images) or "HWC"
    n = len(images)
    has_crop = bool(args.const(_HAS_CROP))
    if "D" in layout:  # volumes: the operators' own whole-batch kernels
        return _unfused(ctx, images, args, has_crop, layout)
    out_layout = frame_output_layout(args.const(_C + "output_layout"))
    if n == 0:
        return Batch([], out_layout)
    packed = images.packed if not has_crop else None
    if packed is not None and packed[1].shape[1] == 3 and layout == "HWC":
        # the batch read whole from its buffer: no per-image view
        samples = Packed(packed[0], packed[1][:, :2].copy(), int(packed[1][0, 2]))
        first_dim, channels, hw = 3, samples.channels, samples.hw
    else:
        samples = images.samples
        first_dim = samples[0].dim()
        channels = int(samples[0].shape[2]) if first_dim == 3 else 0
        hw = np.array([s.shape[:2] for s in samples], dtype=np.int64) if first_dim == 3 else None
    if layout != "HWC" or first_dim != 3:
        return _unfused(ctx, images, args, has_crop, layout)
    k, r, c = _StageArgs(args, _K), _StageArgs(args, _R), _StageArgs(args, _C)
    if has_crop:
        win = crop_windows_batch(hw, k)
        if ((win[:, :2] < 0) | (win[:, :2] + win[:, 2:] > hw)).any():
            return _unfused(ctx, images, args, has_crop, layout)
        # the resize filter must not reach outside the crop: resample the crop views themselves
        samples = [s[y:y + h, x:x + w] for s, (y, x, h, w) in zip(samples, win.tolist())]
        hw = win[:, 2:]
    rois, rsz = resize_params_batch(hw, r, r.sample)
    cw = crop_windows_batch(rsz, c)
    if ((cw[:, :2] < 0) | (cw[:, :2] + cw[:, 2:] > rsz)).any():
        return _unfused(ctx, images, args, has_crop, layout)
    scale = (rois[:, 2:] - rois[:, :2]) / rsz  # source pixels per resized pixel, (y, x)
    start = rois[:, :2] + cw[:, :2] * scale
    end = rois[:, :2] + (cw[:, :2] + cw[:, 2:]) * scale
    src = np.concatenate([start, end], axis=1)
    outs = cw[:, 2:]
    fmin, fmag = filters({name: r.const(name) for name in ("interp_type", "min_filter", "mag_filter")})
    mirror = np.asarray(c["mirror"], dtype=bool).reshape(n)
    dense = bool((outs == outs[0]).all())
    res = resample_batch(samples, src, outs, fmin, fmag, r.const("antialias"),
                         dtype=out_dtype(c.const("dtype"), torch.float32), mirror=mirror,
                         norm=norm_batch(channels, c, n), output_layout=out_layout, dense=dense,
                         mid_dtype=check_dtype(r.const("dtype"), packed[0] if packed is not None else samples[0]))
    return Batch.from_dense(res, out_layout) if dense else Batch(res, out_layout)


class _StageArgs:
    """The argument view one original operator's kernel expects, carved out of the fused node's arguments by its
    stage's prefix."""

    def __init__(self, args: BatchArgs, prefix: str):
        self._args, self._prefix = args, prefix

    def __getitem__(self, name: str):
        return self._args[self._prefix + name]

    def __contains__(self, name: str) -> bool:
        return self._prefix + name in self._args

    def is_const(self, name: str) -> bool:
        return self._args.is_const(self._prefix + name)

    def const(self, name: str):
        return self._args.const(self._prefix + name)

    def varies(self) -> bool:
        return self._args.varies()

    def sample(self, i: int) -> dict:
        return {k[len(self._prefix):]: v for k, v in self._args.sample(i).items() if k.startswith(self._prefix)}


def _unfused(ctx: BatchContext, images: Batch, args: BatchArgs, has_crop: bool, layout: str) -> Batch:
    """The three operators' own kernels one after the other (windows outside the image, unusual layouts)."""

    x = images if images.layout() else Batch(images.samples, layout)
    if has_crop and "D" in layout:
        x = crop_volumes(x, layout, _StageArgs(args, _K))
    elif has_crop:
        crop_args = _StageArgs(args, _K)
        x = Batch([crop_one(s, x.layout(), crop_args.sample(i)) for i, s in enumerate(x.samples)], x.layout())
    x = resize_gpu(ctx, x, args=_StageArgs(args, _R))
    return crop_mirror_normalize_gpu(ctx, x, args=_StageArgs(args, _C))
