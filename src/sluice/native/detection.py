"""The detection operators' per-sample host work for a whole batch (see :mod:`sluice.native`): random_bbox_crop's
windows (:func:`random_bbox_crops`, drawn with each sample's own generator, the values of
:func:`random_bbox_crop_sample`, its pure-Python twin) and box_encoder's matching of boxes to anchors and
encoding (:func:`encode_boxes`).

Example::

    from sluice.native.detection import random_bbox_crops
    crops, status, keep = random_bbox_crops(seed, iteration, ltrb, counts, thresholds=[0.3], scaling=[0.3, 1.0],
                                            aspect_ratio=[0.5, 2.0])
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from sluice.native import core
from sluice.pipeline.pool import map_all, runs
from sluice.schema import _rng

__all__ = ["random_bbox_crop_sample", "random_bbox_crops", "crop_to_windows", "to_ltrb", "from_ltrb",
           "encode_boxes"]

log = logging.getLogger("sluice.ops.detection.random_bbox_crop")  # the operator's logger, as before

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



def _check(aspect_ratio, thresholds, scaling, num_attempts, threshold_type, allow_no_crop, crop_shape,
           input_shape) -> tuple[list[float | None], np.ndarray | None]:
    """Validate random_bbox_crop's arguments; the options to choose from and the fixed window size (or None)."""
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
    return options, fixed


def _choose(ltrb: np.ndarray, rng: np.random.Generator, options: list[float | None], fixed: np.ndarray | None, *,
            aspect_ratio, scaling, num_attempts, total_num_attempts, bbox_prune_threshold, threshold_type,
            all_boxes_above_threshold, crop_shape, input_shape) -> tuple[np.ndarray, int, int]:
    """One sample's window: ``(crop [x0, y0, x1, y1], status, tried)``, status 0 (a window), 1 ("no crop" chosen)
    or 2 (no window found in the attempts allowed: the whole image)."""
    whole = np.array([0.0, 0.0, 1.0, 1.0])
    limit = total_num_attempts if total_num_attempts > 0 else _GUARD_ATTEMPTS
    tried = 0
    while tried < limit:
        opt = options[int(rng.integers(len(options)))]
        if opt is None:
            return whole, 1, tried
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
            return cand, 0, tried
    return whole, 2, tried


def crop_to_windows(ltrb: np.ndarray, counts: np.ndarray, crops: np.ndarray, status: np.ndarray,
                    keep: np.ndarray) -> np.ndarray:
    """The kept boxes of a batch (``ltrb`` (total, 4) float64, ``counts`` per sample) clipped to their sample's
    window (``crops`` (n, 4)) and expressed in its [0, 1] coordinates; samples whose status is not 0 (no crop)
    keep their boxes as they are. Returns the kept rows, in order."""
    rows = np.repeat(np.arange(len(counts)), counts)
    crop = crops[rows]
    clipped = np.concatenate([np.maximum(ltrb[:, :2], crop[:, :2]), np.minimum(ltrb[:, 2:], crop[:, 2:])], 1)
    size = np.concatenate([crop[:, 2:] - crop[:, :2]] * 2, 1)
    out = (clipped - np.concatenate([crop[:, :2]] * 2, 1)) / size
    out = np.where((status[rows] != 0)[:, None], ltrb, out)
    return out[keep]


