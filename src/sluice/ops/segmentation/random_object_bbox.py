"""``fn.segmentation.random_object_bbox``: the bounding box of a randomly chosen object (connected blob) of a label
map, as DALI's operator.

Per sample, with probability ``foreground_prob``:

1. a class is drawn among the foreground classes present in the sample: all labels other than ``background``,
   equally likely (sorted), or ``classes`` weighted by ``class_weights`` (classes absent from the sample weigh 0);
   with ``ignore_class`` every blob of every class is a candidate instead;
2. the blobs of that class are its connected components (pixels sharing a face: 4-connectivity in 2-D,
   6-connectivity in 3-D); boxes smaller than ``threshold`` along any axis are dropped and, with ``k_largest``,
   only the ``k`` largest boxes (by box volume) are kept; one is drawn uniformly;
3. a class left with no blob is excluded and another drawn; when none is left, or with probability
   ``1 - foreground_prob``, the box is the whole input and the class is ``background``.

Outputs (int32): ``anchor`` and ``shape`` (``format="anchor_shape"``), ``start`` and ``end`` (``"start_end"``) or
one ``[start..., end...]`` (``"box"``), then the class label with ``output_class``. Connected components come from
SciPy's ``ndimage.label`` (``pip install 'sluice[segmentation]'``); samples run in the pipeline's threads. Like
DALI's, the operator runs on the CPU.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.errors import SampleError
from sluice.ops.tensor._util import as_float_list
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import map_all
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "object_boxes", "pick_object_box", "present_labels"]

_FORMATS = ("anchor_shape", "start_end", "box")
_TYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.uint16, torch.uint32)


def _num_outputs(args: dict) -> int:
    return 1 + (args.get("format", "anchor_shape") != "box") + bool(args.get("output_class"))


SCHEMA = OpSchema(
    "segmentation.random_object_bbox",
    doc="""Randomly selects an object (a connected blob of one label) of a segmentation map and returns its
    bounding box: ``anchor, shape`` (default), ``start, end`` or one ``box``, then the class with
    ``output_class``. With probability ``1 - foreground_prob`` the whole input is returned.

    Example::

        anchor, shape = fn.segmentation.random_object_bbox(labels, foreground_prob=0.7, k_largest=2)
        image = fn.slice(image, anchor, shape, axis_names="DHW", out_of_bounds_policy="pad")
    """,
    devices=("cpu",),
    random=True,
    outputs=_num_outputs,
    output_layout="",
    requires={"cpu": ("scipy.ndimage",)},
    args=[
        Arg("background", int, None, "Background label (default 0, or one below the smallest of classes when 0 "
            "is among them).", per_sample=True),
        Arg("classes", "int_list", None, "Labels considered foreground (default: all but background).",
            per_sample=True),
        Arg("class_weights", "float_list", None, "Relative probabilities of the classes (default: equal); "
            "without classes, of the labels 1, 2, ...", per_sample=True),
        Arg("foreground_prob", float, 1.0, "Probability of returning an object box rather than the whole input.",
            per_sample=True, min=0, max=1),
        Arg("ignore_class", bool, False, "Draw among all blobs of all classes alike (excludes classes, "
            "class_weights and output_class)."),
        Arg("k_largest", int, None, "Draw only among the k largest boxes (by volume).", min=1),
        Arg("threshold", "int_list", None, "Per-axis minimum extent of the boxes drawn.", per_sample=True),
        Arg("format", str, "anchor_shape", "'anchor_shape', 'start_end' or 'box'.", choices=_FORMATS),
        Arg("output_class", bool, False, "Add an output with the class of the box (background when it is the "
            "whole input)."),
        Arg("cache_objects", bool, False, "Accepted for DALI compatibility; boxes are found afresh each time."),
    ],
)


def object_boxes(mask: np.ndarray) -> np.ndarray:
    """Boxes ``(k, 2 * ndim)`` as ``[start..., end...]`` of the face-connected blobs of the bool ``mask``, in the
    order of their first pixel (row-major)."""
    from scipy import ndimage

    # label only the box around the mask's pixels (a few objects in a large volume: a small part of it); raster
    # order inside the box is the volume's, so the blobs come in the same order
    extents = [np.flatnonzero(mask.any(axis=tuple(j for j in range(mask.ndim) if j != k))) for k in range(mask.ndim)]
    if mask.ndim == 0 or not all(len(e) for e in extents):
        return np.zeros((0, 2 * mask.ndim), np.int64)
    lo = np.array([e[0] for e in extents], np.int64)
    labels, count = ndimage.label(mask[tuple(slice(int(e[0]), int(e[-1]) + 1) for e in extents)])
    if count == 0:
        return np.zeros((0, 2 * mask.ndim), np.int64)
    slices = ndimage.find_objects(labels)
    return np.array([[s.start for s in sl] + [s.stop for s in sl] for sl in slices], np.int64) + np.tile(lo, 2)


#: Label maps whose values span at most this many integers find the labels present by one comparison each, not by
#: sorting the map (np.unique); the same labels.
_FEW_LABELS = 64


def present_labels(data: np.ndarray) -> list[int]:
    """The sorted distinct values of the integer label map ``data``."""
    if data.size == 0:
        return []
    lo, hi = int(data.min()), int(data.max())
    if hi - lo < _FEW_LABELS:
        return [v for v in range(lo, hi + 1) if v in (lo, hi) or bool((data == v).any())]
    return [int(v) for v in np.unique(data)]


def _class_info(background, classes, weights, ignore: bool) -> tuple[int, list[int] | None, list[float] | None]:
    """DALI's ClassInfo: the background label and the candidate classes with their weights (None: from the
    labels present)."""
    explicit_bg = background is not None
    bg = int(background) if explicit_bg else 0
    if ignore:
        return bg, None, None
    cls = [int(c) for c in classes] if classes is not None else None
    wts = [float(w) for w in weights] if weights is not None else None
    if cls is not None:
        if bg in cls:
            if explicit_bg:
                raise ValueError(f"class label {bg} coincides with the background label; give another background "
                                 "or remove it from classes")
            bg = min(cls) - 1
        if wts is not None and len(wts) != len(cls):
            raise ValueError(f"classes has {len(cls)} values but class_weights {len(wts)}; give one weight per class")
        if wts is None:
            wts = [1.0] * len(cls)
    elif wts is not None:
        cls, c = [], 0
        for _ in wts:
            if c == bg:
                c += 1
            cls.append(c)
            c += 1
    return bg, cls, wts


def _pick_box(boxes: np.ndarray, threshold, k_largest, rng: np.random.Generator) -> int:
    """Index into ``boxes`` of the box drawn, or -1 when none passes the threshold."""
    ndim = boxes.shape[1] // 2
    idx = np.arange(len(boxes))
    if threshold is not None:
        extent = boxes[:, ndim:] - boxes[:, :ndim]
        idx = idx[~(extent < np.asarray(threshold, np.int64)).any(1)]
    if not len(idx):
        return -1
    if k_largest is not None and 0 < k_largest < len(idx):
        volume = np.prod(boxes[idx, ndim:] - boxes[idx, :ndim], 1)
        idx = idx[np.argsort(-volume, kind="stable")[:k_largest]]
    return int(idx[rng.integers(len(idx))])


def pick_object_box(data: np.ndarray, rng: np.random.Generator, *, background=None, classes=None,
                    class_weights=None, foreground_prob: float = 1.0, ignore_class: bool = False,
                    k_largest: int | None = None, threshold=None) -> tuple[np.ndarray, np.ndarray, int]:
    """``(start, end, class)`` of one sample drawn as the module says (the whole input and the background label
    when no object is drawn)."""
    bg, cls, wts = _class_info(background, classes, class_weights, ignore_class)
    whole = (np.zeros(data.ndim, np.int64), np.asarray(data.shape, np.int64), bg)
    if threshold is not None and len(threshold) != data.ndim:
        raise ValueError(f"threshold has {len(threshold)} values for a {data.ndim}-D input; give one per axis")
    if not rng.random() < foreground_prob or data.size == 0:
        return whole
    if ignore_class:
        present = [v for v in present_labels(data) if v != bg]
        boxes = [object_boxes(data == v) for v in present]
        boxes = np.concatenate(boxes) if boxes else np.zeros((0, 2 * data.ndim), np.int64)
        k = _pick_box(boxes, threshold, k_largest, rng) if len(boxes) else -1
        if k < 0:
            return whole
        return boxes[k, :data.ndim], boxes[k, data.ndim:], bg  # (output_class is not allowed here)
    present = set(present_labels(data)) - {bg}
    if cls is None:
        cls = sorted(present)
        wts = [1.0] * len(cls)
    weights = np.array([w if c in present else 0.0 for c, w in zip(cls, wts)], np.float64)
    while weights.sum() > 0:
        cdf = np.cumsum(weights)
        c = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
        c = min(c, len(cls) - 1)
        boxes = object_boxes(data == cls[c])
        k = _pick_box(boxes, threshold, k_largest, rng) if len(boxes) else -1
        if k >= 0:
            return boxes[k, :data.ndim], boxes[k, data.ndim:], cls[c]
        weights[c] = 0.0  # no satisfactory blob in this class: exclude it and draw again
    return whole


def _arg(values, i):
    v = values[i]
    if v is None:
        return None
    return as_float_list(v)


@SCHEMA.batch_kernel("cpu")
def random_object_bbox(ctx: BatchContext, masks: Batch, *, args: BatchArgs) -> tuple[Batch, ...]:
    fmt = args.const("format")
    ignore = args.const("ignore_class")
    if ignore and (any(v is not None for v in args["classes"]) or any(v is not None for v in args["class_weights"])
                   or args.const("output_class")):
        raise ValueError("segmentation.random_object_bbox: ignore_class is incompatible with classes, class_weights "
                         "and output_class")
    n = len(masks)
    n_out = _num_outputs({"format": fmt, "output_class": args.const("output_class")})
    if n == 0:
        return tuple(Batch([]) for _ in range(n_out))
    if masks.dtype not in _TYPES:
        raise TypeError(f"segmentation.random_object_bbox: unsupported input type {masks.dtype}; use bool, uint8, "
                        "int8, uint16, int16, uint32 or int32 labels")
    samples = masks.samples
    k_largest = args.const("k_largest")

    def one(i: int):
        try:
            data = samples[i].numpy()
            bg = _arg(args["background"], i)
            thr = _arg(args["threshold"], i)
            cls = _arg(args["classes"], i)
            return pick_object_box(
                data, ctx.sample_rng(i), background=None if bg is None else int(bg[0]),
                classes=None if cls is None else [int(c) for c in cls], class_weights=_arg(args["class_weights"], i),
                foreground_prob=float(_arg(args["foreground_prob"], i)[0]), ignore_class=ignore, k_largest=k_largest,
                threshold=None if thr is None else [int(t) for t in thr])
        except Exception as exc:  # noqa: BLE001 - re-raised naming the sample
            raise SampleError(i, ctx.source_info[i] if ctx.source_info else "", exc) from exc

    results = map_all(ctx.thread_pool, one, list(range(n)))
    start = np.stack([r[0] for r in results]).astype(np.int32)
    end = np.stack([r[1] for r in results]).astype(np.int32)
    if fmt == "box":
        outs = [np.concatenate([start, end], 1)]
    elif fmt == "start_end":
        outs = [start, end]
    else:
        outs = [start, end - start]
    if args.const("output_class"):
        outs.append(np.array([r[2] for r in results], np.int32))
    return tuple(Batch.from_dense(torch.from_numpy(np.ascontiguousarray(o))) for o in outs)
