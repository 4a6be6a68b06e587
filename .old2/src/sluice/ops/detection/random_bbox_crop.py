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

import logging
from collections.abc import Sequence

import numpy as np
import torch

from sluice.pipeline.batch import Batch
from sluice.schema import Arg, OpSchema

__all__ = ["random_bbox_crop_sample", "to_ltrb", "from_ltrb"]

log = logging.getLogger(__name__)

_LAYOUTS = ("xyXY", "xyWH", "yxYX", "yxHW")
_GUARD_ATTEMPTS = 100_000  # an unreachable window must not hang the pipeline


def to_ltrb(boxes: np.ndarray, layout: str) -> np.ndarray:
    """Boxes (M x 4) in ``layout`` to [x0, y0, x1, y1]."""
    if layout not in _LAYOUTS:
        raise ValueError(f"random_bbox_crop: invalid bbox_layout ({layout!r}). Supported values are "
                         f"{', '.join(repr(v) for v in _LAYOUTS)}.")
    b = boxes[:, [1, 0, 3, 2]] if layout.startswith("yx") else boxes.copy()
    if layout[2:] in ("WH", "HW"):
        b[:, 2:] = b[:, :2] + b[:, 2:]
    return b


def from_ltrb(boxes: np.ndarray, layout: str) -> np.ndarray:
    """[x0, y0, x1, y1] boxes back to ``layout``."""
    b = boxes.copy()
    if layout[2:] in ("WH", "HW"):
        b[:, 2:] = b[:, 2:] - b[:, :2]
    return b[:, [1, 0, 3, 2]] if layout.startswith("yx") else b


def _metric(boxes: np.ndarray, crop: np.ndarray, kind: str) -> np.ndarray:
    ix0 = np.maximum(boxes[:, 0], crop[0])
    iy0 = np.maximum(boxes[:, 1], crop[1])
    ix1 = np.minimum(boxes[:, 2], crop[2])
    iy1 = np.minimum(boxes[:, 3], crop[3])
    inter = np.clip(ix1 - ix0, 0, None) * np.clip(iy1 - iy0, 0, None)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    if kind == "overlap":
        return np.where(area > 0, inter / np.where(area > 0, area, 1), 0.0)
    union = area + (crop[2] - crop[0]) * (crop[3] - crop[1]) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def _fix_aspect_ratio(w: float, h: float, ratio: float, rng: np.random.Generator) -> tuple[float, float]:
    """DALI's rule for a fixed aspect ratio (min == max): set one extent from the other (which one is random),
    then scale both so that the larger extent keeps its drawn value."""
    largest = max(w, h)
    if w != h:
        if rng.integers(2):
            w = h * ratio
        else:
            h = w / ratio
    scale = largest / max(w, h)
    return w * scale, h * scale


def _prune(boxes: np.ndarray, crop: np.ndarray, prune_threshold: float | None) -> np.ndarray:
    if prune_threshold is None:
        cx = (boxes[:, 0] + boxes[:, 2]) / 2
        cy = (boxes[:, 1] + boxes[:, 3]) / 2
        return (cx >= crop[0]) & (cx <= crop[2]) & (cy >= crop[1]) & (cy <= crop[3])
    return _metric(boxes, crop, "overlap") >= prune_threshold


