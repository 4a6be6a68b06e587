"""Writers of the legacy reader formats for tests, from their specifications: MXNet RecordIO (dmlc's recordio:
a payload holding the magic at an aligned position is split there into parts, the magic dropped), Caffe's
``Datum`` and Caffe2's ``TensorProtos`` (protobuf wire format: caffe.proto / caffe2.proto field numbers) in LMDB
databases."""

import struct

import numpy as np
from _reader_data import _varint as varint

MAGIC = 0xCED7230A


def _pad4(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 4)


def rec_payload(image: bytes, labels) -> bytes:
    """MXNet's IRHeader (flag, label, id, id2) then the labels (flag > 0) and the image."""
    labels = np.atleast_1d(np.asarray(labels, np.float32))
    if len(labels) == 1:
        return struct.pack("<IfQQ", 0, float(labels[0]), 7, 0) + image
    return struct.pack("<IfQQ", len(labels), 0.0, 7, 0) + labels.astype("<f4").tobytes() + image


def write_rec(rec_path, idx_path, payloads):
    """Write records (split at aligned magic words, as dmlc's RecordIOWriter does) and an im2rec index."""
    magic = struct.pack("<I", MAGIC)
    lines = []
    with open(rec_path, "wb") as f:
        for key, data in enumerate(payloads):
            lines.append(f"{key}\t{f.tell()}")
            cuts = [i for i in range(0, len(data) - 3, 4) if data[i:i + 4] == magic]
            parts, start = [], 0
            for c in cuts:
                parts.append(data[start:c])
                start = c + 4
            parts.append(data[start:])
            for k, part in enumerate(parts):
                flag = 0 if len(parts) == 1 else (1 if k == 0 else (3 if k == len(parts) - 1 else 2))
                f.write(struct.pack("<II", MAGIC, flag << 29 | len(part)) + _pad4(part))
    with open(idx_path, "w") as f:
        f.write("\n".join(lines) + "\n")


def key(num: int, wire: int) -> bytes:
    return varint(num << 3 | wire)


def ld(num: int, payload: bytes) -> bytes:
    return key(num, 2) + varint(len(payload)) + payload


def datum(data: bytes = None, label: int = None, shape=None, encoded: bool = None) -> bytes:
    """caffe.Datum: channels 1, height 2, width 3, data 4, label 5, encoded 7."""
    out = b""
    if shape is not None:
        h, w, c = shape
        out += key(1, 0) + varint(c) + key(2, 0) + varint(h) + key(3, 0) + varint(w)
    if data is not None:
        out += ld(4, data)
    if label is not None:
        out += key(5, 0) + varint(label)
    if encoded is not None:
        out += key(7, 0) + varint(int(encoded))
    return out


# caffe2.TensorProto: dims 1, data_type 2, float_data 3, int32_data 4, byte_data 5, string_data 6, int64_data 10
FLOAT, INT32, BYTE, STRING, INT64 = 1, 2, 3, 4, 10


def tensor_proto(data_type: int, values=None, dims=None, packed: bool = True) -> bytes:
    out = b""
    for d in dims or []:
        out += key(1, 0) + varint(d)
    out += key(2, 0) + varint(data_type)
    if data_type == STRING:
        out += ld(6, values)
    elif data_type == BYTE:
        out += ld(5, values)
    elif data_type == FLOAT:
        arr = np.asarray(values, "<f4")
        out += ld(3, arr.tobytes()) if packed else b"".join(key(3, 5) + struct.pack("<f", v) for v in arr)
    else:
        num = 4 if data_type == INT32 else 10
        vals = [int(v) for v in values]
        out += ld(num, b"".join(varint(v) for v in vals)) if packed else b"".join(key(num, 0) + varint(v)
                                                                                  for v in vals)
    return out


def tensor_protos(*protos: bytes) -> bytes:
    return b"".join(ld(1, p) for p in protos)


def write_lmdb(path, values):
    """An LMDB database of the values under zero-padded keys (LMDB orders by key)."""
    import lmdb

    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i, v in enumerate(values):
            txn.put(f"{i:08d}".encode(), v)
    env.close()
