"""``fn.decoders.inflate``: decompresses byte samples into tensors of a given shape and type, as DALI's operator.

Each input sample (1-D uint8) is one compressed chunk, or several back to back (given by ``chunk_offsets`` and/or
``chunk_sizes``, per sample), each inflating to ``shape`` elements of ``dtype``; several chunks are stacked along a
new outer axis (named ``sequence_axis_name`` in the layout). ``algorithm``: ``"LZ4"`` (DALI's: raw LZ4 blocks, as
nvCOMP writes them; the ``lz4`` package, ``pip install 'sluice[lz4]'``) or ``"DEFLATE"`` (a sluice extension: zlib,
gzip or raw deflate streams, with the standard library's zlib).

DALI runs this on the GPU with nvCOMP. sluice decompresses on the host in the pipeline's threads, straight into
one buffer for the batch; on the ``gpu`` device the compressed batch comes to the host in one copy and the
inflated batch goes back in one.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

from sluice import types
from sluice._optional import require
from sluice.errors import SampleError
from sluice.ops.tensor._util import as_float_list
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import map_all
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "inflate_chunk"]

_ALGORITHMS = ("LZ4", "DEFLATE")


SCHEMA = OpSchema(
    "decoders.inflate",
    doc="""Decompresses each sample (1-D uint8: one compressed chunk, or several given by ``chunk_offsets`` /
    ``chunk_sizes``) into a tensor of ``shape`` and ``dtype``; chunks stack along a new outer axis.

    Example::

        frames = fn.decoders.inflate(data.gpu(), shape=[480, 640, 3], chunk_sizes=sizes, layout="HWC")  # FHWC
    """,
    devices=("cpu", "gpu"),
    output_layout="",
    args=[
        Arg("shape", "int_list", REQUIRED, "Shape of one inflated chunk.", per_sample=True, min=0),
        Arg("algorithm", str, "LZ4", "Compression: 'LZ4' (raw LZ4 blocks) or 'DEFLATE' (zlib, gzip or raw deflate).",
            choices=_ALGORITHMS),
        Arg("chunk_offsets", "int_list", None, "Byte offsets of the chunks in each sample.", per_sample=True, min=0),
        Arg("chunk_sizes", "int_list", None, "Byte sizes of the chunks in each sample.", per_sample=True, min=0),
        Arg("dtype", types.DALIDataType, types.UINT8, "Type of the inflated data."),
        Arg("layout", str, "", "Layout of one inflated chunk."),
        Arg("sequence_axis_name", str, "F", "Name of the outer axis of samples of several chunks."),
    ],
)


def inflate_chunk(data: bytes | memoryview, size: int, algorithm: str) -> bytes:
    """Decompress one chunk expected to inflate to ``size`` bytes."""
    if algorithm == "LZ4":
        block = require("lz4.block", "fn.decoders.inflate (algorithm 'LZ4')")
        return block.decompress(data, uncompressed_size=size)
    for wbits in (47, -15):  # zlib or gzip (header detected), then raw deflate
        try:
            return zlib.decompress(data, wbits, max(size, 1))
        except zlib.error:
            continue
    raise ValueError("the data is not a deflate stream")


def _ints(value) -> list[int] | None:
    return None if value is None else [int(round(v)) for v in as_float_list(value)]


def _chunks(i: int, total: int, offsets: list[int] | None, sizes: list[int] | None) -> list[tuple[int, int]]:
    """(start, size) of each chunk of a sample of ``total`` bytes."""
    if offsets is None and sizes is None:
        return [(0, total)]
    if offsets is None:
        offsets = list(np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)) if sizes else []
    if sizes is None:
        sizes = [b - a for a, b in zip(offsets, list(offsets[1:]) + [total])]
    if len(offsets) != len(sizes):
        raise ValueError(f"sample {i}: {len(offsets)} chunk_offsets but {len(sizes)} chunk_sizes")
    for a, s in zip(offsets, sizes):
        if a < 0 or s < 0 or a + s > total:
            raise ValueError(f"sample {i}: the chunk at byte {a} of {s} bytes leaves the sample of {total} bytes")
    return list(zip(offsets, sizes))


def _inflate(ctx: BatchContext, data: Batch, args: BatchArgs) -> Batch:
    n = len(data)
    algorithm = args.const("algorithm")
    dtype = types.to_torch_dtype(args.const("dtype"))
    layout = args.const("layout") or ""
    if n == 0:
        return Batch([], layout)
    if data.dtype not in (torch.uint8, torch.int8):
        raise TypeError(f"decoders.inflate: the input must hold compressed bytes (uint8), got {data.dtype}")
    host = data if data.device == "cpu" else data.as_cpu()
    flat, shapes, offsets = host.packed_form()
    raw = flat.numpy().view(np.uint8)
    has_chunks = any(v is not None for v in args["chunk_offsets"]) or any(v is not None for v in args["chunk_sizes"])
    itemsize = torch.empty(0, dtype=dtype).element_size()
    plans = []
    out_shapes = []
    for i in range(n):
        shape = _ints(args["shape"][i]) or []
        total = int(np.prod(shapes[i])) if shapes.shape[1] else 1
        chunks = _chunks(i, total, _ints(args["chunk_offsets"][i]), _ints(args["chunk_sizes"][i]))
        plans.append((int(offsets[i]), chunks, int(np.prod(shape, dtype=np.int64)) * itemsize))
        out_shapes.append(([len(chunks)] if has_chunks else []) + shape)
    ranks = {len(s) for s in out_shapes}
    if len(ranks) > 1:
        raise ValueError("decoders.inflate: shape must have the same number of values in every sample")
    bytes_per = [len(c) * b for _, c, b in plans]
    starts = np.concatenate([[0], np.cumsum(bytes_per)[:-1]]).astype(np.int64)
    out = torch.empty(int(sum(bytes_per)), dtype=torch.uint8)
    dst = out.numpy()

    def one(i: int) -> None:
        base, chunks, chunk_bytes = plans[i]
        try:
            for k, (a, s) in enumerate(chunks):
                got = inflate_chunk(memoryview(raw[base + a: base + a + s]), chunk_bytes, algorithm)
                if len(got) != chunk_bytes:
                    raise ValueError(f"chunk {k} inflates to {len(got)} bytes, but shape and dtype make "
                                     f"{chunk_bytes}")
                o = starts[i] + k * chunk_bytes
                dst[o:o + chunk_bytes] = np.frombuffer(got, np.uint8)
        except Exception as exc:  # noqa: BLE001 - re-raised naming the sample
            raise SampleError(i, data.source_info[i], ValueError(f"decoders.inflate ({algorithm}): {exc}")) from exc

    map_all(ctx.thread_pool if data.device == "cpu" else None, one, list(range(n)))
    seq_layout = (args.const("sequence_axis_name") + layout) if (has_chunks and layout) else layout
    result = Batch.from_packed(out.view(dtype), np.array(out_shapes, np.int64).reshape(n, -1), seq_layout)
    return result if data.device == "cpu" else result.to(ctx.device, non_blocking=True)


@SCHEMA.batch_kernel("cpu")
def inflate_cpu(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    return _inflate(ctx, data, args)


@SCHEMA.batch_kernel("gpu")
def inflate_gpu(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    """Host decompression: the compressed batch to the host in one copy, the inflated one back in one."""
    return _inflate(ctx, data, args)
