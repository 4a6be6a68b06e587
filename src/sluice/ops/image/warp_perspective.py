"""``fn.experimental.warp_perspective``: a perspective (homography) warp of images, OpenCV's ``warpPerspective``
as DALI exposes it.

The 3 x 3 ``matrix`` (argument or second input, one per sample) maps output to input coordinates
(``inverse_map=True``, the default; OpenCV's ``WARP_INVERSE_MAP``), else input to output. ``pixel_origin="corner"``
(the default) puts (0, 0) at the top-left corner of the top-left pixel, ``"center"`` at its centre (OpenCV's
convention); a corner matrix ``M`` is OpenCV's ``T(-0.5) M T(0.5)``. Outside the image, ``border_mode`` (``constant``
reads ``fill_value``). Interpolation: INTERP_NN, INTERP_LINEAR, INTERP_CUBIC.

The CPU kernel is ``cv2.warpPerspective`` per sample (DALI's CPU operator). The GPU kernel maps every output pixel
of the padded batch through its sample's matrix (float64) and samples with
:func:`sluice.kernels.image2d.sample2d` in float32; OpenCV quantises source positions to 1/32 pixel, so the two
differ by a fraction of the local gradient.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import types
from sluice.kernels.image2d import check_border
from sluice.ops.image._padded import channels_first, image_layout, output_grid, resampled
from sluice.ops.image.warp_affine import interp_name
from sluice.ops.tensor._util import as_float_list
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "opencv_matrix"]

_LAYOUTS = ("HWC", "CHW", "HW")
_CV_INTERP = {"nn": 0, "linear": 1, "cubic": 2}  # cv2.INTER_NEAREST, INTER_LINEAR, INTER_CUBIC
_CV_BORDER = {"constant": 0, "replicate": 1, "reflect": 2, "wrap": 3, "reflect_101": 4}  # cv2.BORDER_*

SCHEMA = OpSchema(
    "experimental.warp_perspective",
    sequences="frames",
    doc="""Perspective warp of images by a 3 x 3 matrix, as OpenCV's ``warpPerspective``.

    The matrix (``matrix`` argument, 9 values row by row, or a second input of 3 x 3 float samples) maps output to
    input coordinates unless ``inverse_map=False``. ``size`` (H, W) sets the output size (default: the input's).
    Layouts HWC, CHW, HW and their sequences; types uint8, int16, uint16, float. Example::

        out = fn.experimental.warp_perspective(images, matrix=[1, 0.1, 0, 0, 1, 0, 0.001, 0, 1],
                                               border_mode="replicate")
    """,
    inputs=(1, 2),
    devices=("cpu", "gpu"),
    requires={"cpu": ("cv2",)},
    args=[
        Arg("matrix", "float_list", None, "The 3 x 3 matrix, row by row (output -> input unless inverse_map=False); "
            "or give it as the second input.", per_sample=True),
        Arg("size", "float_list", None, "Output size (H, W); default: the input's.", per_sample=True),
        Arg("border_mode", str, "constant", "Outside the image: 'constant', 'replicate', 'reflect', 'reflect_101' or "
            "'wrap'.", choices=("constant", "replicate", "reflect", "reflect_101", "wrap")),
        Arg("interp_type", types.DALIInterpType, types.INTERP_LINEAR, "INTERP_NN, INTERP_LINEAR or INTERP_CUBIC."),
        Arg("pixel_origin", str, "corner", "'corner': (0, 0) is the top-left pixel's corner; 'center': its centre "
            "(OpenCV).", choices=("corner", "center")),
        Arg("fill_value", "float_list", None, "Value outside the image with 'constant' borders: one, or one per "
            "channel; default 0."),
        Arg("inverse_map", bool, True, "The matrix maps output to input coordinates (else input to output)."),
    ],
)

_SHIFT = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0]])
_UNSHIFT = np.array([[1.0, 0.0, -0.5], [0.0, 1.0, -0.5], [0.0, 0.0, 1.0]])


def opencv_matrix(values, pixel_origin: str, sample: int = 0) -> np.ndarray:
    """The 3 x 3 matrix as OpenCV takes it (its direction unchanged): a ``corner`` matrix shifted to OpenCV's pixel
    centres."""
    vals = as_float_list(values)
    if len(vals) != 9:
        raise ValueError(f"experimental.warp_perspective: the matrix needs 9 values (3 x 3), got {len(vals)} for "
                         f"sample {sample}; give the matrix argument or a second input")
    m = np.asarray(vals, np.float64).reshape(3, 3)
    return _UNSHIFT @ m @ _SHIFT if pixel_origin == "corner" else m


def _matrices(args_of, mats: Batch | None, n: int) -> np.ndarray:
    if mats is not None and args_of(0).get("matrix") is not None:
        raise ValueError("experimental.warp_perspective: give the matrix as an argument or as the second input, not "
                         "both")
    out = np.zeros((n, 3, 3))
    for i in range(n):
        a = args_of(i)
        out[i] = opencv_matrix(mats[i] if mats is not None else a.get("matrix"), a["pixel_origin"], i)
    return out


def _out_size(size, h: int, w: int) -> tuple[int, int]:
    vals = as_float_list(size)
    if not vals:
        return h, w
    if len(vals) != 2:
        raise ValueError(f"experimental.warp_perspective: size takes 2 values (H, W), got {vals}")
    return max(int(np.floor(vals[0] + 0.5)), 1), max(int(np.floor(vals[1] + 0.5)), 1)


def _fill(fill, channels: int) -> list[float]:
    vals = as_float_list(fill) or [0.0]
    if len(vals) not in (1, channels):
        raise ValueError(f"experimental.warp_perspective: fill_value has {len(vals)} values for {channels} channels; "
                         "give 1 or one per channel")
    return vals


@SCHEMA.sample_kernel("cpu")
def warp_perspective_cpu(ctx, image: torch.Tensor, matrix_in: torch.Tensor | None = None, **a) -> torch.Tensor:
    """One sample with OpenCV (GIL released)."""
    import cv2

    layout = image_layout(ctx.layout, image.dim(), "experimental.warp_perspective", _LAYOUTS)
    m = _matrices(lambda _: a, None if matrix_in is None else [matrix_in.cpu()], 1)[0]
    src = image.numpy()
    planes = list(src) if layout == "CHW" else [src]
    h, w = planes[0].shape[:2]
    oh, ow = _out_size(a.get("size"), h, w)
    channels = 1 if layout != "HWC" else src.shape[2]
    fill = _fill(a.get("fill_value"), channels)
    flags = _CV_INTERP[interp_name(a["interp_type"])] | (cv2.WARP_INVERSE_MAP if a["inverse_map"] else 0)
    border = _CV_BORDER[check_border(a["border_mode"], "experimental.warp_perspective")]
    out = []
    for p in planes:
        res = cv2.warpPerspective(np.ascontiguousarray(p), m, (ow, oh), flags=flags, borderMode=border,
                                  borderValue=tuple(fill * 4 if len(fill) == 1 else fill + [0.0] * (4 - len(fill))))
        out.append(res.reshape((oh, ow) + p.shape[2:]))
    return torch.from_numpy(np.stack(out) if layout == "CHW" else out[0])


@SCHEMA.batch_kernel("gpu")
def warp_perspective_gpu(ctx: BatchContext, images: Batch, mats: Batch | None = None, *, args: BatchArgs) -> Batch:
    """The whole padded batch: every output pixel through its sample's matrix, sampled in one pass."""
    n = len(images)
    if not n:
        return images
    layout = ctx.layout_of(images)
    x, hw, layout = channels_first(images, layout, "experimental.warp_perspective", fill=None, supported=_LAYOUTS)
    m = _matrices(args.sample, None if mats is None else mats.as_cpu().samples, n)  # one copy of all matrices
    if not args.const("inverse_map"):
        m = np.linalg.inv(m)
    out_hw = np.array([_out_size(a.get("size"), int(h), int(w)) for a, (h, w) in zip(args.samples(), hw.tolist())],
                      np.int64).reshape(n, 2)
    xs, ys = output_grid(out_hw, x.device)
    mt = torch.from_numpy(m).to(x.device, non_blocking=True)
    coords = [mt[:, r, 0].view(n, 1, 1) * xs + mt[:, r, 1].view(n, 1, 1) * ys + mt[:, r, 2].view(n, 1, 1)
              for r in range(3)]
    w = coords[2]
    w = torch.where(w == 0, torch.full_like(w, float("inf")), w)
    fill = _fill(args.const("fill_value"), x.shape[1] if layout == "HWC" else 1)
    return resampled(x, hw, layout, coords[0] / w, coords[1] / w, out_hw, interp_name(args.const("interp_type")),
                     check_border(args.const("border_mode"), "experimental.warp_perspective"), fill)
