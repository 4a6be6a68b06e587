"""``fn.readers.caffe``: images and labels of a Caffe LMDB database (``caffe.Datum`` values), as DALI's reader,
without Caffe or protobuf: the ``Datum`` fields are read from the protobuf wire format
(:mod:`sluice.backends.protobuf`; caffe.proto's field numbers: channels 1, height 2, width 3, data 4, label 5,
encoded 7).

Outputs, as DALI: the image (``data``: the encoded bytes as 1-D uint8, or, for a Datum marked ``encoded=False``,
its bytes as an ``H x W x C`` uint8 tensor, copied as stored) when ``image_available``, and the label (int32, one
value) when ``label_available``. Needs the ``lmdb`` package (``pip install 'sluice[lmdb]'``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sluice.backends.protobuf import ProtobufError, fields
from sluice.ops.readers._lmdb import LMDB_ARGS, LmdbReader
from sluice.ops.readers.file import READER_ARGS
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, OpSchema, OpSpec

__all__ = ["SCHEMA", "parse_datum"]

SCHEMA = OpSchema(
    "readers.caffe",
    doc="""Reads (image, label) pairs from a Caffe LMDB database of ``Datum`` records.

    Example::

        jpegs, labels = fn.readers.caffe(path="/data/ilsvrc12_train_lmdb", random_shuffle=True)
        images = fn.decoders.image(jpegs, device="mixed")
    """,
    inputs=0,
    outputs=lambda a: int(bool(a.get("image_available", True))) + int(bool(a.get("label_available", True))),
    devices=("cpu",),
    stateful=True,
    output_layout="",
    requires={"cpu": ("lmdb",)},
    args=[
        *LMDB_ARGS,
        Arg("label_available", bool, True, "Output the labels."),
        *READER_ARGS,
    ],
)


def parse_datum(value: memoryview) -> dict[str, Any]:
    """The fields of a ``caffe.Datum`` that the reader uses: ``data`` (a span), ``label``, ``height``, ``width``,
    ``channels``, ``encoded``."""
    out: dict[str, Any] = {}
    names = {1: "channels", 2: "height", 3: "width", 5: "label", 7: "encoded"}
    try:
        for field, wire, v in fields(value, 0, len(value)):
            if field == 4 and wire == 2:
                out["data"] = v
            elif field in names and wire == 0:
                out[names[field]] = int(v) - (1 << 64) if int(v) >= 1 << 63 else int(v)
    except ProtobufError as e:
        raise ValueError(f"not a caffe.Datum ({e})") from None
    return out


@SCHEMA.operator_class("cpu")
class CaffeReader(LmdbReader):
    op_name = "fn.readers.caffe"

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        self.image = bool(spec.args["image_available"])
        self.label = bool(spec.args["label_available"])

    def parse(self, value: memoryview, name: str) -> tuple:
        d = parse_datum(value)
        row = []
        if self.image:
            if "data" not in d:
                raise ValueError("the Datum has no data")
            a, b = d["data"]
            data = np.frombuffer(value[a:b], np.uint8).copy()
            if d.get("encoded", 1) == 0:
                shape = (d.get("height", 0), d.get("width", 0), d.get("channels", 0))
                if int(np.prod(shape)) != data.size:
                    raise ValueError(f"the Datum's {data.size} bytes do not fill its {shape} (height, width, "
                                     "channels)")
                data = data.reshape(shape)
            row.append(torch.from_numpy(data))
        if self.label:
            if "label" not in d:
                raise ValueError("the Datum has no label")
            row.append(torch.tensor([d["label"]], dtype=torch.int32))
        return tuple(row)

    def collate(self, columns: list[list[Any]], names: list[str]) -> tuple[Batch, ...]:
        outs = []
        for k, col in enumerate(columns):
            is_label = self.label and k == len(columns) - 1
            outs.append(Batch.from_dense(torch.stack(col), "", names) if is_label else Batch(col, "", names))
        return tuple(outs)
