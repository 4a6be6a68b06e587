"""``fn.box_encoder``: SSD's matching of ground-truth boxes to a fixed set of anchors, as DALI's ``fn.box_encoder``.

Per sample (boxes ``M x 4`` in ``[l, t, r, b]``, labels ``M``), with ``A`` anchors (``[l, t, r, b]``):

1. the IoU of every box with every anchor; each box's best anchor (ties: the last) gets IoU 2, so that every box
   is matched to at least one anchor;
2. each anchor takes its best box (ties: the last); it is matched when that IoU exceeds ``criteria``;
3. a matched anchor outputs its box as ``[cx, cy, w, h]`` and the box's label; an unmatched one outputs itself as
   ``[cx, cy, w, h]`` and label 0.

With ``offset=True`` a matched anchor outputs, instead of the box, SSD's normalised offsets (eq. 2 of the SSD
paper, every value first multiplied by ``scale``)::

    ((cx_box - cx_anchor) / w_anchor - means[0]) / stds[0]      (and y alike)
    (log(w_box / w_anchor) - means[2]) / stds[2]                 (and h alike)

and unmatched anchors output zeros. The outputs have ``A`` rows whatever ``M`` is, so the batch is dense; on the GPU
the whole batch is one sequence of tensor operations on the padded boxes (``n x M_max x A`` IoUs); on the CPU the
matching and step 3 are one pass of the compiled core over each sample's boxes and anchors
(:func:`sluice.native.detection.encode_boxes`, the samples on the pipeline's core threads, the GIL released), which
gives the same values to the bit without the ``n x M_max x A`` tensors; ``offset=True`` then takes the offsets of
the core's rows with the same tensor code as the GPU (its ``log`` stays torch's, whose float32 results are
SLEEF's on x86 and need not equal ``std::log``'s to the bit).
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.native.detection import encode_boxes as host_encode_boxes
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "encode_boxes", "iou_matrix", "match_boxes"]

SCHEMA = OpSchema(
    "box_encoder",
    doc="""Encodes bounding boxes and labels against a set of anchors (SSD).

    Inputs: boxes ``M x 4`` as ``[l, t, r, b]`` (float) and labels ``M`` (int). Outputs: ``A x 4`` boxes as
    ``[cx, cy, w, h]`` (or normalised offsets with ``offset=True``) and ``A`` labels, 0 for anchors no box matched.

    Example::

        boxes, labels = fn.box_encoder(boxes, labels, anchors=default_boxes_ltrb, criteria=0.5, offset=True,
                                       scale=300, stds=[0.1, 0.1, 0.2, 0.2], device="gpu")
    """,
    inputs=2,
    input_names=("boxes", "labels"),
    outputs=2,
    devices=("cpu", "gpu"),
    output_layout="",
    args=[
        Arg("anchors", "float_list", [], "The anchors, flattened [l, t, r, b] rows (4 values each)."),
        Arg("criteria", float, 0.5, "IoU above which an anchor is matched to its best box.", min=0, max=1),
        Arg("offset", bool, False, "Output normalised offsets to the anchors instead of the boxes."),
        Arg("scale", float, 1.0, "Factor applied to boxes and anchors before the offsets are computed."),
        Arg("means", "float_list", [0.0, 0.0, 0.0, 0.0], "[x, y, w, h] means subtracted from the offsets."),
        Arg("stds", "float_list", [1.0, 1.0, 1.0, 1.0], "[x, y, w, h] standard deviations dividing the offsets."),
    ],
)


def iou_matrix(boxes: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """IoU of ltrb ``boxes (..., M, 4)`` with ltrb ``anchors (A, 4)``: ``(..., M, A)`` (0 where the union is empty)."""
    b = boxes.unsqueeze(-2)
    lo = torch.maximum(b[..., :2], anchors[..., :2])
    hi = torch.minimum(b[..., 2:], anchors[..., 2:])
    wh = (hi - lo).clamp_min(0)
    inter = wh[..., 0] * wh[..., 1]
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    area_a = (anchors[:, 2] - anchors[:, 0]) * (anchors[:, 3] - anchors[:, 1])
    union = area_b + area_a - inter
    return torch.where(union > 0, inter / torch.where(union > 0, union, torch.ones_like(union)),
                       torch.zeros_like(inter))


def _last_argmax(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Max and the index of its LAST occurrence along ``dim`` (DALI's ``>=`` scans)."""
    flipped = x.flip(dim)
    value, idx = flipped.max(dim)
    return value, x.shape[dim] - 1 - idx