def random_bbox_crop_sample(boxes: np.ndarray, rng: np.random.Generator, *, aspect_ratio: Sequence[float] = (1, 1),
                            thresholds: Sequence[float] = (0.0,), scaling: Sequence[float] = (1, 1),
                            bbox_layout: str = "xyXY", allow_no_crop: bool = True, num_attempts: int = 1,
                            total_num_attempts: int = -1, bbox_prune_threshold: float | None = None,
                            threshold_type: str = "iou", all_boxes_above_threshold: bool = True,
                            crop_shape: Sequence[float] | None = None, input_shape: Sequence[float] | None = None,
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Choose a window and crop ``boxes`` (M x 4, normalised) to it (the per-sample reference of
    :func:`random_bbox_crops`).

    Returns ``(crop, kept_boxes, kept_indices, no_crop)``: ``crop`` is [x0, y0, x1, y1] (normalised), boxes are in
    ``bbox_layout`` relative to the window.

    Example::

        crop, boxes, idx, _ = random_bbox_crop_sample(b, np.random.default_rng(0), thresholds=[0.3],
                                                      scaling=[0.3, 1.0], aspect_ratio=[0.5, 2.0])
    """
    options, fixed = _check(aspect_ratio, thresholds, scaling, num_attempts, threshold_type, allow_no_crop,
                            crop_shape, input_shape)
    ltrb = to_ltrb(np.asarray(boxes, dtype=np.float64).reshape(-1, 4), bbox_layout)
    crop, status, tried = _choose(
        ltrb, rng, options, fixed, aspect_ratio=aspect_ratio, scaling=scaling, num_attempts=num_attempts,
        total_num_attempts=total_num_attempts, bbox_prune_threshold=bbox_prune_threshold,
        threshold_type=threshold_type, all_boxes_above_threshold=all_boxes_above_threshold, crop_shape=crop_shape,
        input_shape=input_shape)
    if status == 2 and total_num_attempts <= 0:
        log.warning("random_bbox_crop: no window found in %d attempts; using the whole image", tried)
    keep = np.ones(len(ltrb), bool) if status else _prune(ltrb, crop, bbox_prune_threshold)
    out = crop_to_windows(ltrb, np.array([len(ltrb)]), crop[None], np.array([status]), keep)
    return crop, from_ltrb(out, bbox_layout), np.nonzero(keep)[0], np.bool_(status != 0)


def random_bbox_crops(seed: int, iteration: int, ltrb: np.ndarray, counts: np.ndarray,
                      streams: np.ndarray | None = None, *, aspect_ratio: Sequence[float] = (1, 1),
                      thresholds: Sequence[float] = (0.0,), scaling: Sequence[float] = (1, 1),
                      allow_no_crop: bool = True, num_attempts: int = 1, total_num_attempts: int = -1,
                      bbox_prune_threshold: float | None = None, threshold_type: str = "iou",
                      all_boxes_above_threshold: bool = True, crop_shape: Sequence[float] | None = None,
                      input_shape: Sequence[float] | None = None, pool=None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The windows of a batch: ``ltrb`` (total, 4) boxes of samples holding ``counts`` each, sample ``i`` drawn
    with the generator ``_rng(seed, iteration, streams[i])`` (default ``i + 1``: ``BatchContext.sample_rng(i)``),
    as :func:`random_bbox_crop_sample` draws them. Returns ``(crops (n, 4) float64 [x0, y0, x1, y1], status (n,)
    int8 (0 a window, 1 no crop, 2 no window found), keep (total,) bool)``; :func:`crop_to_windows` then cuts the
    boxes. The compiled core runs it without the GIL, in runs of samples over ``pool``'s threads when given."""
    options, fixed = _check(aspect_ratio, thresholds, scaling, num_attempts, threshold_type, allow_no_crop,
                            crop_shape, input_shape)
    ltrb = np.ascontiguousarray(ltrb, dtype=np.float64).reshape(-1, 4)
    counts = np.ascontiguousarray(counts, dtype=np.int64).reshape(-1)
    n = counts.size
    streams = np.arange(1, n + 1, dtype=np.int64) if streams is None else \
        np.ascontiguousarray(streams, dtype=np.int64).reshape(-1)
    spans = [int(input_shape[k] - crop_shape[k]) for k in range(2)] if fixed is not None else [0, 0]
    c = core()
    if c is not None and max(spans) < 0xFFFFFFFF:
        prune = bbox_prune_threshold is not None
        starts = np.concatenate([[0], np.cumsum(counts)])

        def part(r: range):
            return c.random_bbox_crops(
                int(seed) & 0xFFFFFFFFFFFFFFFF, int(iteration), ltrb[starts[r.start]:starts[r.stop]],
                counts[r.start:r.stop], streams[r.start:r.stop], [float(t) for t in thresholds],
                bool(allow_no_crop), float(scaling[0]), float(scaling[1]), float(aspect_ratio[0]),
                float(aspect_ratio[1]), int(num_attempts), int(total_num_attempts), prune,
                float(bbox_prune_threshold) if prune else 0.0, threshold_type == "iou",
                bool(all_boxes_above_threshold), fixed is not None,
                *(fixed.tolist() if fixed is not None else (0.0, 0.0)),
                *((float(input_shape[0]), float(input_shape[1])) if fixed is not None else (1.0, 1.0)), *spans)

        parts = runs(n, pool, per_thread=1) if n >= 256 else [range(n)]  # a few us a sample: one call mostly
        done = [part(parts[0])] if len(parts) == 1 else map_all(pool, part, parts)
        crops, status, tried, keep = (np.concatenate([d[k] for d in done]) for k in range(4))
    else:
        crops, status = np.empty((n, 4)), np.empty(n, np.int8)
        tried, keep = np.zeros(n, np.int64), np.ones(len(ltrb), bool)
        start = 0
        for i in range(n):
            box = ltrb[start:start + counts[i]]
            crops[i], status[i], tried[i] = _choose(
                box, _rng(seed, iteration, int(streams[i])), options, fixed, aspect_ratio=aspect_ratio,
                scaling=scaling, num_attempts=num_attempts, total_num_attempts=total_num_attempts,
                bbox_prune_threshold=bbox_prune_threshold, threshold_type=threshold_type,
                all_boxes_above_threshold=all_boxes_above_threshold, crop_shape=crop_shape, input_shape=input_shape)
            if status[i] == 0:
                keep[start:start + counts[i]] = _prune(box, crops[i], bbox_prune_threshold)
            start += counts[i]
    if total_num_attempts <= 0 and (status == 2).any():
        log.warning("random_bbox_crop: no window found in %d attempts; using the whole image",
                    int(tried[status == 2][0]))
    return crops, status, keep


def encode_boxes(boxes: np.ndarray, labels: np.ndarray, counts: np.ndarray, anchors: np.ndarray, criteria: float,
                 pool=None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """box_encoder's matching and ``offset=False`` encoding by the compiled core: ``boxes`` (total, 4) float32 ltrb
    of samples holding ``counts`` each, ``labels`` (total,) of any type, ``anchors`` (A, 4) float32 ltrb. Returns
    ``(out (n, A, 4) float32 [cx, cy, w, h] of each anchor's box or of the anchor itself where unmatched, labels
    (n, A) of the labels' type, 0 where unmatched, matched (n, A) bool)``, the samples run on ``pool``'s threads
    (the pipeline's ``WorkerPool``; None: the calling thread), the GIL released. None without the core, where the
    caller runs its torch reference (``sluice.ops.detection.box_encoder.encode_boxes``), which gives the same
    values."""
    c = core()
    if c is None:
        return None
    return c.encode_boxes(np.ascontiguousarray(boxes, dtype=np.float32).reshape(-1, 4),
                          np.ascontiguousarray(labels).reshape(-1), np.ascontiguousarray(counts, dtype=np.int64),
                          np.ascontiguousarray(anchors, dtype=np.float32).reshape(-1, 4), float(criteria), pool)
