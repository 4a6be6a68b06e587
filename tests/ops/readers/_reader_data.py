"""Data the reader tests write for themselves: tar shards, images, TFRecord files (with this module's own protobuf
encoding and CRC-32C, independent of the reader's), and uploads to the loopback S3 server."""

import io
import os
import struct

import numpy as np


def upload(client, bucket, root, prefix=""):
    """Put every file below the folder ``root`` into ``bucket`` under ``prefix`` (creating the bucket)."""
    try:
        client.create_bucket(Bucket=bucket)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    for dirpath, _, files in os.walk(root):
        for f in files:
            path = os.path.join(dirpath, f)
            key = prefix + os.path.relpath(path, root).replace(os.sep, "/")
            client.upload_file(path, bucket, key)
    return f"s3://{bucket}/{prefix}"


def jpeg(seed, h=24, w=32):
    """A small JPEG of a seeded pattern (bytes)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 8 + seed * 20) % 256, (y * 10) % 256, rng.integers(0, 256, (h, w))], -1).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def write_shards(folder, shards=2, per_shard=5, jpg=True, extra=None):
    """WebDataset shards written with webdataset's own TarWriter: samples ``k<shard><index>`` with a ``jpg``, a
    ``cls`` (the sample's number) and a ``json``; ``extra(shard, index, sample)`` may edit each sample."""
    import webdataset as wds

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(shards):
        path = folder / f"shard-{s:03d}.tar"
        with wds.TarWriter(str(path)) as w:
            for i in range(per_shard):
                n = s * per_shard + i
                sample = {"__key__": f"k{s}{i:03d}", "cls": str(n).encode(), "json": f'{{"n": {n}}}'.encode()}
                if jpg:
                    sample["jpg"] = jpeg(n)
                if extra is not None:
                    extra(s, i, sample)
                w.write(sample)
        paths.append(str(path))
    return paths


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _field(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def example(features: dict) -> bytes:
    """A tf.train.Example: bytes values as BytesList, floats as a packed FloatList, ints as a packed Int64List
    (or, for names ending in '!', one unpacked varint field per value)."""
    entries = b""
    for name, values in features.items():
        if isinstance(values, bytes) or (isinstance(values, list) and values and isinstance(values[0], bytes)):
            lst = b"".join(_field(1, v) for v in ([values] if isinstance(values, bytes) else values))
            feature = _field(1, lst)
        elif isinstance(values[0], float):
            feature = _field(2, _field(1, struct.pack(f"<{len(values)}f", *values)))
        elif name.endswith("!"):
            feature = _field(3, b"".join(_varint(1 << 3 | 0) + _varint(v) for v in values))
        else:
            feature = _field(3, _field(1, b"".join(_varint(v) for v in values)))
        entries += _field(1, _field(1, name.rstrip("!").encode()) + _field(2, feature))
    return _field(1, entries)


def write_tfrecord(path, records):
    with open(path, "wb") as f:
        for rec in records:
            length = struct.pack("<Q", len(rec))
            f.write(length + struct.pack("<I", _masked(length)) + rec + struct.pack("<I", _masked(rec)))
