"""Data the reader tests write for themselves: tar shards, images, and uploads to the loopback S3 server."""

import io
import os

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
