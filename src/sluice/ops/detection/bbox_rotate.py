"""``fn.bbox_rotate``: boxes moved with their image when it is rotated by ``fn.rotate``, as DALI's operator.

Per sample, with the image's size from ``input_shape`` (ordered as ``shape_layout``, H and W taken from it):
the four corners of each box are rotated by ``angle`` degrees (counter-clockwise on screen) about the image
centre and placed on the output canvas (``size``, the input's size with ``keep_size``, else the rotated image's
bounding box as ``fn.rotate`` makes it); the box is their bounding box (``mode="expand"``), shrunk back to its
original extents (``"fixed"``; the extents swap when the rotation turns a wide box tall) or halfway between
(``"halfway"``). Boxes are clipped to the canvas and dropped, with their labels, when less than
``remove_threshold`` of their area remains. Boxes are ``xyXY`` or ``xyWH`` (``bbox_layout``), normalised or in
pixels (``bbox_normalized``). The batch's boxes are processed as one set of rows (NumPy, float32); like DALI's,
the operator runs on the CPU.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sluice.ops.image.rotate import rotated_size
from sluice.ops.tensor._util import as_float_list
from sluice.pipeline.batch import Batch
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "rotate_boxes"]

_MODES = ("expand", "fixed", "halfway")


def _num_outputs(args: dict, num_inputs: int) -> int:
    return num_inputs


SCHEMA = OpSchema(
    "bbox_rotate",
    doc="""Transforms boxes so that they stay on their objects after ``fn.rotate`` (call it with the image's
    shape before rotating). With labels as a second input, the labels of dropped boxes are dropped too.

    Example::

        angle = fn.random.uniform(range=(-30, 30))
        boxes, labels = fn.bbox_rotate(boxes, labels, angle=angle, input_shape=fn.shapes(images))
        images = fn.rotate(images, angle=angle)
    """,
    inputs=(1, 2),
    input_names=("bboxes", "labels"),
    outputs=_num_outputs,
    devices=("cpu",),
    output_layout="",
    args=[
        Arg("angle", float, REQUIRED, "Rotation angle in degrees.", per_sample=True),
        Arg("input_shape", "int_list", REQUIRED, "Shape of the image the boxes belong to (order of shape_layout).",
            per_sample=True),
        Arg("shape_layout", str, "HW", "Meaning of input_shape's dimensions (H and W are read from it)."),
        Arg("bbox_layout", str, "xyXY", "Box format: 'xyXY' or 'xyWH'.", choices=("xyXY", "xyWH")),
        Arg("bbox_normalized", bool, True, "Boxes are normalised to [0, 1] (else in pixels)."),
        Arg("keep_size", bool, False, "The rotated image keeps the input's size (as fn.rotate's keep_size)."),
        Arg("size", "float_list", None, "Output canvas size (H, W), as given to fn.rotate.", per_sample=True),
        Arg("mode", str, "expand", "'expand' (enclose the rotated box), 'fixed' (keep its extents) or 'halfway'.",
            choices=_MODES),
        Arg("remove_threshold", float, 0.1, "Drop boxes keeping less than this fraction of their area after "
            "clipping (0: keep all).", min=0, max=1),
    ],
)


def rotate_boxes(boxes: np.ndarray, angle: float, in_wh: tuple[float, float], out_wh: tuple[float, float], *,
                 ltrb: bool = True, normalized: bool = True, mode: str = "expand",
                 remove_threshold: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """The rotated boxes of one sample and the indices of those kept (DALI's arithmetic, float32)."""
    b = np.asarray(boxes, np.float32).reshape(-1, 4).copy()
    if not ltrb:
        b[:, 2:] += b[:, :2]
    xs = b[:, [0, 2, 0, 2]]
    ys = b[:, [1, 1, 3, 3]]
    w, h = np.float32(in_wh[0]), np.float32(in_wh[1])
    if normalized:
        xs, ys = (xs - np.float32(0.5)) * w, (ys - np.float32(0.5)) * h
    else:
        xs, ys = xs - w / 2, ys - h / 2
    old_w, old_h = xs[:, 1] - xs[:, 0], ys[:, 2] - ys[:, 0]
    a = math.radians(angle)
    c, s = np.float32(math.cos(a)), np.float32(math.sin(a))
    rx, ry = xs * c + ys * s, -xs * s + ys * c
    ow, oh = np.float32(out_wh[0]), np.float32(out_wh[1])
    rx, ry = rx + ow / 2, ry + oh / 2
    out = np.stack([rx.min(1), ry.min(1), rx.max(1), ry.max(1)], 1).astype(np.float32)
    if mode != "expand":
        new_w, new_h = out[:, 2] - out[:, 0], out[:, 3] - out[:, 1]
        flipped = (old_w < old_h) ^ (new_w < new_h)
        dw = np.where(flipped, new_w - old_h, new_w - old_w) * np.float32(0.5)
        dh = np.where(flipped, new_h - old_w, new_h - old_h) * np.float32(0.5)
        if mode == "halfway":
            dw, dh = dw * np.float32(0.5), dh * np.float32(0.5)
        out += np.stack([dw, dh, -dw, -dh], 1)
    old_area = (out[:, 2] - out[:, 0]) * (out[:, 3] - out[:, 1])
    clipped = np.stack([np.clip(out[:, 0], 0, ow), np.clip(out[:, 1], 0, oh), np.clip(out[:, 2], 0, ow),
                        np.clip(out[:, 3], 0, oh)], 1)
    new_area = (clipped[:, 2] - clipped[:, 0]) * (clipped[:, 3] - clipped[:, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = np.flatnonzero(new_area / old_area >= np.float32(remove_threshold))
    out = clipped[keep]
    if not ltrb:
        out[:, 2:] -= out[:, :2]
    if normalized:
        out = out * np.array([1 / ow, 1 / oh, 1 / ow, 1 / oh], np.float32)
    return out.astype(np.float32), keep


def _canvas(in_wh: tuple[float, float], angle: float, keep_size: bool, size) -> tuple[float, float]:
    if keep_size:
        if size is not None:
            raise ValueError("bbox_rotate: keep_size is mutually exclusive with size")
        return in_wh
    if size is not None:
        v = as_float_list(size)
        if len(v) != 2:
            raise ValueError(f"bbox_rotate: size must be two values (H, W), got {v}")
        return float(math.floor(v[1])), float(math.floor(v[0]))
    oh, ow = rotated_size(int(in_wh[1]), int(in_wh[0]), angle)  # the canvas fn.rotate makes
    return float(ow), float(oh)


@SCHEMA.batch_kernel("cpu")
def bbox_rotate(ctx: BatchContext, boxes: Batch, labels: Batch | None = None, *, args: BatchArgs):
    n = len(boxes)
    layout = args.const("shape_layout") or "HW"
    if "H" not in layout or "W" not in layout:
        raise ValueError(f"bbox_rotate: shape_layout {layout!r} must name H and W")
    hi, wi = layout.index("H"), layout.index("W")
    out_boxes, out_labels = [], []
    for i in range(n):
        shape = as_float_list(args["input_shape"][i])
        if len(shape) <= max(hi, wi):
            raise ValueError(f"bbox_rotate: input_shape of sample {i} has {len(shape)} values, fewer than "
                             f"shape_layout {layout!r} names")
        in_wh = (float(shape[wi]), float(shape[hi]))
        angle = float(as_float_list(args["angle"][i])[0])
        b = boxes[i].numpy()
        if b.size % 4:
            raise ValueError(f"bbox_rotate: sample {i} holds {b.size} values; boxes are rows of 4")
        out, keep = rotate_boxes(b, angle, in_wh, _canvas(in_wh, angle, args.const("keep_size"), args["size"][i]),
                                 ltrb=args.const("bbox_layout") == "xyXY", normalized=args.const("bbox_normalized"),
                                 mode=args.const("mode"), remove_threshold=args.const("remove_threshold"))
        out_boxes.append(torch.from_numpy(out))
        if labels is not None:
            lab = labels[i]
            if lab.shape[0] != b.size // 4:
                raise ValueError(f"bbox_rotate: sample {i} has {b.size // 4} boxes but {lab.shape[0]} labels")
            out_labels.append(lab[torch.from_numpy(keep)])
    result = Batch(out_boxes)
    return result if labels is None else (result, Batch(out_labels))
