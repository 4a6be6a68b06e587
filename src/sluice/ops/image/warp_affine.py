"""``fn.warp_affine``: apply an affine transform to images (one ``grid_sample`` per batch on the GPU).

The matrix maps output to input coordinates (``inverse_map=True``, DALI's default), ``[[m00, m01, m02],
[m10, m11, m12]]`` on ``(x, y)`` with pixel centres at ``+0.5``. Without ``fill_value`` the border pixel is
repeated. Reference: OpenCV ``warpAffine`` with ``WARP_INVERSE_MAP`` after shifting the matrix to OpenCV's
integer pixel centres (tests/ops/image/test_rotate.py).
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import types
from sluice.kernels.resample import filter_id
from sluice.ops.image._geometry import (as_list, channel_last_padded, from_channel_last, out_dtype, reject_volume,
                                       warp_affine_images, warp_affine_padded)
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, OpSchema

__all__ = ["SCHEMA", "interp_name", "hwc_batch", "warp_batch", "image_hw"]

SCHEMA = OpSchema(
    "warp_affine",
    sequences="frames",
    doc="""Warp images with an affine transform.

    Example::

        out = fn.warp_affine(images, matrix=[1.0, 0.2, 0.0, 0.0, 1.0, 0.0], fill_value=0)
    """,
    inputs=(1, 2),
    devices=("cpu", "gpu"),
    args=[
        Arg("matrix", "float_list", None, "Six values, output -> input unless inverse_map=False. May also be given "
            "as the second input.", per_sample=True),
        Arg("size", "float_list", None, "Output size (H, W); default: the input's.", per_sample=True),
        Arg("fill_value", float, None, "Value outside the source image; default: repeat the border pixel."),
        Arg("interp_type", types.DALIInterpType, types.INTERP_LINEAR, "INTERP_NN, INTERP_LINEAR or INTERP_CUBIC."),
        Arg("inverse_map", bool, True, "The matrix maps output to input coordinates (else input to output)."),
        Arg("dtype", types.DALIDataType, None, "Output type (default: the input's)."),
    ],
)


def interp_name(interp) -> str:
    """``"nn"``, ``"linear"`` or ``"cubic"`` for grid_sample; raises for other interpolation types."""
    fid = filter_id(interp or types.INTERP_LINEAR)
    names = {0: "nn", 1: "linear", 5: "linear", 2: "cubic"}
    if fid not in names:
        raise ValueError(f"Invalid interp_type ({interp!r}) for a warp. Supported values are INTERP_NN, "
                         "INTERP_LINEAR, INTERP_CUBIC.")
    return names[fid]


def hwc_batch(samples, layout: str, op: str = "warp_affine") -> tuple[list[torch.Tensor], str]:
    """Samples as HWC tensors (HW gets a channel, CHW is permuted) and the original layout. Volumes raise: the
    3-D warp of ``op`` is not implemented."""
    reject_volume(op, layout)
    layout = layout or ("HWC" if samples and samples[0].dim() == 3 else "HW")
    if layout == "HW":
        return [s.unsqueeze(2) for s in samples], layout
    if layout == "CHW":
        return [s.permute(1, 2, 0) for s in samples], layout
    if layout != "HWC":
        raise ValueError(f"fn.{op}: unsupported layout '{layout}'; supported: HWC, CHW, HW and the sequences FHWC, "
                         "FCHW, CFHW.")
    return list(samples), layout


def restore_layout(outs: list[torch.Tensor], layout: str) -> list[torch.Tensor]:
    if layout == "HW":
        return [o[..., 0] for o in outs]
    if layout == "CHW":
        return [o.permute(2, 0, 1).contiguous() for o in outs]
    return outs


def _matrix(args: dict, mt: torch.Tensor | None) -> np.ndarray:
    vals = as_list(mt if mt is not None else args.get("matrix"))
    if len(vals) != 6:
        raise ValueError(f"Invalid matrix ({vals or None}): warp_affine needs 6 values [m00, m01, m02, m10, m11, "
                         "m12] (argument or second input).")
    m = np.asarray(vals, dtype=np.float64).reshape(2, 3)
    if not args.get("inverse_map", True):
        full = np.vstack([m, [0.0, 0.0, 1.0]])
        m = np.linalg.inv(full)[:2]
    return m


def _run(samples, layout, args_of, mts) -> list[torch.Tensor]:
    xs, layout = hwc_batch(samples, layout)
    n = len(xs)
    mats = np.stack([_matrix(args_of(i), mts[i] if mts else None) for i in range(n)]) if n else np.zeros((0, 2, 3))
    sizes = []
    for i, x in enumerate(xs):
        size = as_list(args_of(i).get("size"), 2, "size")
        sizes.append((int(size[0]), int(size[1])) if size else (int(x.shape[0]), int(x.shape[1])))
    a0 = args_of(0) if n else {}
    fill = a0.get("fill_value")
    outs = warp_affine_images(xs, mats, np.asarray(sizes, dtype=np.int64).reshape(n, 2),
                              interp_name(a0.get("interp_type")), None if fill is None else [fill],
                              out_dtype(a0.get("dtype"), samples[0].dtype) if n else None)
    return restore_layout(outs, layout)


@SCHEMA.sample_kernel("cpu")
def warp_affine_cpu(ctx, image: torch.Tensor, mt: torch.Tensor | None = None, **args) -> torch.Tensor:
    """One sample (grid_sample on the CPU)."""
    return _run([image], ctx.layout, lambda i: args, [mt] if mt is not None else None)[0]


def warp_batch(images: Batch, layout: str, matrices: np.ndarray, out_sizes: np.ndarray, interp: str,
               fill: float | None, dtype: torch.dtype, op: str = "warp_affine") -> Batch:
    """Warp a whole batch (HWC, CHW or HW; ragged or not) in one ``grid_sample`` over its padded form:
    ``matrices`` (n, 2, 3) map output to input coordinates, ``out_sizes`` (n, 2) are the outputs' (H, W)."""
    reject_volume(op, layout)
    x, hw, layout = channel_last_padded(images, layout, 0.0, op)
    out = warp_affine_padded(x, hw, matrices, out_sizes, interp, None if fill is None else [fill], dtype)
    return from_channel_last(out, out_sizes, images, layout)


