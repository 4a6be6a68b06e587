"""``fn.bbox_paste``: moves normalised boxes with their image when it is pasted on a larger canvas (``fn.paste``),
as DALI's ``fn.bbox_paste``.

With ``ratio`` the canvas size over the image size and ``paste_x``, ``paste_y`` the paste position in [0, 1]
(``(0, 0)`` top-left, ``(1, 1)`` bottom-right)::

    x' = x / ratio + paste_x * (ratio - 1) / ratio          (y alike; both corners with ltrb=True)
    w' = w / ratio                                          (xywh boxes: sizes only scale)

The offset is lowered (to the float32 below ``1 - 1 / ratio``) when ``1 / ratio + offset`` would exceed 1, so that
boxes inside [0, 1] stay there, as DALI does. The whole batch is one set of element-wise operations on its packed
rows (per-sample scale and offsets spread to the rows), on the CPU and the GPU alike.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.kernels.ragged import per_element, segments
from sluice.ops.tensor._util import as_float_list
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "paste_offsets"]

SCHEMA = OpSchema(
    "bbox_paste",
    doc="""Transforms normalised boxes so that they stay on their objects after ``fn.paste`` puts the image on a
    canvas ``ratio`` times larger at ``(paste_x, paste_y)``.

    Example::

        ratio = fn.random.uniform(range=(1, 4))
        px, py = fn.random.uniform(range=(0, 1)), fn.random.uniform(range=(0, 1))
        images = fn.paste(images, ratio=ratio, paste_x=px, paste_y=py, fill_value=(104, 117, 123))
        boxes = fn.bbox_paste(boxes, ratio=ratio, paste_x=px, paste_y=py, ltrb=True)
    """,
    devices=("cpu", "gpu"),
    output_layout="",
    args=[
        Arg("ratio", float, None, "Canvas size over input size (at least 1).", per_sample=True, min=1),
        Arg("ltrb", bool, False, "Boxes are [l, t, r, b]; otherwise [x, y, w, h]."),
        Arg("paste_x", float, 0.5, "Horizontal paste position in [0, 1].", per_sample=True),
        Arg("paste_y", float, 0.5, "Vertical paste position in [0, 1].", per_sample=True),
    ],
)


def paste_offsets(ratio: np.ndarray, paste: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(scale, offset)`` in float32 per sample, DALI's arithmetic: ``scale = 1 / ratio``, ``offset = paste *
    (ratio - 1) / ratio``, lowered one float32 step at a time below ``1 - scale`` while ``scale + offset > 1``."""
    ratio = np.asarray(ratio, np.float32)
    scale = (np.float32(1) / ratio).astype(np.float32)
    ofs = (np.asarray(paste, np.float32) * ((ratio - np.float32(1)) / ratio)).astype(np.float32)
    over = scale + ofs > 1
    ofs = np.where(over, (np.float32(1) - scale).astype(np.float32), ofs).astype(np.float32)
    while True:
        over = (scale + ofs).astype(np.float32) > 1
        if not over.any():
            return scale, ofs
        ofs = np.where(over, np.nextafter(ofs, np.float32(-1)), ofs).astype(np.float32)


def _floats(values, name: str) -> np.ndarray:
    out = []
    for i, v in enumerate(values):
        one = as_float_list(v)
        if len(one) != 1:
            raise ValueError(f"bbox_paste: {name} of sample {i} must be one number, got {len(one)}")
        out.append(one[0])
    return np.asarray(out, np.float32)


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def bbox_paste(ctx: BatchContext, boxes: Batch, *, args: BatchArgs) -> Batch:
    n = len(boxes)
    if n == 0:
        return Batch([], boxes.layout())
    if boxes.dtype != torch.float32:
        raise TypeError(f"bbox_paste: boxes must be float32, got {boxes.dtype}")
    if any(r is None for r in args["ratio"]):
        raise ValueError("bbox_paste: missing required argument 'ratio'")
    flat, shapes, offsets = boxes.packed_form()
    sizes = np.prod(shapes, axis=1, dtype=np.int64) if shapes.shape[1] else np.ones(n, np.int64)
    bad = np.flatnonzero(sizes % 4)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"bbox_paste: sample {i} holds {sizes[i]} values (shape {tuple(shapes[i])}); boxes are rows "
                         "of 4 values")
    ratio = _floats(args["ratio"], "ratio")
    if (ratio < 1).any():
        raise ValueError(f"bbox_paste: ratio must be at least 1, got {ratio[ratio < 1][0]}")
    px, py = _floats(args["paste_x"], "paste_x"), _floats(args["paste_y"], "paste_y")
    scale, ofsx = paste_offsets(ratio, px)
    _, ofsy = paste_offsets(ratio, py)
    dev = flat.device
    contiguous = np.array_equal(offsets, np.concatenate([[0], np.cumsum(sizes)[:-1]]))
    data = flat[: int(sizes.sum())] if contiguous else torch.cat([flat[o:o + s] for o, s in zip(offsets.tolist(),
                                                                                              sizes.tolist())])
    rows = data.view(-1, 4)
    seg, _ = segments(sizes // 4, dev)
    params = np.stack([scale, ofsx, ofsy], 1)
    p = per_element(params, seg)  # (rows, 3)
    s = p[:, 0:1]
    add = torch.stack([p[:, 1], p[:, 2]], 1)
    xy = rows[:, :2] * s + add
    far = rows[:, 2:] * s + (add if args.const("ltrb") else 0)
    out = torch.cat([xy, far], 1).reshape(-1)
    return Batch.from_packed(out, shapes, boxes.layout())