def _center_wh(ltrb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return (ltrb[..., :2] + ltrb[..., 2:]) * 0.5, ltrb[..., 2:] - ltrb[..., :2]


def _offsets(rows: torch.Tensor, matched: torch.Tensor, a_center: torch.Tensor, a_wh: torch.Tensor, scale: float,
             means, stds) -> torch.Tensor:
    """SSD's normalised offsets of each anchor's box (``rows (n, A, 4)`` ``[cx, cy, w, h]``, only the ``matched``
    rows used) to the anchors; zeros where unmatched."""
    dev = rows.device
    mean = torch.tensor(list(means), dtype=torch.float32, device=dev)
    std = torch.tensor(list(stds), dtype=torch.float32, device=dev)
    s = torch.tensor(float(scale), dtype=torch.float32, device=dev)
    bc, bw, ac, aw = rows[..., :2] * s, rows[..., 2:] * s, a_center * s, a_wh * s
    xy = ((bc - ac) / aw - mean[:2]) / std[:2]
    wh = (torch.log(bw / aw) - mean[2:]) / std[2:]
    return torch.cat([xy, wh], -1).masked_fill_(~matched.unsqueeze(2), 0.0)


def match_boxes(boxes: torch.Tensor, counts: torch.Tensor, anchors: torch.Tensor,
                criteria: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The matching of a padded batch (``boxes (n, M, 4)`` ltrb float32, the first ``counts[i]`` rows sample
    ``i``'s) to ``anchors (A, 4)``: each anchor's box ``(n, A)`` int64 and whether it is matched ``(n, A)`` bool.

    Example::

        best, matched = match_boxes(torch.tensor([[[0.1, 0.1, 0.5, 0.5]]]), torch.tensor([1]),
                                    torch.tensor([[0.1, 0.1, 0.5, 0.5], [0.5, 0.5, 1, 1]]), 0.5)
        # best [[0, 0]], matched [[True, False]]
    """
    n, m = boxes.shape[:2]
    a = anchors.shape[0]
    dev = boxes.device
    if m == 0 or a == 0:
        return torch.zeros((n, a), dtype=torch.int64, device=dev), torch.zeros((n, a), dtype=torch.bool, device=dev)
    valid = torch.arange(m, device=dev).unsqueeze(0) < counts.view(n, 1)  # (n, M)
    ious = iou_matrix(boxes, anchors)  # (n, M, A)
    _, best_anchor = _last_argmax(ious, 2)  # (n, M): each box's best anchor, forced to IoU 2
    ious = ious.scatter(2, best_anchor.unsqueeze(2), 2.0)
    ious = torch.where(valid.unsqueeze(2), ious, torch.full_like(ious, -1.0))
    best_iou, best_box = _last_argmax(ious, 1)  # (n, A): each anchor's best box
    return best_box, best_iou > criteria


def encode_boxes(boxes: torch.Tensor, counts: torch.Tensor, labels: torch.Tensor, anchors: torch.Tensor, *,
                 criteria: float = 0.5, offset: bool = False, scale: float = 1.0,
                 means=(0.0, 0.0, 0.0, 0.0), stds=(1.0, 1.0, 1.0, 1.0)) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode a padded batch: ``boxes (n, M, 4)`` ltrb float32 of which the first ``counts[i]`` rows are sample
    ``i``'s, ``labels (n, M)``, ``anchors (A, 4)`` ltrb. Returns ``(n, A, 4)`` float32 and ``(n, A)`` labels.

    Example::

        out, lab = encode_boxes(torch.tensor([[[0.1, 0.1, 0.5, 0.5]]]), torch.tensor([1]),
                                torch.tensor([[3]]), torch.tensor([[0.1, 0.1, 0.5, 0.5], [0.5, 0.5, 1, 1]]))
        # out[0] = [[0.3, 0.3, 0.4, 0.4], [0.75, 0.75, 0.5, 0.5]], lab[0] = [3, 0]
    """
    n, m = boxes.shape[:2]
    a = anchors.shape[0]
    dev = boxes.device
    a_center, a_wh = _center_wh(anchors)
    best_box, matched = match_boxes(boxes, counts, anchors, criteria)
    # centre and size per box, then gathered per anchor: the same values as computing them on the gathered rows,
    # with the n x A x 4 work done once (a third of the CPU's time in this function)
    per_box = torch.cat(_center_wh(boxes), -1)
    gathered = torch.gather(per_box, 1, best_box.unsqueeze(2).expand(n, a, 4)) if m else \
        torch.zeros((n, a, 4), dtype=boxes.dtype, device=dev)
    lab = torch.gather(labels, 1, best_box) if m else torch.zeros((n, a), dtype=labels.dtype, device=dev)
    out_labels = lab.masked_fill(~matched, 0)
    if offset:
        out = _offsets(gathered, matched, a_center, a_wh, scale, means, stds)
    else:
        anchor_rows = torch.cat([a_center, a_wh], -1).expand(n, a, 4)
        out = torch.where(matched.unsqueeze(2), gathered, anchor_rows)
    return out, out_labels


_ANCHORS: dict[tuple[int, str], tuple[list, torch.Tensor]] = {}  # (id of the argument's list, device): tensor


def _anchors(args: BatchArgs, device: torch.device) -> torch.Tensor:
    """The anchors as an (A, 4) tensor, made once per argument list and device (the 8732 anchors of SSD300 took
    a few ms a batch to convert from the list)."""
    values = args.const("anchors") or []
    if not values or len(values) % 4:
        raise ValueError(f"box_encoder: anchors must be a non-empty list of [l, t, r, b] rows (a multiple of 4 "
                         f"values), got {len(values)} values")
    key = (id(values), str(device))
    hit = _ANCHORS.get(key)
    if hit is not None and hit[0] is values:
        return hit[1]
    tensor = torch.tensor(np.asarray(values, np.float32).reshape(-1, 4), device=device)
    if len(_ANCHORS) > 16:
        _ANCHORS.clear()
    _ANCHORS[key] = (values, tensor)  # holding the list keeps its id from being reused
    return tensor


def _back_to_back(batch: Batch, starts: np.ndarray) -> torch.Tensor:
    """The batch's samples in one 1-D CPU tensor, sample ``i`` from element ``starts[i]``: its packed buffer where
    the samples lie so, else one copy."""
    flat, shapes, offsets = batch.packed_form()
    total = int(shapes.prod(1).sum())
    if np.array_equal(offsets, starts):
        return flat[:total]
    return torch.cat([s.reshape(-1) for s in batch.samples]) if len(batch) else flat[:0]


def _encode(ctx: BatchContext, boxes: Batch, labels: Batch, args: BatchArgs, host_matching: bool
            ) -> tuple[Batch, Batch]:
    """The whole batch: with ``host_matching`` (and the core built) the compiled core's pass over each sample's
    boxes, which writes the outputs; else boxes and labels padded to the largest count, one IoU tensor, gathers and
    selects (:func:`encode_boxes`)."""
    n = len(boxes)
    dev = boxes.torch_device
    anchors = _anchors(args, dev)
    for name in ("means", "stds"):
        if len(args.const(name)) != 4:
            raise ValueError(f"box_encoder: {name} must have 4 values ([x, y, w, h]), got {args.const(name)}")
    if any(s == 0 for s in args.const("stds")):
        raise ValueError(f"box_encoder: stds must be non-zero, got {args.const('stds')}")
    if n == 0:
        return Batch([]), Batch([])
    bshapes = boxes.shapes_array()
    lshapes = labels.shapes_array()
    if bshapes.shape[1] != 2 or (len(bshapes) and (bshapes[:, 1] != 4).any()):
        i = int(np.argmax(bshapes[:, -1] != 4)) if bshapes.shape[1] else 0
        raise ValueError(f"box_encoder: boxes must be M x 4 [l, t, r, b], got shape {tuple(bshapes[i])} in sample "
                         f"{i}")
    counts = bshapes[:, 0]
    lcounts = lshapes[:, 0] if lshapes.shape[1] else np.ones(n, np.int64)
    if (lcounts != counts).any() or lshapes.shape[1] not in (1, 2) or (lshapes.shape[1] == 2 and
                                                                        (lshapes[:, 1] != 1).any()):
        i = int(np.argmax(lcounts != counts)) if (lcounts != counts).any() else 0
        raise ValueError(f"box_encoder: sample {i} has {counts[i]} boxes but labels of shape {tuple(lshapes[i])}; "
                         "give one label per box (M or M x 1)")
    if host_matching and labels.dtype != torch.bfloat16:  # labels NumPy can hold
        starts = np.concatenate([[0], np.cumsum(counts[:-1])])
        found = host_encode_boxes(_back_to_back(boxes, starts * 4).to(torch.float32).numpy(),
                                  _back_to_back(labels, starts).numpy(), counts, anchors.numpy(),
                                  args.const("criteria"), pool=getattr(ctx.thread_pool, "core", None))
        if found is not None:
            out, out_labels, matched = (torch.from_numpy(x) for x in found)
            if args.const("offset"):
                out = _offsets(out, matched, *_center_wh(anchors), args.const("scale"), args.const("means"),
                               args.const("stds"))
            return Batch.from_dense(out), Batch.from_dense(out_labels)
    padded_boxes, _ = boxes.padded(fill=0.0)
    padded_labels, _ = labels.padded(fill=0)
    lab = padded_labels.reshape(n, -1)
    out, out_labels = encode_boxes(padded_boxes.to(torch.float32).reshape(n, -1, 4),
                                   torch.from_numpy(counts).to(dev, non_blocking=True), lab, anchors,
                                   criteria=args.const("criteria"), offset=args.const("offset"),
                                   scale=args.const("scale"), means=args.const("means"), stds=args.const("stds"))
    return Batch.from_dense(out), Batch.from_dense(out_labels)


@SCHEMA.batch_kernel("cpu")
def box_encoder_cpu(ctx: BatchContext, boxes: Batch, labels: Batch, *, args: BatchArgs) -> tuple[Batch, Batch]:
    """The matching and encoding in the compiled core (one pass per sample, no n x M x A tensors); ``offset=True``'s
    offsets as on the GPU."""
    return _encode(ctx, boxes, labels, args, host_matching=True)


@SCHEMA.batch_kernel("gpu")
def box_encoder_gpu(ctx: BatchContext, boxes: Batch, labels: Batch, *, args: BatchArgs) -> tuple[Batch, Batch]:
    return _encode(ctx, boxes, labels, args, host_matching=False)
