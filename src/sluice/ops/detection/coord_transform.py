"""``fn.coord_transform``: a linear transform of points or vectors, ``out = M @ in + T``, as DALI's operator.

The input's innermost dimension holds the coordinates (``D_in`` of them); ``M`` is a ``D_out x D_in`` matrix (a
scalar: that multiple of the identity), ``T`` a vector of ``D_out`` (a scalar: repeated), or ``MT`` the two
together as ``D_out x (D_in + 1)``; all may vary per sample. The output keeps the input's outer shape with
``D_out`` coordinates, computed in float32 and converted to ``dtype`` (rounded and saturated for integers). The
whole batch is one gather of each point's sample matrix and one batched product, alike on the CPU and the GPU.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import types
from sluice.kernels.ragged import segments
from sluice.kernels.resample import cast_round
from sluice.ops.tensor._util import as_float_list
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "affine_of"]

SCHEMA = OpSchema(
    "coord_transform",
    doc="""Applies ``out = M @ in + T`` to the points (innermost dimension) of each sample.

    Example::

        # rotate 2-D keypoints by 90 degrees about (0.5, 0.5)
        kp = fn.coord_transform(keypoints, M=[0, -1, 1, 0], T=[1, 0])
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("M", "float_list", None, "D_out x D_in matrix, row-major (a scalar: a multiple of the identity).",
            per_sample=True),
        Arg("T", "float_list", None, "Translation of D_out values (a scalar: repeated).", per_sample=True),
        Arg("MT", "float_list", None, "M and T together: D_out x (D_in + 1), row-major (excludes M and T).",
            per_sample=True),
        Arg("dtype", types.DALIDataType, types.FLOAT, "Output type (integers are rounded and saturated)."),
    ],
)


def affine_of(d_in: int, m, t, mt, sample: int = 0) -> np.ndarray:
    """The ``D_out x (D_in + 1)`` float32 matrix of one sample's arguments."""
    if mt is not None:
        if m is not None or t is not None:
            raise ValueError("coord_transform: MT cannot be given with M or T")
        v = np.asarray(as_float_list(mt), np.float32)
        if v.size % (d_in + 1):
            raise ValueError(f"coord_transform: MT of sample {sample} has {v.size} values; it must be D_out x "
                             f"{d_in + 1} for {d_in} input coordinates")
        return v.reshape(-1, d_in + 1)
    mv = np.asarray(as_float_list(m) if m is not None else [1.0], np.float32)
    if mv.size == 1:
        mat = np.eye(d_in, dtype=np.float32) * mv[0]
    elif mv.size % d_in:
        raise ValueError(f"coord_transform: M of sample {sample} has {mv.size} values; it must be D_out x {d_in} "
                         f"for {d_in} input coordinates (or one value)")
    else:
        mat = mv.reshape(-1, d_in)
    tv = np.asarray(as_float_list(t) if t is not None else [0.0], np.float32)
    if tv.size == 1:
        tv = np.full(mat.shape[0], tv[0], np.float32)
    if tv.size != mat.shape[0]:
        raise ValueError(f"coord_transform: T of sample {sample} has {tv.size} values but M makes {mat.shape[0]} "
                         "output coordinates")
    return np.concatenate([mat, tv[:, None]], 1)


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def coord_transform(ctx: BatchContext, points: Batch, *, args: BatchArgs) -> Batch:
    n = len(points)
    dtype = types.to_torch_dtype(args.const("dtype"))
    if n == 0:
        return Batch([], points.layout())
    flat, shapes, offsets = points.packed_form()
    if shapes.shape[1] == 0:
        raise ValueError("coord_transform: the input needs an innermost dimension of coordinates (got scalars)")
    d_in = int(shapes[0, -1])
    if (shapes[:, -1] != d_in).any():
        raise ValueError(f"coord_transform: the samples have {sorted(set(shapes[:, -1].tolist()))} coordinates per "
                         "point; all must have the same number")
    mats = [affine_of(d_in, args["M"][i], args["T"][i], args["MT"][i], i) for i in range(n)]
    d_out = mats[0].shape[0]
    if any(m.shape[0] != d_out for m in mats):
        raise ValueError("coord_transform: the number of output coordinates must be the same for every sample")
    sizes = np.prod(shapes, axis=1, dtype=np.int64)
    dev = flat.device
    if np.array_equal(offsets, np.concatenate([[0], np.cumsum(sizes)[:-1]])):
        data = flat[: int(sizes.sum())]
    else:
        data = torch.cat([flat[o:o + s] for o, s in zip(offsets.tolist(), sizes.tolist())])
    rows = data.reshape(-1, d_in).to(torch.float32)
    seg, _ = segments(sizes // d_in, dev)
    table = torch.from_numpy(np.stack(mats)).to(dev, non_blocking=True)  # (n, D_out, D_in + 1)
    mt = table[seg]
    out = torch.einsum("pij,pj->pi", mt[:, :, :d_in], rows) + mt[:, :, d_in]
    out_shapes = shapes.copy()
    out_shapes[:, -1] = d_out
    return Batch.from_packed(cast_round(out, dtype).reshape(-1), out_shapes, points.layout())