def image_hw(shapes: np.ndarray, layout: str) -> np.ndarray:
    """(n, 2) heights and widths of samples with ``layout`` (HWC, CHW or HW)."""
    layout = layout or ("HWC" if shapes.shape[1] == 3 else "HW")
    return shapes[:, 1:3] if layout == "CHW" else shapes[:, :2]


@SCHEMA.batch_kernel("gpu")
def warp_affine_gpu(ctx, images: Batch, mts: Batch | None = None, *, args) -> Batch:
    """The batch padded into one tensor and warped by one grid_sample."""
    layout = ctx.layout_of(images)
    n = len(images)
    if n == 0:
        return images
    if mts is not None:
        if len(mts) != n:
            raise ValueError(f"fn.warp_affine: {len(mts)} matrices for a batch of {n}")
        given = mts.as_cpu()
        if not given.is_dense_tensor() or int(np.prod(given.shape()[0])) != 6:
            raise ValueError("Invalid matrix input: warp_affine needs 6 values [m00, m01, m02, m10, m11, m12] per "
                             "sample (argument or second input).")
        mats = given.as_tensor().reshape(n, 2, 3).to(torch.float64).numpy()
    else:
        values = args["matrix"]
        if any(v is None or len(as_list(v)) != 6 for v in values):
            raise ValueError("Invalid matrix: warp_affine needs 6 values [m00, m01, m02, m10, m11, m12] (argument or "
                             "second input).")
        mats = np.asarray([as_list(v) for v in values], np.float64).reshape(n, 2, 3)
    if not args.const("inverse_map"):
        full = np.concatenate([mats, np.broadcast_to([[[0.0, 0.0, 1.0]]], (n, 1, 3))], 1)
        mats = np.linalg.inv(full)[:, :2]
    hw = image_hw(images.shapes_array(), layout)
    sizes = hw.copy()
    for i, size in enumerate(args["size"]):
        size = as_list(size, 2, "size")
        if size:
            sizes[i] = (int(size[0]), int(size[1]))
    fill = args.const("fill_value")
    return warp_batch(images, layout, mats, sizes, interp_name(args.const("interp_type")), fill,
                      out_dtype(args.const("dtype"), images.dtype))
