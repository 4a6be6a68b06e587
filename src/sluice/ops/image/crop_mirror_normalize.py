"""``fn.crop_mirror_normalize``: crop, mirror, normalise, change layout and cast in one pass.

``out = (in - mean) * (scale / std) + shift`` in float32 (``scale / std`` rounded to float32 first), then
rounded (halves away from zero) and saturated for integer ``dtype``. ``mirror`` flips horizontally per sample;
``output_layout`` is a permutation of the input layout: images ``HWC``/``CHW``, clips ``FHWC``/``FCHW``/``CFHW``
(``FHWC`` clips to ``FCHW`` for video classification, or to ``CFHW``, channels before frames, for 3-D
convolutions); a clip given an image layout (``'CHW'``, the default) keeps its frames in front (``FCHW``). The frames
of a clip share their sample's crop window and mirror flag. Volumes (``DHWC``, ``CDHW``, ``DHW``, and the frames of
``FDHWC``) take ``crop=(d, h, w)`` / ``crop_d`` / ``crop_pos_z``; their output layout is a permutation of the
input's, and the default ``'CHW'`` means channels first (``CDHW``). A batch of volumes runs as one gather over its
padded form, then normalisation, permutation and cast, alike on the CPU and the GPU.
``pad_output`` pads the channels to a power of two with ``fill_values``; padding outside the image (policy
``'pad'``) writes ``fill_values`` as output values. On the GPU the whole batch is one Triton pass pair
(:func:`sluice.kernels.batched.resample_batch` with an identity nearest-neighbour map), writing a dense
``N x C x H x W`` tensor when the crops agree in size.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import types
from sluice.kernels.batched import resample_batch
from sluice.kernels.resample import cast_round, epilogue
from sluice.ops.image._geometry import (CROP_RESIZE_NORMALIZE, apply_crop, as_list, crop_windows_batch, norm_params,
                                        out_dtype)
from sluice.ops.image._volume import apply_policy, crop_windows_nd, gather_windows, is_volume
from sluice.ops.image.crop import CROP_ARGS, window_of
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, FusionStage, OpSchema

__all__ = ["SCHEMA", "CMN_ARGS", "cmn_sample", "check_output_layout", "output_layout_of", "frame_output_layout",
           "norm_batch", "cmn_volumes", "volume_output_layout"]

LAYOUTS = "HWC, CHW, HW, the sequences FHWC, FCHW, CFHW, and the volumes DHWC, CDHW, DHW (FDHWC)"

CMN_ARGS = [
    Arg("mirror", int, 0, "Flip horizontally (per sample, e.g. fn.random.coin_flip()).", per_sample=True),
    Arg("mean", "float_list", [0.0], "Mean per channel (or one for all).", per_sample=True),
    Arg("std", "float_list", [1.0], "Standard deviation per channel (or one for all).", per_sample=True),
    Arg("scale", float, 1.0, "Multiplier after normalisation."),
    Arg("shift", float, 0.0, "Added after scaling."),
    Arg("dtype", types.DALIDataType, types.FLOAT, "Output type: FLOAT, FLOAT16, UINT8 or INT8 (others work too).",),
    Arg("output_layout", str, "CHW", "Output layout: a permutation of the input's, e.g. CHW or HWC for images, FCHW, "
        "FHWC or CFHW for clips (FHWC); an image layout given for clips keeps the frames in front (CHW: FCHW)."),
    Arg("pad_output", bool, False, "Pad the channels to a power of two with fill_values."),
    Arg("image_type", types.DALIImageType, None, "Accepted for DALI compatibility (unused)."),
]

SCHEMA = OpSchema(
    "crop_mirror_normalize",
    sequences="frames",
    doc="""Crop, mirror, normalise, transpose and cast images.

    ``out = (in - mean) * (scale / std) + shift``. Example::

        out = fn.crop_mirror_normalize(images, crop=(224, 224), mirror=fn.random.coin_flip(),
                                       mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                       std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
                                       dtype=types.FLOAT16, output_layout="CHW", device="gpu")
        clips = fn.crop_mirror_normalize(clips, crop=(112, 112), output_layout="FCHW")   # FHWC clips in
    """,
    devices=("cpu", "gpu"),
    output_layout=lambda a, lay: output_layout_of(a.get("output_layout"), lay[0] if lay else ""),
    args=CROP_ARGS + CMN_ARGS,
    fusion=FusionStage(CROP_RESIZE_NORMALIZE, 2, "c.", closes=True),
)


def check_output_layout(layout: str, requested: str | None = None) -> str:
    """Validate the output layout of an image or a frame (a permutation of HWC); ``requested``: the argument it
    came from, named in the error."""
    if sorted(layout or "") != ["C", "H", "W"]:
        raise ValueError(f"Invalid output_layout ('{requested or layout}'). Supported values are permutations of the "
                         "input layout: 'CHW', 'HWC' for images; 'FCHW', 'FHWC', 'CFHW' for clips.")
    return layout


def output_layout_of(requested: str | None, input_layout: str) -> str:
    """The layout of crop_mirror_normalize's output for ``input_layout`` and the ``output_layout`` argument: the
    argument, a permutation of the input layout; for sequences an image layout gets ``F`` in front."""
    out = requested or "CHW"
    if is_volume(input_layout):
        frame = input_layout.replace("F", "", 1)
        volume = volume_output_layout(requested, frame)
        return ("F" + volume) if "F" in input_layout and "F" not in volume else volume
    if "F" in (input_layout or ""):
        frame_output_layout(out)
        return out if "F" in out else "F" + out
    if "F" in out:
        raise ValueError(f"Invalid output_layout ('{out}') for the input layout '{input_layout}': F (frames) is for "
                         "sequences (FHWC, FCHW, CFHW inputs); images take 'CHW' or 'HWC'.")
    return check_output_layout(out)


def volume_output_layout(requested: str | None, layout: str) -> str:
    """The output layout of one volume (``layout`` with D, H, W and maybe C): ``requested`` when it permutes
    ``layout``; the default ``'CHW'`` puts the channels first (``DHWC`` -> ``CDHW``)."""
    if requested in (None, "", "CHW"):
        return ("C" if "C" in layout else "") + layout.replace("C", "")
    if sorted(requested) != sorted(layout):
        raise ValueError(f"Invalid output_layout ('{requested}') for the volume layout '{layout}': give a permutation "
                         "of it, e.g. 'CDHW' or 'DHWC'.")
    return requested


def cmn_volumes(volumes: Batch, layout: str, args) -> Batch:
    """A batch of volumes: crop windows (:func:`sluice.ops.image._volume.crop_windows_nd`), mirror along W,
    ``(x - mean) * scale / std + shift`` per channel (padded channels and padding outside the volume: fill
    values), permute to the output layout and cast; one gather and a few whole-batch operations."""
    n = len(volumes)
    out_layout = volume_output_layout(args["output_layout"][0] if n else None, layout)
    if n == 0:
        return Batch([], out_layout)
    shapes = volumes.shapes_array()
    anchors, sizes = crop_windows_nd(shapes, layout, args)
    anchors, sizes = apply_policy(shapes, anchors, sizes, args["out_of_bounds_policy"][0] or "error",
                                  "fn.crop_mirror_normalize")
    data, _ = volumes.padded(fill=None)
    cdim = layout.find("C")
    mirror = np.array([bool(m) for m in args["mirror"]])
    x, out_shapes, inside = gather_windows(data, shapes, anchors, sizes, mirror_dim=layout.find("W"), mirror=mirror)
    if cdim < 0:  # a channel axis to normalise along, dropped again below
        x, inside, cdim = x.unsqueeze(-1), inside.unsqueeze(-1), len(layout)
        out_shapes = np.concatenate([out_shapes, np.ones((n, 1), np.int64)], 1)
    x = x.movedim(cdim + 1, -1).to(torch.float32)
    inside = inside.movedim(cdim + 1, -1)[..., :1]  # channels are never cropped: one flag for all of them
    channels = int(x.shape[-1])
    norm = torch.tensor(norm_batch(channels, args, n)).to(x.device, non_blocking=True)  # (n, C_out, 3)
    cout = norm.shape[1]
    view = (n,) + (1,) * (x.dim() - 2) + (cout,)
    if cout > channels:
        x = torch.cat([x, x.new_zeros(*x.shape[:-1], cout - channels)], -1)
    y = (x - norm[:, :, 0].reshape(view)) * norm[:, :, 1].reshape(view) + norm[:, :, 2].reshape(view)
    if not bool(np.all((anchors >= 0) & (anchors + sizes <= shapes))):
        fill = as_list(args["fill_values"][0]) or [0.0]
        fill = fill * cout if len(fill) == 1 else (fill + [0.0] * cout)[:cout]
        y = torch.where(inside, y, torch.tensor(fill, dtype=torch.float32, device=y.device))
    out_shapes = out_shapes.copy()
    out_shapes[:, cdim] = cout
    moved = [d for d in range(out_shapes.shape[1]) if d != cdim] + [cdim]  # the order y's sample axes are in
    frame = layout if "C" in layout else layout + "C"
    order = [moved.index(frame.index(c)) for c in (out_layout if "C" in layout else out_layout + "C")]
    y = y.permute(0, *(o + 1 for o in order))
    out_shapes = out_shapes[:, [moved[o] for o in order]]
    if "C" not in layout:
        y, out_shapes = y[..., 0], out_shapes[:, :-1]
    dtype = out_dtype(args["dtype"][0], torch.float32)
    return Batch.from_padded(cast_round(y, dtype).contiguous(), out_shapes, out_layout)


def frame_output_layout(requested: str | None) -> str:
    """The output layout of one image or frame: ``output_layout`` without its ``F``."""
    return check_output_layout((requested or "CHW").replace("F", "", 1), requested)


def _hwc(image: torch.Tensor, layout: str) -> torch.Tensor:
    if image.dim() == 2:
        return image.unsqueeze(2)
    if layout == "CHW":
        return image.permute(1, 2, 0)
    if layout not in ("", "HWC"):
        raise ValueError(f"fn.crop_mirror_normalize: unsupported input layout '{layout}'; supported: {LAYOUTS}.")
    return image


def _norm(channels: int, args: dict) -> np.ndarray:
    return norm_params(channels, args.get("mean"), args.get("std"), args.get("scale", 1.0), args.get("shift", 0.0),
                       bool(args.get("pad_output")), args.get("fill_values"))


def norm_batch(channels: int, args, n: int) -> np.ndarray:
    """``(N, C_out, 3)`` normalisation rows for a batch (computed once when mean and std are constants)."""
    if args.is_const("mean") and args.is_const("std"):
        one = _norm(channels, args.sample(0))
        return np.ascontiguousarray(np.broadcast_to(one, (n,) + one.shape))
    return np.stack([_norm(channels, args.sample(i)) for i in range(n)])


def cmn_sample(image: torch.Tensor, layout: str, args: dict) -> torch.Tensor:
    """One sample, on whatever device it lives (the CPU kernel, and the GPU fallback for padded windows)."""
    if is_volume(layout):
        return cmn_volumes(Batch([image], layout), layout, BatchArgs(args, {}, 1))[0]
    x = _hwc(image, layout)
    out_layout = frame_output_layout(args.get("output_layout"))
    dtype = out_dtype(args.get("dtype"), torch.float32)
    win = window_of(tuple(x.shape), "HWC", args)
    policy = args.get("out_of_bounds_policy") or "error"
    norm = _norm(int(x.shape[2]), args)
    mirror = bool(args.get("mirror"))
    y0, x0, h, w = win
    H, W = int(x.shape[0]), int(x.shape[1])
    if policy != "pad" or (y0 >= 0 and x0 >= 0 and y0 + h <= H and x0 + w <= W):
        x = apply_crop(x, win, "HWC", policy)
        return epilogue(x.to(torch.float32), norm, mirror, out_layout, dtype)
    inner = apply_crop(x, win, "HWC", "trim_to_shape")
    fill = as_list(args.get("fill_values")) or [0.0]
    cout = norm.shape[0]
    fill = fill * cout if len(fill) == 1 else (fill + [0.0] * cout)[:cout]
    canvas = torch.tensor(fill, dtype=torch.float32, device=x.device).expand(h, w, cout).clone()
    ya, xa = max(y0, 0), max(x0, 0)
    if inner.numel():
        canvas[ya - y0:ya - y0 + inner.shape[0], xa - x0:xa - x0 + inner.shape[1]] = \
            epilogue(inner.to(torch.float32), norm, False, "HWC", torch.float32)
    return epilogue(canvas, None, mirror, out_layout, dtype)


@SCHEMA.sample_kernel("cpu")
def crop_mirror_normalize_cpu(ctx, image: torch.Tensor, **args) -> torch.Tensor:
    """One sample on the CPU."""
    return cmn_sample(image, ctx.layout, args)


@SCHEMA.batch_kernel("gpu")
def crop_mirror_normalize_gpu(ctx, images: Batch, *, args) -> Batch:
    """The batch in one Triton pass pair; padded out-of-bounds windows take the per-sample path."""
    layout = ctx.layout_of(images)
    if is_volume(layout):
        return cmn_volumes(images, layout, args)
    out_layout = frame_output_layout(args.const("output_layout"))
    samples = images.samples
    n = len(samples)
    if n == 0:
        return Batch([], out_layout)
    policy = args.const("out_of_bounds_policy")
    xs = [_hwc(s, layout) for s in samples]
    hw = np.array([x.shape[:2] for x in xs], dtype=np.int64)
    wins = crop_windows_batch(hw, args)
    outside = (wins[:, 0] < 0) | (wins[:, 1] < 0) | (wins[:, 0] + wins[:, 2] > hw[:, 0]) | \
        (wins[:, 1] + wins[:, 3] > hw[:, 1])
    if layout == "CHW" or (outside.any() and policy == "pad"):
        return Batch([cmn_sample(s, layout, args.sample(i)) for i, s in enumerate(samples)], out_layout)
    if outside.any():
        if policy == "error":
            i = int(np.argmax(outside))
            apply_crop(xs[i], tuple(wins[i]), "HWC", "error")  # raises with the message
        ya, xa = np.maximum(wins[:, 0], 0), np.maximum(wins[:, 1], 0)
        yb, xb = np.minimum(wins[:, 0] + wins[:, 2], hw[:, 0]), np.minimum(wins[:, 1] + wins[:, 3], hw[:, 1])
        wins = np.stack([ya, xa, np.maximum(yb - ya, 0), np.maximum(xb - xa, 0)], axis=1)
    c = int(xs[0].shape[2])
    norm = norm_batch(c, args, n)
    mirror = np.array([bool(m) for m in args["mirror"]])
    rois = np.stack([wins[:, 0], wins[:, 1], wins[:, 0] + wins[:, 2], wins[:, 1] + wins[:, 3]], 1).astype(np.float64)
    outs = wins[:, 2:4]
    dense = bool((outs == outs[0]).all())
    dtype = out_dtype(args.const("dtype"), torch.float32)
    res = resample_batch(xs, rois, outs, "nn", "nn", False, dtype=dtype, mirror=mirror, norm=norm,
                         output_layout=out_layout, dense=dense)
    return Batch.from_dense(res, out_layout) if dense else Batch(res, out_layout)
