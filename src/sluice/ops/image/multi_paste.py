"""``fn.multi_paste``: several regions of input images pasted into each output canvas (mosaics), as DALI's
operator.

With ``in_ids`` (one input batch), output sample ``i`` receives the regions of the input samples ``in_ids[i]``,
in order (a later paste covers an earlier one); without it, the ``i``-th sample of every input is pasted into
output ``i``. Per paste ``k`` of an output: the source region starts at ``in_anchors[k]`` (``(y, x)``; default 0)
and has ``shapes[k]`` (default: to the end of the source), and lands at ``out_anchors[k]`` (default 0); the
``*_rel`` forms give them as fractions of the source (anchors, shapes) or of the output (out anchors). The canvas
is ``output_size`` (``(H, W)``; default: the inputs' common size) and zero where nothing is pasted. Regions must
fit in their source and their canvas.

The whole batch is one gather: an owner map says which paste covers each output pixel (one pass per paste
index, not per sample), and every pixel then reads its source sample at its offset, alike on the CPU and the GPU.
Layouts HWC and HW.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import types
from sluice.kernels.resample import cast_round
from sluice.ops.image._geometry import round_half_away
from sluice.ops.tensor._util import as_float_list
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "paste_plan"]

SCHEMA = OpSchema(
    "multi_paste",
    doc="""Pastes regions of input images into each output canvas (mosaic). With ``in_ids`` one input batch,
    output ``i`` taking the samples ``in_ids[i]``; without, the ``i``-th sample of each input.

    Example::

        # a 2x2 mosaic of four 320x320 crops on a 640x640 canvas
        mosaic = fn.multi_paste(images, in_ids=ids, shapes=[[320, 320]] * 4,
                                out_anchors=[[0, 0], [0, 320], [320, 0], [320, 320]], output_size=[640, 640])
    """,
    inputs=(1, 64),
    devices=("cpu", "gpu"),
    args=[
        Arg("in_ids", "int_list", None, "Indices of the input samples pasted into each output.", per_sample=True),
        Arg("in_anchors", "int_list", None, "(y, x) of each source region, one row per paste.", per_sample=True),
        Arg("in_anchors_rel", "float_list", None, "in_anchors as fractions of the source size.", per_sample=True),
        Arg("shapes", "int_list", None, "(h, w) of each pasted region.", per_sample=True),
        Arg("shapes_rel", "float_list", None, "shapes as fractions of the source size.", per_sample=True),
        Arg("out_anchors", "int_list", None, "(y, x) where each region lands.", per_sample=True),
        Arg("out_anchors_rel", "float_list", None, "out_anchors as fractions of the output size.", per_sample=True),
        Arg("output_size", "int_list", None, "(H, W) of each output (default: the inputs' common size).",
            per_sample=True),
        Arg("dtype", types.DALIDataType, None, "Output type (default: the input's)."),
    ],
)


def _rows(value, k: int, name: str, i: int) -> np.ndarray | None:
    if value is None:
        return None
    v = np.asarray(as_float_list(value), np.float64)
    if v.size != 2 * k:
        raise ValueError(f"multi_paste: {name} of sample {i} has {v.size} values for {k} pastes; give a (y, x) or "
                         "(h, w) row per paste")
    return v.reshape(k, 2)


def paste_plan(src_hw: np.ndarray, ids: list[list[int]], args, out_hw: np.ndarray) -> np.ndarray:
    """``(n, K, 6)`` int64 rows ``(in_y, in_x, h, w, out_y, out_x)`` per output and paste (unused rows of outputs
    with fewer pastes: h = w = 0), checked against the sources and the canvases."""
    n = len(ids)
    kmax = max([len(x) for x in ids] + [1])
    plan = np.zeros((n, kmax, 6), np.int64)
    rnd = np.vectorize(round_half_away, otypes=[np.int64])
    for i in range(n):
        k = len(ids[i])
        if not k:
            continue
        src = src_hw[ids[i]].astype(np.float64)  # (k, 2)
        a = _rows(args["in_anchors"][i], k, "in_anchors", i)
        a_rel = _rows(args["in_anchors_rel"][i], k, "in_anchors_rel", i)
        if a is not None and a_rel is not None:
            raise ValueError("multi_paste: give in_anchors or in_anchors_rel, not both")
        anchor = a if a is not None else (rnd(a_rel * src) if a_rel is not None else np.zeros((k, 2)))
        s = _rows(args["shapes"][i], k, "shapes", i)
        s_rel = _rows(args["shapes_rel"][i], k, "shapes_rel", i)
        if s is not None and s_rel is not None:
            raise ValueError("multi_paste: give shapes or shapes_rel, not both")
        shape = s if s is not None else (rnd(s_rel * src) if s_rel is not None else src - anchor)
        o = _rows(args["out_anchors"][i], k, "out_anchors", i)
        o_rel = _rows(args["out_anchors_rel"][i], k, "out_anchors_rel", i)
        if o is not None and o_rel is not None:
            raise ValueError("multi_paste: give out_anchors or out_anchors_rel, not both")
        out_anchor = o if o is not None else (rnd(o_rel * out_hw[i].astype(np.float64)) if o_rel is not None
                                              else np.zeros((k, 2)))
        rows = np.concatenate([anchor, shape, out_anchor], 1).astype(np.int64)
        for j, (iy, ix, h, w, oy, ox) in enumerate(rows.tolist()):
            if min(iy, ix, h, w, oy, ox) < 0 or iy + h > src[j, 0] or ix + w > src[j, 1]:
                raise ValueError(f"multi_paste: paste {j} of output {i} takes ({iy}, {ix}) + ({h}, {w}) from input "
                                 f"sample {ids[i][j]} of size {src[j].astype(int).tolist()}: out of its bounds")
            if oy + h > out_hw[i, 0] or ox + w > out_hw[i, 1]:
                raise ValueError(f"multi_paste: paste {j} of output {i} lands at ({oy}, {ox}) with size ({h}, {w}), "
                                 f"outside the output of size {out_hw[i].tolist()}")
        plan[i, :k] = rows
    return plan


def _source(inputs: tuple[Batch, ...]) -> tuple[torch.Tensor, np.ndarray]:
    """The inputs as one padded batch of sources ``(m, H, W, C)`` and their ``(m, 3)`` shapes."""
    parts, shapes = [], []
    for b in inputs:
        data, sh = b.padded(fill=None)
        if data.dim() == 3:  # HW
            data, sh = data.unsqueeze(-1), np.concatenate([sh, np.ones((len(sh), 1), np.int64)], 1)
        parts.append(data)
        shapes.append(sh)
    if len(parts) == 1:
        return parts[0], shapes[0]
    ext = np.max([p.shape[1:] for p in parts], 0)
    padded = [torch.nn.functional.pad(p, (0, int(ext[2] - p.shape[3]), 0, int(ext[1] - p.shape[2]),
                                          0, int(ext[0] - p.shape[1]))) for p in parts]
    return torch.cat(padded), np.concatenate(shapes)


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def multi_paste(ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
    layout = ctx.layout_of(inputs[0])
    has_ids = any(v is not None for v in args["in_ids"])
    if has_ids and len(inputs) != 1:
        raise ValueError(f"multi_paste: with in_ids the operator takes one input batch, got {len(inputs)}")
    n = len(inputs[0])
    if any(len(b) != n for b in inputs):
        raise ValueError("multi_paste: the input batches differ in size")
    if n == 0:
        return Batch([], layout)
    if layout not in ("", "HWC", "HW"):
        raise ValueError(f"multi_paste: layout {layout!r} is not supported; use HWC or HW")
    dtypes = {b.dtype for b in inputs}
    if len(dtypes) > 1:
        raise TypeError(f"multi_paste: the inputs differ in type ({sorted(map(str, dtypes))})")
    src, src_shapes = _source(inputs)
    if len(set(src_shapes[:, 2].tolist())) > 1:
        raise ValueError("multi_paste: the inputs differ in their number of channels")
    if has_ids:
        ids = [[int(v) for v in as_float_list(args["in_ids"][i])] for i in range(n)]
        bad = [v for row in ids for v in row if not 0 <= v < n]
        if bad:
            raise ValueError(f"multi_paste: in_ids {bad[0]} is not a sample of the batch of {n}")
    else:
        ids = [[t * n + i for t in range(len(inputs))] for i in range(n)]
    given = [as_float_list(v) if v is not None else None for v in args["output_size"]]
    if any(g is None for g in given):
        if len({tuple(s) for s in src_shapes[:, :2].tolist()}) > 1:
            raise ValueError("multi_paste: the inputs differ in size; give output_size")
        given = [g if g is not None else src_shapes[0, :2].tolist() for g in given]
    out_hw = np.array([[int(v) for v in g] for g in given], np.int64).reshape(n, -1)
    if out_hw.shape[1] != 2:
        raise ValueError("multi_paste: output_size must be (H, W)")
    plan = paste_plan(src_shapes[:, :2], ids, args, out_hw)
    dev = src.device
    kmax = plan.shape[1]
    id_table = np.zeros((n, kmax), np.int64)
    for i, row in enumerate(ids):
        id_table[i, :len(row)] = row
    H, W = int(out_hw[:, 0].max()), int(out_hw[:, 1].max())
    p = torch.from_numpy(plan).to(dev, non_blocking=True)
    yy = torch.arange(H, device=dev).view(1, H, 1)
    xx = torch.arange(W, device=dev).view(1, 1, W)
    owner = torch.full((n, H, W), -1, dtype=torch.int64, device=dev)
    for j in range(kmax):  # later pastes cover earlier ones
        oy, ox, h, w = (p[:, j, c].view(n, 1, 1) for c in (4, 5, 2, 3))
        inside = (yy >= oy) & (yy < oy + h) & (xx >= ox) & (xx < ox + w)
        owner = torch.where(inside, j, owner)
    own = owner.clamp_min(0)
    rows = torch.gather(p, 1, own.view(n, -1, 1).expand(-1, -1, 6)).view(n, H, W, 6)
    sample = torch.gather(torch.from_numpy(id_table).to(dev, non_blocking=True), 1, own.view(n, -1)).view(n, H, W)
    sy = (rows[..., 0] + yy - rows[..., 4]).clamp(0, max(src.shape[1] - 1, 0))
    sx = (rows[..., 1] + xx - rows[..., 5]).clamp(0, max(src.shape[2] - 1, 0))
    out = src[sample, sy, sx]  # (n, H, W, C): one gather
    out = torch.where((owner >= 0).unsqueeze(-1), out, torch.zeros((), dtype=out.dtype, device=dev))
    dtype = args.const("dtype")
    if dtype is not None and dtype != types.NO_TYPE and types.to_torch_dtype(dtype) != out.dtype:
        out = cast_round(out.to(torch.float32), types.to_torch_dtype(dtype))
    c = int(src_shapes[0, 2])
    shapes = np.concatenate([out_hw, np.full((n, 1), c, np.int64)], 1)
    if inputs[0].shapes_array().shape[1] == 2:  # HW in, HW out
        return Batch.from_padded(out[..., 0], shapes[:, :2], layout)
    return Batch.from_padded(out, shapes, layout or "HWC")


