"""``fn.segmentation.select_masks``: the polygons (and their vertices) of a chosen subset of masks, as DALI's
operator.

Inputs per sample: ``mask_ids`` (1-D int32, no repeats), ``polygons`` (``N x 3`` int32 rows ``[mask_id,
start_vertex, end_vertex)``) and ``vertices`` (``M x D``, any type). Outputs, in the order of ``mask_ids``: one
polygon per selected mask (a mask's last polygon row, as DALI keeps it) with its vertex range renumbered into the
output vertices, and those vertices back to back. ``reindex_masks`` replaces each mask id by its position in
``mask_ids``. A selected id with no polygon, a repeated id or a vertex range outside the vertices is an error
naming the sample. Like DALI's, the operator runs on the CPU.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.errors import SampleError
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "select_polygons"]

SCHEMA = OpSchema(
    "segmentation.select_masks",
    doc="""Selects the polygons of the masks listed in ``mask_ids`` and their vertices; outputs polygons and
    vertices (vertex ranges renumbered).

    Example::

        polygons, vertices = fn.segmentation.select_masks(mask_ids, polygons, vertices, reindex_masks=True)
    """,
    inputs=3,
    input_names=("mask_ids", "polygons", "vertices"),
    outputs=2,
    devices=("cpu",),
    output_layout="",
    args=[Arg("reindex_masks", bool, False, "Replace the mask ids by their positions in mask_ids.")],
)


def select_polygons(mask_ids: np.ndarray, polygons: np.ndarray, vertices: np.ndarray,
                    reindex: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One sample: the selected polygons (``len(mask_ids) x 3`` int32) and their vertices."""
    ids = [int(v) for v in np.asarray(mask_ids).reshape(-1)]
    if len(set(ids)) != len(ids):
        dup = next(v for v in ids if ids.count(v) > 1)
        raise ValueError(f"mask_ids should not have duplicated values; {dup} is repeated")
    polys = np.asarray(polygons).reshape(-1, 3)
    ranges: dict[int, tuple[int, int]] = {}
    wanted = set(ids)
    nv = len(vertices)
    for mask_id, start, end in polys.tolist():
        if mask_id not in wanted:
            continue
        if start < 0 or end > nv:
            raise ValueError(f"the vertex range [{start}, {end}) of mask id {mask_id} is out of the {nv} vertices")
        if end < start:
            raise ValueError(f"the vertex range of mask id {mask_id} starts after it ends: [{start}, {end})")
        ranges[mask_id] = (start, end)  # the last polygon of a mask wins, as in DALI
    missing = [v for v in ids if v not in ranges]
    if missing:
        raise ValueError(f"selected mask_id {missing[0]} is not present in the polygons")
    out_polys = np.zeros((len(ids), 3), np.int32)
    picks = []
    at = 0
    for k, mask_id in enumerate(ids):
        start, end = ranges[mask_id]
        out_polys[k] = (k if reindex else mask_id, at, at + end - start)
        picks.append(np.arange(start, end))
        at += end - start
    index = np.concatenate(picks) if picks else np.zeros(0, np.int64)
    return out_polys, np.asarray(vertices)[index]


@SCHEMA.batch_kernel("cpu")
def select_masks(ctx: BatchContext, mask_ids: Batch, polygons: Batch, vertices: Batch, *,
                 args: BatchArgs) -> tuple[Batch, Batch]:
    n = len(polygons)
    if not (len(mask_ids) == n == len(vertices)):
        raise ValueError(f"segmentation.select_masks: the inputs have {len(mask_ids)}, {n} and {len(vertices)} "
                         "samples; they must have the same number")
    for name, b in (("mask_ids", mask_ids), ("polygons", polygons)):
        if n and b.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"segmentation.select_masks: {name} must hold int32 values, got {b.dtype}")
    if n and polygons.shapes_array().shape[1] == 2 and (polygons.shapes_array()[:, 1] != 3).any():
        raise ValueError("segmentation.select_masks: polygons must have 3 columns: mask_id, start_idx, end_idx")
    polys, verts = [], []
    for i in range(n):
        try:
            v = vertices[i]
            p, sel = select_polygons(mask_ids[i].numpy(), polygons[i].numpy(), np.arange(v.shape[0]),
                                     args.const("reindex_masks"))
        except Exception as exc:  # noqa: BLE001 - re-raised naming the sample
            raise SampleError(i, polygons.source_info[i], exc) from exc
        polys.append(torch.from_numpy(p))
        verts.append(v[torch.from_numpy(sel)])
    return Batch(polys), Batch(verts)
