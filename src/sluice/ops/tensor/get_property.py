"""``fn.get_property``: a property of each input sample as a tensor, as DALI's operator: ``"source_info"`` (where
the sample came from, e.g. the file a reader read) or ``"layout"``, each as UTF-8 bytes (uint8)."""

from __future__ import annotations

import numpy as np
import torch

from sluice.pipeline.batch import Batch
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA"]

_KEYS = ("source_info", "layout")

SCHEMA = OpSchema(
    "get_property",
    doc="""Returns a property of each input sample as a 1-D uint8 tensor of UTF-8 bytes: ``key="source_info"``
    (where the sample came from: the file path for ``fn.readers.file``; empty when unknown) or ``key="layout"``
    (the batch's layout, e.g. ``HWC``).

    Example::

        jpegs, labels = fn.readers.file(file_root="images")
        paths = fn.get_property(jpegs, key="source_info")
    """,
    devices=("cpu", "gpu"),
    args=[Arg("key", str, REQUIRED, "The property: 'source_info' or 'layout'.", choices=_KEYS)],
    output_layout="",
)


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def get_property(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    key = args.const("key")
    n = len(data)
    if key == "layout":
        layout = ctx.layout_of(data)
        texts = [layout] * n
    else:
        info = data.source_info if any(data.source_info) else (ctx.source_info or [""] * n)
        texts = [str(s) for s in info]
    encoded = [t.encode("utf-8") for t in texts]
    flat = torch.from_numpy(np.frombuffer(b"".join(encoded), dtype=np.uint8).copy())
    out = Batch.from_packed(flat, np.array([[len(b)] for b in encoded], np.int64).reshape(n, 1))
    return out.to(ctx.device) if ctx.device.type == "cuda" else out
