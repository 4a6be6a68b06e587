"""``fn.random_bbox_crop``: picks a random crop window that keeps the bounding boxes meaningful (SSD-style), and
returns the window with the boxes (and labels) cropped to it, as DALI's ``fn.random_bbox_crop``.

Algorithm, per sample:

1. Choose one option uniformly among ``thresholds`` and, with ``allow_no_crop``, "no crop".
2. "No crop": the window is the whole image and boxes pass unchanged.
3. Otherwise try up to ``num_attempts`` windows: width and height scales uniform in ``scaling``; rejected unless
   ``width / height`` is within ``aspect_ratio`` (a fixed ratio, min == max, instead sets one extent from the
   other, as DALI does; a fixed ``crop_shape`` replaces all this and takes integer anchors); anchor uniform so
   the window fits. A window is accepted when the overlap metric (``threshold_type``: IoU of box and window, or
   ``overlap`` = intersection / box area) reaches the threshold for every box (``all_boxes_above_threshold``) or
   for at least one, and it keeps at least one box. After ``num_attempts`` failures a new option is chosen;
   after ``total_num_attempts`` (if > 0) the whole image is returned.
4. Boxes are kept when their centre lies in the window (or, with ``bbox_prune_threshold``, when
   intersection / box area reaches it), clipped to the window, and expressed in the window's [0, 1] coordinates.

Outputs: ``anchor`` and ``shape`` of the window (normalised, in ``shape_layout`` order, default "WH"; absolute
when ``crop_shape`` is used), the boxes, the labels (when given as a second input) and, with
``output_bbox_indices``, the indices of the kept boxes. Pass ``anchor`` and ``shape`` to ``fn.slice`` to crop the
image consistently.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.native.detection import crop_to_windows, from_ltrb, random_bbox_crop_sample, random_bbox_crops, to_ltrb
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["random_bbox_crop_sample", "to_ltrb", "from_ltrb"]

# ------------------------------------------------------------------------------------------------------------
# Operator
# ------------------------------------------------------------------------------------------------------------
def _num_outputs(args: dict, num_inputs: int) -> int:
    """anchor, shape, boxes, then labels when they were given, then bbox indices when asked for."""
    return 3 + (num_inputs >= 2) + bool(args.get("output_bbox_indices"))


SCHEMA = OpSchema(
    "random_bbox_crop",
    doc="""Chooses a random crop window constrained by the bounding boxes and crops the boxes (and labels) to it.

    Returns ``anchor, shape, boxes[, labels][, bbox_indices]``; pass ``anchor`` and ``shape`` to ``fn.slice``.
    Example::

        anchor, shape, boxes, labels = fn.random_bbox_crop(
            boxes, labels, aspect_ratio=[0.5, 2.0], thresholds=[0.1, 0.3, 0.5, 0.7, 0.9],
            scaling=[0.3, 1.0], bbox_layout="xyXY", allow_no_crop=True, num_attempts=50)
        images = fn.slice(images, anchor, shape, out_of_bounds_policy="trim_to_shape")
    """,
    inputs=(1, 2),
    input_names=("boxes", "labels"),
    outputs=_num_outputs,
    devices=("cpu", "gpu"),
    random=True,
    output_layout="",
    args=[
        Arg("aspect_ratio", "float_list", [1.0, 1.0], "[min, max] of the window's width / height."),
        Arg("thresholds", "float_list", [0.0], "Minimum overlap metrics to choose from."),
        Arg("scaling", "float_list", [1.0, 1.0], "[min, max] of the window's extents relative to the image."),
        Arg("bbox_layout", str, None, "Box layout: 'xyXY', 'xyWH', 'yxYX' or 'yxHW'; default from ltrb."),
        Arg("ltrb", bool, True, "Boxes are [l, t, r, b] (else [x, y, w, h]) when bbox_layout is not given."),
        Arg("shape_layout", str, "WH", "Order of the anchor and shape outputs.", choices=("WH", "HW")),
        Arg("allow_no_crop", bool, True, "'No crop' is one of the options."),
        Arg("num_attempts", int, 1, "Windows tried per chosen option.", min=1),
        Arg("total_num_attempts", int, -1, "Give up (whole image) after this many windows; -1: no limit."),
        Arg("bbox_prune_threshold", float, None, "Keep boxes whose intersection / area reaches this; default: "
            "keep boxes whose centre is in the window."),
        Arg("threshold_type", str, "iou", "Overlap metric of the thresholds.", choices=("iou", "overlap")),
        Arg("all_boxes_above_threshold", bool, True, "Every box (else at least one) must reach the threshold."),
        Arg("crop_shape", "float_list", None, "Fixed window size (absolute, shape_layout order); needs "
            "input_shape."),
        Arg("input_shape", "float_list", None, "Image size (absolute, shape_layout order) for crop_shape."),
        Arg("output_bbox_indices", bool, False, "Also output the indices of the kept boxes."),
    ],
)


def _boxes_of(boxes: Batch) -> tuple[np.ndarray, np.ndarray]:
    """The batch's boxes as one (total, 4) float64 array and the count of each sample."""
    shapes = boxes.shapes_array()
    sizes = shapes.prod(1) if shapes.shape[1] else np.ones(len(shapes), np.int64)
    bad = np.flatnonzero((sizes > 0) & ((shapes[:, -1] if shapes.shape[1] else sizes) != 4))
    if len(bad):
        raise ValueError(f"random_bbox_crop: boxes must be M x 4, got shape {tuple(shapes[bad[0]])} in sample "
                         f"{bad[0]}")
    flat, _, offsets = boxes.packed_form()
    flat = flat.detach().cpu()
    if len(sizes) and not np.array_equal(offsets, np.concatenate([[0], np.cumsum(sizes)[:-1]])):
        flat = torch.cat([flat[o:o + s] for o, s in zip(offsets.tolist(), sizes.tolist())])
    return flat[: int(sizes.sum())].numpy().astype(np.float64).reshape(-1, 4), sizes // 4


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def random_bbox_crop_batch(ctx: BatchContext, boxes: Batch, labels: Batch | None = None, *,
                           args: BatchArgs) -> tuple[Batch, ...]:
    """The whole batch: every sample's window drawn with its own generator (``ctx.sample_rng(i)``'s values) by one
    call into the compiled core, then the boxes cut, the labels and indices gathered and the outputs made as
    NumPy operations over the batch's boxes at once. The GPU kernel is this one with the outputs copied (a few
    numbers per sample, chosen on the host: both devices give the same windows)."""
    a = {name: args.const(name) for name in args.names()}
    n = len(boxes)
    n_out = 3 + (labels is not None) + bool(a["output_bbox_indices"])
    if n == 0:
        return tuple(Batch([]) for _ in range(n_out))
    layout = a["bbox_layout"] or ("xyXY" if a["ltrb"] else "xyWH")
    hw = a["shape_layout"] == "HW"
    crop_shape, input_shape = a["crop_shape"], a["input_shape"]
    if hw and crop_shape:
        crop_shape, input_shape = crop_shape[::-1], (input_shape or [])[::-1]
    values, counts = _boxes_of(boxes)
    ltrb = to_ltrb(values, layout)
    ids = np.arange(n) if ctx.sample_ids is None else np.asarray(ctx.sample_ids)
    if labels is not None:
        lcounts = labels.shapes_array()
        lcounts = lcounts[:, 0] if lcounts.shape[1] else np.ones(n, np.int64)
        bad = np.flatnonzero(lcounts != counts)
        if len(bad):
            raise ValueError(f"random_bbox_crop: {lcounts[bad[0]]} labels for {counts[bad[0]]} boxes (sample "
                             f"{bad[0]})")
    crops, status, keep = random_bbox_crops(
        ctx.seed, ctx.iteration, ltrb, counts, ids + 1, aspect_ratio=a["aspect_ratio"], thresholds=a["thresholds"],
        scaling=a["scaling"], allow_no_crop=a["allow_no_crop"], num_attempts=a["num_attempts"],
        total_num_attempts=a["total_num_attempts"], bbox_prune_threshold=a["bbox_prune_threshold"],
        threshold_type=a["threshold_type"], all_boxes_above_threshold=a["all_boxes_above_threshold"],
        crop_shape=crop_shape, input_shape=input_shape, pool=ctx.thread_pool)
    out = from_ltrb(crop_to_windows(ltrb, counts, crops, status, keep), layout).astype(np.float32)
    starts = np.concatenate([[0], np.cumsum(counts)])
    kept_before = np.concatenate([[0], np.cumsum(keep)])
    kept_counts = (kept_before[starts[1:]] - kept_before[starts[:-1]]).astype(np.int64)
    anchor, shape = crops[:, :2], crops[:, 2:] - crops[:, :2]
    if crop_shape:
        anchor = anchor * np.asarray(input_shape, float)
        shape = np.broadcast_to(np.asarray(crop_shape, float), shape.shape)
    if hw:
        anchor, shape = anchor[:, ::-1], shape[:, ::-1]
    dev = ctx.device
    res = [Batch.from_dense(torch.from_numpy(np.ascontiguousarray(anchor, np.float32)).to(dev, non_blocking=True)),
           Batch.from_dense(torch.from_numpy(np.ascontiguousarray(shape, np.float32)).to(dev, non_blocking=True)),
           Batch.from_packed(torch.from_numpy(out.reshape(-1)).to(dev, non_blocking=True),
                             np.stack([kept_counts, np.full(n, 4)], 1))]
    rows = np.flatnonzero(keep)
    if labels is not None:
        lab = torch.cat([s.reshape(int(c), *s.shape[1:]) for s, c in zip(labels.samples, counts)])
        lab = lab.detach().cpu()[torch.from_numpy(rows)]
        tail = np.broadcast_to(np.asarray(lab.shape[1:], np.int64), (n, lab.dim() - 1))
        res.append(Batch.from_packed(lab.reshape(-1).to(dev, non_blocking=True),
                                     np.concatenate([kept_counts[:, None], tail], 1)))
    if a["output_bbox_indices"]:
        local = rows - np.repeat(starts[:-1], kept_counts)
        res.append(Batch.from_packed(torch.from_numpy(local.astype(np.int32)).to(dev, non_blocking=True),
                                     kept_counts[:, None]))
    return tuple(res)
