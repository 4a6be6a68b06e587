"""``fn.readers.caffe2``: samples of a Caffe2 LMDB database (``caffe2.TensorProtos`` values), as DALI's reader,
without Caffe2 or protobuf: the ``TensorProto`` fields are read from the protobuf wire format
(:mod:`sluice.backends.protobuf`; caffe2.proto's field numbers: dims 1, data_type 2, float_data 3, int32_data 4,
byte_data 5, string_data 6, int64_data 10; packed or not).

The protos of a record, in order: the image when ``image_available`` (a STRING proto: its first string, the
encoded bytes, as 1-D uint8; a BYTE proto: its bytes as ``H x W x C`` uint8 from its dims), the label unless
``label_type`` is 4 (0 one value; 1 the indices of the active labels, made a ``num_labels`` 0/1 vector; 2 the
values; 3 the indices, then a proto of their float weights, made a ``num_labels`` vector of weights; int32 or
float as stored), then ``additional_inputs`` protos (FLOAT, INT32 or INT64 values), then with ``bbox`` a last
proto of 4 int32 values. Needs the ``lmdb`` package (``pip install 'sluice[lmdb]'``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sluice.backends.protobuf import ProtobufError, fields, repeated_floats, repeated_ints
from sluice.ops.readers._lmdb import LMDB_ARGS, LmdbReader
from sluice.ops.readers.file import READER_ARGS
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, OpSchema, OpSpec

__all__ = ["SCHEMA", "parse_tensor_protos"]

FLOAT, INT32, BYTE, STRING, INT64 = 1, 2, 3, 4, 10
SINGLE_LABEL, MULTI_LABEL_SPARSE, MULTI_LABEL_DENSE, MULTI_LABEL_WEIGHTED_SPARSE, NO_LABEL = range(5)


def _num_outputs(a: dict) -> int:
    return (int(bool(a.get("image_available", True))) + int(a.get("label_type", 0) != NO_LABEL)
            + int(a.get("additional_inputs", 0)) + int(bool(a.get("bbox", False))))


SCHEMA = OpSchema(
    "readers.caffe2",
    doc="""Reads samples (image, label, additional tensors, box) from a Caffe2 LMDB database of
    ``TensorProtos`` records.

    Example::

        jpegs, labels = fn.readers.caffe2(path="/data/train_lmdb", random_shuffle=True)
        images = fn.decoders.image(jpegs, device="mixed")
    """,
    inputs=0,
    outputs=_num_outputs,
    devices=("cpu",),
    stateful=True,
    output_layout="",
    requires={"cpu": ("lmdb",)},
    args=[
        *LMDB_ARGS,
        Arg("label_type", int, 0, "0 single label, 1 sparse multi-label, 2 dense multi-label, 3 weighted sparse "
            "multi-label, 4 no label.", min=0, max=4),
        Arg("num_labels", int, 1, "Length of the label vector of label types 1 and 3.", min=1),
        Arg("additional_inputs", int, 0, "Number of further protos output as tensors.", min=0),
        Arg("bbox", bool, False, "A last proto holds a box of 4 int32 values."),
        *READER_ARGS,
    ],
)


def _tensor(value: memoryview, span) -> dict[str, Any]:
    a, b = span
    t: dict[str, Any] = {"dims": [], "data_type": FLOAT, "float": [], "int32": [], "int64": [], "strings": []}
    for field, wire, v in fields(value, a, b):
        if field == 1:
            repeated_ints(value, wire, v, t["dims"])
        elif field == 2 and wire == 0:
            t["data_type"] = int(v)
        elif field == 3:
            repeated_floats(value, wire, v, t["float"])
        elif field == 4:
            repeated_ints(value, wire, v, t["int32"], bits=32)
        elif field == 5 and wire == 2:
            t["bytes"] = v
        elif field == 6 and wire == 2:
            t["strings"].append(v)
        elif field == 10:
            repeated_ints(value, wire, v, t["int64"])
    return t


def parse_tensor_protos(value: memoryview) -> list[dict[str, Any]]:
    """The ``TensorProto`` messages of a ``TensorProtos`` record (fields as lists, bytes as spans)."""
    try:
        return [_tensor(value, v) for field, wire, v in fields(value, 0, len(value)) if field == 1 and wire == 2]
    except ProtobufError as e:
        raise ValueError(f"not a caffe2.TensorProtos ({e})") from None


def _values(t: dict[str, Any]) -> np.ndarray:
    kind = t["data_type"]
    if kind == FLOAT:
        return np.asarray(t["float"], np.float32)
    if kind == INT32:
        return np.asarray(t["int32"], np.int32)
    if kind == INT64:
        return np.asarray(t["int64"], np.int64)
    raise ValueError(f"unsupported TensorProto data type {kind} (FLOAT, INT32 and INT64 are read)")


@SCHEMA.operator_class("cpu")
class Caffe2Reader(LmdbReader):
    op_name = "fn.readers.caffe2"

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        a = spec.args
        self.image = bool(a["image_available"])
        self.label_type = int(a["label_type"])
        self.num_labels = int(a["num_labels"])
        self.additional = int(a["additional_inputs"])
        self.bbox = bool(a["bbox"])

    def parse(self, value: memoryview, name: str) -> tuple:
        protos = parse_tensor_protos(value)
        row, k = [], 0

        def proto(i: int, what: str) -> dict[str, Any]:
            if i >= len(protos):
                raise ValueError(f"the record has {len(protos)} TensorProtos; the {what} would be proto {i}")
            return protos[i]

        if self.image:
            t = proto(0, "image")
            if t["data_type"] == STRING and t["strings"]:
                a, b = t["strings"][0]
                row.append(torch.from_numpy(np.frombuffer(value[a:b], np.uint8).copy()))
            elif t["data_type"] == BYTE and "bytes" in t:
                a, b = t["bytes"]
                dims = t["dims"]
                shape = (dims[0], dims[1], dims[2] if len(dims) == 3 else 1) if len(dims) >= 2 else None
                data = np.frombuffer(value[a:b], np.uint8).copy()
                if shape is None or int(np.prod(shape)) != data.size:
                    raise ValueError(f"the image proto's {data.size} bytes do not fit its dims {dims}")
                row.append(torch.from_numpy(data.reshape(shape)))
            else:
                raise ValueError("the image proto is neither STRING (encoded) nor BYTE (raw pixels)")
            k = 1
        if self.label_type != NO_LABEL:
            t = proto(k, "label")
            values = _values(t)
            if self.label_type == SINGLE_LABEL:
                if values.size != 1:
                    raise ValueError(f"a single label holds {values.size} values")
                row.append(torch.from_numpy(values))
            elif self.label_type == MULTI_LABEL_DENSE:
                row.append(torch.from_numpy(values))
            else:
                weighted = self.label_type == MULTI_LABEL_WEIGHTED_SPARSE
                out = np.zeros(self.num_labels, np.float32 if weighted else values.dtype)
                idx = values.astype(np.int64)
                if idx.size and (idx.min() < 0 or idx.max() >= self.num_labels):
                    raise ValueError(f"label index {int(idx.max())} is outside num_labels={self.num_labels}")
                out[idx] = _values(proto(k + 1, "label weights")).astype(np.float32) if weighted else 1
                row.append(torch.from_numpy(out))
            k += 1 + (self.label_type == MULTI_LABEL_WEIGHTED_SPARSE)
        for j in range(self.additional):
            row.append(torch.from_numpy(_values(proto(k + j, f"additional input {j}"))))
        k += self.additional
        if self.bbox:
            t = proto(k, "bbox")
            box = _values(t)
            if t["data_type"] != INT32 or box.size != 4:
                raise ValueError("the bbox proto must hold 4 INT32 values")
            row.append(torch.from_numpy(box))
        return tuple(row)

    def collate(self, columns: list[list[Any]], names: list[str]) -> tuple[Batch, ...]:
        outs = []
        for col in columns:
            same = all(c.shape == col[0].shape and c.dtype == col[0].dtype for c in col)
            if any(c.dtype != col[0].dtype for c in col):
                raise ValueError(f"{self.op_name}: the records of a batch store an output in different types "
                                 f"({sorted({str(c.dtype) for c in col})})")
            outs.append(Batch.from_dense(torch.stack(col), "", names) if same and col[0].dim() == 1 and
                        not (self.image and col is columns[0]) else Batch(col, "", names))
        return tuple(outs)