def random_bbox_crop_sample(boxes: np.ndarray, rng: np.random.Generator, *, aspect_ratio: Sequence[float] = (1, 1),
                            thresholds: Sequence[float] = (0.0,), scaling: Sequence[float] = (1, 1),
                            bbox_layout: str = "xyXY", allow_no_crop: bool = True, num_attempts: int = 1,
                            total_num_attempts: int = -1, bbox_prune_threshold: float | None = None,
                            threshold_type: str = "iou", all_boxes_above_threshold: bool = True,
                            crop_shape: Sequence[float] | None = None, input_shape: Sequence[float] | None = None,
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Choose a window and crop ``boxes`` (M x 4, normalised) to it.

    Returns ``(crop, kept_boxes, kept_indices, no_crop)``: ``crop`` is [x0, y0, x1, y1] (normalised), boxes are in
    ``bbox_layout`` relative to the window.

    Example::

        crop, boxes, idx, _ = random_bbox_crop_sample(b, np.random.default_rng(0), thresholds=[0.3],
                                                      scaling=[0.3, 1.0], aspect_ratio=[0.5, 2.0])
    """
    if threshold_type not in ("iou", "overlap"):
        raise ValueError(f"random_bbox_crop: invalid threshold_type ({threshold_type!r}). Supported values are "
                         "'iou', 'overlap'.")
    if len(scaling) != 2 or not 0 < scaling[0] <= scaling[1] <= 1:
        raise ValueError(f"random_bbox_crop: scaling must be [min, max] with 0 < min <= max <= 1, got {scaling}")
    if len(aspect_ratio) != 2 or not 0 < aspect_ratio[0] <= aspect_ratio[1]:
        raise ValueError(f"random_bbox_crop: aspect_ratio must be [min, max] with 0 < min <= max, got "
                         f"{aspect_ratio}")
    if num_attempts < 1:
        raise ValueError(f"random_bbox_crop: num_attempts must be >= 1, got {num_attempts}")
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    ltrb = to_ltrb(boxes, bbox_layout)
    fixed = None
    if crop_shape:
        if not input_shape or len(input_shape) != 2 or len(crop_shape) != 2:
            raise ValueError("random_bbox_crop: crop_shape needs input_shape, both with 2 values in shape_layout "
                             "order")
        if any(c > i or c <= 0 for c, i in zip(crop_shape, input_shape)):
            raise ValueError(f"random_bbox_crop: crop_shape {list(crop_shape)} must be positive and fit in "
                             f"input_shape {list(input_shape)}")
        fixed = np.asarray(crop_shape, float) / np.asarray(input_shape, float)
    elif aspect_ratio[0] != aspect_ratio[1] and (scaling[1] / scaling[0] < aspect_ratio[0] or
                                                 scaling[0] / scaling[1] > aspect_ratio[1]):
        raise ValueError(f"random_bbox_crop: no window with scales in {list(scaling)} has an aspect ratio in "
                         f"{list(aspect_ratio)}")
    options: list[float | None] = [float(t) for t in thresholds] + ([None] if allow_no_crop else [])
    if not options:
        raise ValueError("random_bbox_crop: no thresholds and allow_no_crop=False leave nothing to choose")
    whole = np.array([0.0, 0.0, 1.0, 1.0])
    limit = total_num_attempts if total_num_attempts > 0 else _GUARD_ATTEMPTS
    tried = 0
    crop = None
    while crop is None and tried < limit:
        opt = options[int(rng.integers(len(options)))]
        if opt is None:
            crop = whole
            break
        for _ in range(num_attempts):
            tried += 1
            if tried > limit:
                break
            if fixed is not None:  # absolute window: integer anchors, as DALI
                w, h = fixed
                x0 = rng.integers(0, int(input_shape[0] - crop_shape[0]) + 1) / input_shape[0]
                y0 = rng.integers(0, int(input_shape[1] - crop_shape[1]) + 1) / input_shape[1]
            else:
                w, h = rng.uniform(scaling[0], scaling[1], size=2)
                if aspect_ratio[0] == aspect_ratio[1]:
                    w, h = _fix_aspect_ratio(w, h, aspect_ratio[0], rng)
                elif not aspect_ratio[0] <= w / h <= aspect_ratio[1]:
                    continue
                x0 = rng.uniform(0.0, 1.0 - w)
                y0 = rng.uniform(0.0, 1.0 - h)
            cand = np.array([x0, y0, x0 + w, y0 + h])
            if len(ltrb):
                m = _metric(ltrb, cand, threshold_type) >= opt
                if not (m.all() if all_boxes_above_threshold else m.any()):
                    continue
                if not _prune(ltrb, cand, bbox_prune_threshold).any():
                    continue  # a window that keeps no box is rejected, as DALI does
            crop = cand
            break
    no_crop = crop is None or crop is whole
    if crop is None:
        if total_num_attempts <= 0:
            log.warning("random_bbox_crop: no window found in %d attempts; using the whole image", tried)
        crop = whole
    if no_crop:
        keep = np.arange(len(ltrb))
        out = ltrb
    else:
        keep = np.nonzero(_prune(ltrb, crop, bbox_prune_threshold))[0]
        kept = ltrb[keep]
        clipped = np.concatenate([np.maximum(kept[:, :2], crop[:2]), np.minimum(kept[:, 2:], crop[2:])], 1)
        size = np.concatenate([crop[2:] - crop[:2]] * 2)
        out = (clipped - np.concatenate([crop[:2]] * 2)) / size
    return crop, from_ltrb(out, bbox_layout), keep, np.bool_(no_crop)


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


def _crop_one(rng: np.random.Generator, boxes: torch.Tensor, labels: torch.Tensor | None, a: dict):
    layout = a["bbox_layout"] or ("xyXY" if a["ltrb"] else "xyWH")
    hw = a["shape_layout"] == "HW"
    crop_shape = a["crop_shape"]
    input_shape = a["input_shape"]
    if hw and crop_shape:
        crop_shape, input_shape = crop_shape[::-1], (input_shape or [])[::-1]
    b = boxes.detach().cpu().numpy()
    if b.size and b.shape[-1] != 4:
        raise ValueError(f"random_bbox_crop: boxes must be M x 4, got shape {tuple(b.shape)}")
    crop, out, keep, _ = random_bbox_crop_sample(
        b, rng, aspect_ratio=a["aspect_ratio"], thresholds=a["thresholds"], scaling=a["scaling"],
        bbox_layout=layout, allow_no_crop=a["allow_no_crop"], num_attempts=a["num_attempts"],
        total_num_attempts=a["total_num_attempts"], bbox_prune_threshold=a["bbox_prune_threshold"],
        threshold_type=a["threshold_type"], all_boxes_above_threshold=a["all_boxes_above_threshold"],
        crop_shape=crop_shape, input_shape=input_shape)
    anchor, shape = crop[:2], crop[2:] - crop[:2]
    if crop_shape:
        anchor, shape = anchor * np.asarray(input_shape, float), np.asarray(crop_shape, float)
    if hw:
        anchor, shape = anchor[::-1], shape[::-1]
    res = [torch.tensor(anchor.astype(np.float32)), torch.tensor(shape.astype(np.float32)),
           torch.from_numpy(out.astype(np.float32)).reshape(-1, 4)]
    if labels is not None:
        lab = labels.detach().cpu()
        if lab.shape[0] != b.reshape(-1, 4).shape[0]:
            raise ValueError(f"random_bbox_crop: {lab.shape[0]} labels for {b.reshape(-1, 4).shape[0]} boxes")
        res.append(lab[torch.from_numpy(keep)])
    if a["output_bbox_indices"]:
        res.append(torch.from_numpy(keep.astype(np.int32)))
    return tuple(res)


@SCHEMA.sample_kernel("cpu")
def random_bbox_crop_cpu(ctx, boxes, labels=None, **args):
    return _crop_one(ctx.rng, boxes, labels, args)


@SCHEMA.batch_kernel("gpu")
def random_bbox_crop_gpu(ctx, boxes: Batch, labels: Batch | None = None, *, args) -> tuple[Batch, ...]:
    # A few numbers per sample: chosen on the host with the same per-sample generators as the CPU kernel (so both
    # devices give the same windows), then moved to the GPU in one copy per output.
    dev = ctx.device
    rows = [_crop_one(ctx.sample_rng(i, reuse=True), boxes[i], None if labels is None else labels[i], args.sample(i))
            for i in range(len(boxes))]
    n_out = 3 + (labels is not None) + bool(args.const("output_bbox_indices"))
    if not rows:
        return tuple(Batch([]) for _ in range(n_out))
    return tuple(Batch([t.to(dev, non_blocking=True) for t in col]) for col in zip(*rows))
