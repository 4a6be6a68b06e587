"""``fn.io.file.read``: reads whole files whose paths arrive as data, as DALI's ``fn.io.file.read``.

Each input sample is one path, encoded as a 1-D ``uint8`` (or ``int8``) tensor of its bytes, e.g. from
``fn.external_source`` fed with ``np.frombuffer(path.encode(), dtype=np.uint8)``. A path ends at its first NUL
byte, as in DALI (so zero-padded rows of a dense batch read the right file). Each output sample is the file's
contents as a 1-D ``uint8`` tensor, ready for ``fn.decoders.*``; the output carries the paths as its
``source_info``, so that later errors (a corrupt JPEG) name the file.
"""

from __future__ import annotations

import os

import torch

from sluice.errors import SampleError
from sluice.ops.readers.file import read_files
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "decode_path"]

SCHEMA = OpSchema(
    "io.file.read",
    doc="""Reads raw file contents from file paths given as 1-D byte arrays (one path per sample).

    The path's bytes are the input sample (``uint8`` or ``int8``, as DALI accepts); the output is the file's
    bytes as a 1-D ``uint8`` tensor. Errors name the file. Example::

        paths = fn.external_source(name="paths")      # np.frombuffer(path.encode(), dtype=np.uint8) per sample
        jpegs = fn.io.file.read(paths)
        images = fn.decoders.image(jpegs, device="mixed")
    """,
    inputs=1,
    outputs=1,
    devices=("cpu",),
    output_layout="",
    input_names=["filepaths"],
    args=[
        Arg("dont_use_mmap", bool, False,
            "Accepted for DALI compatibility: files are always read with plain I/O (one readv into the output, "
            "with the GIL released), which is as fast as a mapping on local disks and better on network ones."),
        Arg("use_o_direct", bool, False,
            "Accepted for DALI compatibility: the data is read through the system's page cache."),
    ],
)

_PATH_DTYPES = (torch.uint8, torch.int8)


def decode_path(sample: torch.Tensor) -> str:
    """The path held by one input sample: its bytes up to the first NUL, decoded as the OS decodes file names.

    Example::

        decode_path(torch.frombuffer(bytearray(b"/data/cat.jpg"), dtype=torch.uint8))   # '/data/cat.jpg'
    """
    if sample.dtype not in _PATH_DTYPES:
        raise ValueError(f"io.file.read: file paths are 1-D uint8 or int8 tensors of the path's bytes; got "
                         f"{sample.dtype}. Encode a path with np.frombuffer(path.encode(), dtype=np.uint8)")
    if sample.dim() != 1:
        raise ValueError(f"io.file.read: a file path is a 1-D tensor of bytes; got shape {tuple(sample.shape)}")
    raw = sample.cpu().contiguous().view(torch.uint8).numpy().tobytes()
    raw = raw.split(b"\0", 1)[0]
    if not raw:
        raise ValueError("io.file.read: empty file path")
    return os.fsdecode(raw)


@SCHEMA.batch_kernel("cpu")
def file_read_cpu(ctx: BatchContext, filepaths: Batch, *, args: BatchArgs) -> Batch:
    """Reads the batch's files in the pipeline's threads (os.readv releases the GIL)."""
    n = len(filepaths)
    sources = list(ctx.source_info) if ctx.source_info else [""] * n
    paths: list[str] = []
    for i in range(n):
        try:
            paths.append(decode_path(filepaths[i]))
        except Exception as exc:  # noqa: BLE001 - named with its sample, as sample kernels are
            raise SampleError(i, sources[i], exc) from exc
    data = read_files(paths, ctx.thread_pool)
    return Batch(data, layout="", source_info=paths)
