"""``fn.decoders.numpy``: NumPy arrays from the bytes of ``.npy`` files, as DALI's operator.

Each input sample is a 1-D uint8 tensor holding a whole ``.npy`` file (what ``fn.readers.file``,
``fn.readers.webdataset`` or ``fn.readers.tfrecord`` give); the output has the array's shape and type, C order
(Fortran-ordered arrays are transposed into it). The samples of a batch must share their rank and type, unless
``dtype`` casts them all. Headers are parsed as ``fn.readers.numpy`` parses files (:func:`parse_header`); the
samples are decoded into one packed buffer in the pipeline's threads. Like DALI's, it runs on the CPU.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import types
from sluice.errors import SampleError
from sluice.ops.readers.numpy import parse_header
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import map_all
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "decode_npy"]

SCHEMA = OpSchema(
    "decoders.numpy",
    doc="""Decodes NumPy arrays from the bytes of ``.npy`` files (1-D uint8 samples). The output has the array's
    shape and type (``dtype`` casts it); the samples of a batch must share their rank and, without ``dtype``,
    their type.

    Example::

        data = fn.readers.webdataset(paths=shards, ext=["npy"])
        arrays = fn.decoders.numpy(data, dtype=types.FLOAT)
    """,
    devices=("cpu",),
    output_layout="",
    args=[Arg("dtype", types.DALIDataType, None, "Output type (default: the array's own).")],
)


def decode_npy(data: np.ndarray, name: str = "sample") -> np.ndarray:
    """The array stored in the ``.npy`` bytes ``data`` (a view of them where the order allows it)."""
    raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    h = parse_header(raw[:4096].tobytes() if raw.size > 4096 else raw.tobytes(), name, raw.size)
    if h.offset > 4096:  # an unusually long header: parse it whole
        h = parse_header(raw.tobytes(), name, raw.size)
    flat = raw[h.offset:h.offset + h.nbytes].view(h.dtype)
    if h.fortran:
        return flat.reshape(h.shape[::-1]).transpose()
    return flat.reshape(h.shape)


@SCHEMA.batch_kernel("cpu")
def decoders_numpy(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    n = len(data)
    if n == 0:
        return Batch([])
    if data.dtype not in (torch.uint8, torch.int8):
        raise TypeError(f"decoders.numpy: the input must hold the bytes of .npy files (uint8), got {data.dtype}")
    samples = data.samples
    names = [s or f"sample {i}" for i, s in enumerate(data.source_info)]

    def one(i: int) -> np.ndarray:
        try:
            return decode_npy(samples[i].numpy(), names[i])
        except Exception as exc:  # noqa: BLE001 - re-raised naming the sample
            raise SampleError(i, data.source_info[i], exc) from exc

    arrays = map_all(ctx.thread_pool, one, list(range(n)))
    want = args.const("dtype")
    if want is not None and want != types.NO_TYPE:
        dtype = types.to_torch_dtype(want)
    else:
        dtypes = {a.dtype for a in arrays}
        if len(dtypes) > 1:
            raise ValueError(f"decoders.numpy: the arrays of a batch differ in type ({sorted(map(str, dtypes))}); "
                             "give dtype to cast them to one")
        dtype = torch.from_numpy(np.empty(0, arrays[0].dtype.newbyteorder("="))).dtype
    ranks = {a.ndim for a in arrays}
    if len(ranks) > 1:
        raise ValueError(f"decoders.numpy: the arrays of a batch differ in rank ({sorted(ranks)}); all samples must "
                         "have the same number of dimensions")
    shapes = np.array([a.shape for a in arrays], np.int64).reshape(n, -1)
    sizes = np.prod(shapes, axis=1, dtype=np.int64) if shapes.shape[1] else np.ones(n, np.int64)
    flat = torch.empty(int(sizes.sum()), dtype=dtype)
    out = flat.numpy()
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    def copy(i: int) -> None:  # the cast and the byte order as part of the copy
        out[starts[i]:starts[i] + sizes[i]] = arrays[i].reshape(-1)

    map_all(ctx.thread_pool, copy, list(range(n)))
    return Batch.from_packed(flat, shapes)
