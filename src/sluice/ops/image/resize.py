"""``fn.resize``: resample images to a size given in one of DALI's ways, with antialiasing when shrinking.

The output size follows DALI exactly (:func:`sluice.ops.image._geometry.resize_params`); the resampling is the
separable filter of :mod:`sluice.kernels.resample` (Pillow's algorithm in float32), batched on the GPU by
:func:`sluice.kernels.batched.resample_batch` (two Triton launches per batch).

On the CPU, uint8 HWC (1 to 4 channels) and HW images, the common case, go through sluice's compiled core a batch
at a time with the GIL released (:mod:`sluice.native.resize`: the same filter in float32, within 1 of the torch
path, whose summation order differs); other dtypes and layouts run the float32 torch path per sample.

Reference agreement (tests/ops/image/test_resize.py): INTERP_LINEAR / CUBIC / LANCZOS3 with antialias
(any scale) agree with Pillow's BILINEAR / BICUBIC / LANCZOS within 1 grey level on uint8; INTERP_LINEAR without
antialias and upscaling agree with OpenCV INTER_LINEAR within 1; INTERP_NN equals OpenCV INTER_NEAREST_EXACT.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import types
from sluice.errors import SampleError
from sluice.kernels.batched import Packed, resample_batch
from sluice.kernels.resample import cast_round, filter_id, resample
from sluice.native.resize import resize as native_resize
from sluice.ops._host import batch_buffer
from sluice.ops.image._geometry import (CROP_RESIZE_NORMALIZE, out_dtype, resize_params, resize_params_batch,
                                        spatial_dims)
from sluice.ops.image._volume import is_volume, resample_volumes, resize_params_3d, spatial_axes
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import map_all
from sluice.schema import Arg, BatchArgs, BatchContext, FusionStage, Operator, OpSchema

__all__ = ["SCHEMA", "resize_sample_params", "resize_sample", "RESIZE_ARGS", "resize_volumes"]

RESIZE_ARGS = [
    Arg("resize_x", float, 0.0, "Output width; 0 keeps the aspect ratio from the other extents. Negative flips.",
        per_sample=True),
    Arg("resize_y", float, 0.0, "Output height; 0 keeps the aspect ratio. Negative flips.", per_sample=True),
    Arg("resize_z", float, 0.0, "Output depth of volumes (layouts with D); 0 keeps the aspect ratio. Negative flips.",
        per_sample=True),
    Arg("size", "float_list", None, "Output size (H, W), or (D, H, W) for volumes, or one value for all; 0 extents "
        "keep the aspect ratio.", per_sample=True),
    Arg("resize_shorter", float, 0.0, "Length of the shorter side (mode 'not_smaller' on all extents).",
        per_sample=True, min=0),
    Arg("resize_longer", float, 0.0, "Length of the longer side (mode 'not_larger' on all extents).",
        per_sample=True, min=0),
    Arg("max_size", "float_list", None, "Upper limit of the output extents (one value, (H, W) or (D, H, W)).", min=0),
    Arg("mode", str, "default", "How the requested extents combine: 'default' (missing extents take the mean "
        "scale), 'stretch' (missing extents keep their size), 'not_larger', 'not_smaller' (keep the aspect ratio).",
        choices=("default", "stretch", "not_larger", "not_smaller")),
    Arg("interp_type", types.DALIInterpType, types.INTERP_LINEAR, "Interpolation, for both min_filter and "
        "mag_filter unless those are given."),
    Arg("min_filter", types.DALIInterpType, None, "Filter when shrinking (default: interp_type)."),
    Arg("mag_filter", types.DALIInterpType, None, "Filter when enlarging (default: interp_type)."),
    Arg("antialias", bool, True, "Widen the filter when shrinking (no effect with INTERP_NN)."),
    Arg("roi_start", "float_list", None, "Start (y, x), or (z, y, x) for volumes, of the input region of interest.",
        per_sample=True),
    Arg("roi_end", "float_list", None, "End (y, x) or (z, y, x) of the region of interest; start > end flips.",
        per_sample=True),
    Arg("roi_relative", bool, False, "ROI coordinates are fractions of the input size."),
    Arg("subpixel_scale", bool, True, "Keep the exact fractional scale by adjusting the ROI around its centre."),
]

SCHEMA = OpSchema(
    "resize",
    sequences="frames", sequence_outputs=1,
    doc="""Resize images.

    Give the size one way: ``resize_x``/``resize_y``, ``size``, ``resize_shorter`` or ``resize_longer``;
    ``mode`` and ``max_size`` refine it as in DALI. Layouts HWC, CHW and HW, and the sequences FHWC, FCHW and
    CFHW (every frame resized alike); volumes DHWC, CDHW and DHW with ``resize_z`` or a 3-value ``size``
    (separable filters along D, H and W). Example::

        images = fn.resize(images, resize_shorter=256, max_size=512)
        volumes = fn.resize(volumes, size=(64, 128, 128), interp_type=types.INTERP_LINEAR)   # DHWC
        thumbs = fn.resize(images, size=(64, 64), interp_type=types.INTERP_CUBIC, device="gpu")
    """,
    devices=("cpu", "gpu"),
    outputs=lambda a: 2 if a.get("save_attrs") else 1,
    output_layout=lambda a, lay: [lay[0] if lay else "", ""] if a.get("save_attrs") else (lay[0] if lay else ""),
    args=RESIZE_ARGS + [
        Arg("dtype", types.DALIDataType, None, "Output type: the input's (default) or FLOAT."),
        Arg("save_attrs", bool, False, "Add a second output with each sample's output size (H, W; D, H, W for "
            "volumes) as int32."),
        Arg("minibatch_size", int, 32, "Accepted for DALI compatibility; the GPU kernel takes the whole batch."),
        Arg("temp_buffer_hint", int, 0, "Accepted for DALI compatibility."),
    ],
    fusion=FusionStage(CROP_RESIZE_NORMALIZE, 1, "r.", opens=True, unless=("save_attrs",)),
)


def resampling_args() -> list[Arg]:
    """resize's filter and output-type arguments (DALI's ``ResamplingFilterAttr``), for the operators that
    resample as resize does (``resize_crop_mirror``, ``tensor_resize``)."""
    names = ("interp_type", "min_filter", "mag_filter", "antialias", "dtype", "minibatch_size", "temp_buffer_hint")
    return [SCHEMA.args[name] for name in names]


def resize_sample_params(shape: tuple[int, ...], layout: str, args: dict) -> tuple[tuple, tuple[int, int]]:
    """ROI and output size of one sample from its shape and its argument values."""
    hd, wd, _ = spatial_dims(layout, len(shape))
    return resize_params(
        int(shape[hd]), int(shape[wd]), resize_x=args.get("resize_x") or 0.0, resize_y=args.get("resize_y") or 0.0,
        size=args.get("size"), resize_shorter=args.get("resize_shorter") or 0.0,
        resize_longer=args.get("resize_longer") or 0.0, max_size=args.get("max_size"),
        mode=args.get("mode") or "default", roi_start=args.get("roi_start"), roi_end=args.get("roi_end"),
        roi_relative=bool(args.get("roi_relative")), subpixel_scale=args.get("subpixel_scale", True))


def filters(args: dict):
    """``(min_filter, mag_filter)`` with interp_type as the default of both."""
    interp = args.get("interp_type") or types.INTERP_LINEAR
    return args.get("min_filter") or interp, args.get("mag_filter") or interp


def check_dtype(dtype, image: torch.Tensor) -> torch.dtype:
    t = out_dtype(dtype, image.dtype)
    if t not in (image.dtype, torch.float32):
        raise ValueError(f"Invalid dtype ({dtype!r}): resize outputs the input type or FLOAT.")
    return t


def resize_sample(image: torch.Tensor, layout: str, args: dict):
    """One sample the torch way (float32 arithmetic, Pillow's filter algorithm): any dtype and layout."""
    layout = layout or ("HWC" if image.dim() == 3 else "HW")
    roi, out = resize_sample_params(tuple(image.shape), layout, args)
    fmin, fmag = filters(args)
    y = resample(image, roi, out, fmin, fmag, args.get("antialias", True), check_dtype(args.get("dtype"), image),
                 "CHW" if layout == "CHW" else "HWC")
    if args.get("save_attrs"):
        return y, torch.tensor(out, dtype=torch.int32)
    return y


_SIZE_KEYS = ("resize_x", "resize_y", "resize_z", "size", "resize_shorter", "resize_longer", "roi_start", "roi_end")


def resize_volumes(volumes: Batch, layout: str, args) -> Batch | tuple[Batch, Batch]:
    """A batch of volumes: DALI's 3-D output sizes per sample, then the separable filters along D, H and W over
    the padded batch (one gather and weighted sum per axis, :func:`sluice.ops.image._volume.resample_volumes`),
    alike on the CPU and the GPU."""
    n = len(volumes)
    save = args["save_attrs"][0] if n else False
    if n == 0:
        return (Batch([], layout), Batch([])) if save else Batch([], layout)
    shapes = volumes.shapes_array()
    axes = spatial_axes(layout)
    lo, hi, outs = np.zeros((n, 3)), np.zeros((n, 3)), np.zeros((n, 3), np.int64)
    for i in range(n):
        a = args.sample(i)
        try:
            lo[i], hi[i], outs[i] = resize_params_3d(
                shapes[i, list(axes)], **{k: a[k] for k in _SIZE_KEYS if a.get(k) is not None},
                max_size=a.get("max_size"), mode=a.get("mode") or "default", roi_relative=bool(a.get("roi_relative")),
                subpixel_scale=a.get("subpixel_scale", True))
        except Exception as exc:  # noqa: BLE001 - re-raised naming the sample
            raise SampleError(i, volumes.source_info[i], exc) from exc
    fmin, fmag = (filter_id(f) for f in filters({k: args[k][0] for k in ("interp_type", "min_filter", "mag_filter")}))
    data, _ = volumes.padded(fill=0)
    dtype = check_dtype(args["dtype"][0], data)
    y, out_shapes = resample_volumes(data, shapes, axes, lo, hi, outs, fmin, fmag, bool(args["antialias"][0]))
    if y is data:  # every axis kept as it is (nnU-Net's zoom when it does not zoom): the input, in the output type
        out = (volumes.with_layout(layout) if dtype == data.dtype
               else Batch.from_padded(data.to(dtype), out_shapes, layout))
    else:
        out = Batch.from_padded(cast_round(y, dtype), out_shapes, layout)
    if save:
        return out, Batch.from_dense(torch.from_numpy(outs.astype(np.int32)))
    return out


@SCHEMA.operator_class("cpu")
class ResizeCpu(Operator):
    """The batch on the CPU: uint8 HWC / HW images (the common case) in at most ``num_threads`` calls of the
    compiled core sharing the batch (:func:`sluice.native.resize.resize`, GIL released) into one allocation,
    dense when the output sizes agree and page-locked when a GPU operator takes the outputs; other dtypes and
    layouts per sample with :func:`resize_sample`."""

    def run(self, ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch | tuple[Batch, Batch]:
        n = len(images)
        layout = ctx.layout_of(images)
        if is_volume(layout):
            return resize_volumes(images, layout, args)
        if n and not layout:
            layout = "HWC" if images[0].dim() == 3 else "HW"
        arrays = _native_inputs(images, layout, args)
        if arrays is None:
            return self._per_sample(ctx, images.samples, layout, args)
        hw = np.array([a.shape[:2] for a in arrays], dtype=np.int64).reshape(n, 2)
        # resize_params checks that the size is given one way; resize_params_batch's vectorised path does not
        resize_sample_params(arrays[0].shape, layout, args.sample(0))
        rois, outs = resize_params_batch(hw, args, args.sample)
        fmin, fmag = (filter_id(f) for f in filters({k: args.const(k) for k in ("interp_type", "min_filter",
                                                                                   "mag_filter")}))
        c = arrays[0].shape[2] if layout == "HWC" else 1
        nbytes = outs[:, 0] * outs[:, 1] * c
        offsets = np.zeros(n, np.int64)
        np.cumsum(nbytes[:-1], out=offsets[1:])
        buf = batch_buffer(max(1, int(nbytes.sum())), self.pin_outputs, self.spec.device_id)
        out, counter = buf.numpy(), np.zeros(1, np.int64)
        tasks = max(1, min(n, self.spec.num_threads)) if ctx.thread_pool is not None else 1
        map_all(ctx.thread_pool, lambda _: native_resize(arrays, rois, outs, fmin, fmag, args.const("antialias"),
                                                         out, offsets, counter), list(range(tasks)))
        channels = (c,) if layout == "HWC" else ()
        if (outs == outs[0]).all():
            oh, ow = outs[0].tolist()
            result = Batch.from_dense(buf[: int(nbytes.sum())].view(n, oh, ow, *channels), layout)
        else:
            strides = (c, 1)[: 1 + len(channels)]
            result = Batch([buf.as_strided((h, w, *channels), (w * c, *strides), o)
                            for (h, w), o in zip(outs.tolist(), offsets.tolist())], layout)
        if args.const("save_attrs"):
            return result, Batch.from_dense(torch.from_numpy(outs.astype(np.int32)))
        return result

    def _per_sample(self, ctx: BatchContext, samples: list[torch.Tensor], layout: str, args: BatchArgs):
        def one(i: int):
            try:
                out = resize_sample(samples[i], layout, args.sample(i))
            except Exception as exc:  # noqa: BLE001 - re-raised naming the sample
                raise SampleError(i, ctx.source_info[i] if ctx.source_info else "", exc) from exc
            return out if isinstance(out, tuple) else (out,)

        results = map_all(ctx.thread_pool, one, list(range(len(samples))))
        if not results:
            return (Batch([]), Batch([])) if args.const("save_attrs") else Batch([])
        columns = [Batch(list(col)) for col in zip(*results)]
        return tuple(columns) if len(columns) > 1 else columns[0]


def _native_inputs(images: Batch, layout: str, args: BatchArgs) -> list[np.ndarray] | None:
    """The samples as NumPy arrays when the core takes the whole batch (uint8 HWC with 1 to 4 channels or HW,
    non-empty, uint8 out), else None."""
    if layout not in ("HWC", "HW") or not len(images) or out_dtype(args.const("dtype"), torch.uint8) != torch.uint8:
        return None
    if images.dense is not None:
        dense = images.dense
        ok = dense.dtype == torch.uint8 and dense.device.type == "cpu" and dense.dim() == len(layout) + 1
        return list(dense.contiguous().numpy()) if ok and _fits(dense.shape[1:], layout) else None
    samples = images.samples
    if not all(s.dtype == torch.uint8 and s.device.type == "cpu" and s.dim() == len(layout)
               and _fits(s.shape, layout) and (layout == "HW" or s.shape[2] == samples[0].shape[2]) for s in samples):
        return None  # (HWC samples of different channel counts too: one output buffer holds one count)
    return [(s if s.is_contiguous() else s.contiguous()).numpy() for s in samples]


def _fits(shape, layout: str) -> bool:
    return shape[0] > 0 and shape[1] > 0 and (layout == "HW" or 1 <= shape[2] <= 4)


@SCHEMA.batch_kernel("gpu")
def resize_gpu(ctx, images: Batch, *, args) -> Batch | tuple[Batch, Batch]:
    """The whole batch in two kernel launches (Triton) on the pipeline's stream."""
    n = len(images)
    layout = ctx.layout_of(images)
    if is_volume(layout):
        return resize_volumes(images, layout, args)
    packed = images.packed if n and layout in ("HWC", "") else None
    if packed is not None:  # the mixed decoders' and flip's ragged output: read as one buffer, no view per sample
        flat, shapes = packed
        if shapes.shape[1] != 3 or (shapes[:, 2] != shapes[0, 2]).any():
            packed = None
        else:
            layout, hw = "HWC", shapes[:, :2].copy()
            samples = Packed(flat, hw, int(shapes[0, 2]))
            first = flat
    if packed is None:
        samples = images.samples
        if not layout and samples:
            layout = "HWC" if samples[0].dim() == 3 else "HW"
        hd, wd, _ = spatial_dims(layout, samples[0].dim()) if n else (0, 1, None)
        hw = np.array([(s.shape[hd], s.shape[wd]) for s in samples], dtype=np.int64).reshape(n, 2)
        first = samples[0] if n else None
    rois, outs = resize_params_batch(hw, args, args.sample)
    a0 = {"antialias": args.const("antialias")}
    fmin, fmag = filters({k: args.const(k) for k in ("interp_type", "min_filter", "mag_filter")})
    dtype = check_dtype(args.const("dtype"), first) if n else None
    if layout == "HW":
        samples = [s.unsqueeze(2) for s in samples]
    dense = n > 0 and bool((outs == outs[0]).all())
    res = resample_batch(samples, rois, outs, fmin, fmag, a0.get("antialias", True), dtype=dtype,
                         output_layout="CHW" if layout == "CHW" else "HWC", dense=dense,
                         layout="CHW" if layout == "CHW" else "HWC")
    if layout == "HW":
        res = res[..., 0] if dense else [r[..., 0] for r in res]
    out = Batch.from_dense(res, layout) if dense else Batch(res, layout)
    if args.const("save_attrs"):
        attrs = Batch([torch.tensor(o, dtype=torch.int32) for o in outs.tolist()])
        return out, attrs
    return out
