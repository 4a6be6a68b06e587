"""Which S3 library sluice's object-storage backend uses: obstore against fsspec + s3fs, fetching many small
objects (and many byte ranges of one object, as tar members are read) from a loopback S3 server (moto), the same
data, the same concurrency, in one run. The figures are in benchmarks/RESULTS.md ("Object storage").

    python benchmarks/s3_clients.py --objects 2000 --size 65536
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import numpy as np

from common import report


def _fill(endpoint: str, bucket: str, n: int, size: int) -> tuple[list[str], bytes]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                      aws_secret_access_key="test")
    s3.create_bucket(Bucket=bucket)
    rng = np.random.default_rng(0)
    keys = []
    for i in range(n):
        body = rng.integers(0, 256, int(rng.integers(size // 2, size * 3 // 2)), np.uint8).tobytes()
        key = f"small/{i:06d}.bin"
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        keys.append(key)
    big = rng.integers(0, 256, n * size, np.uint8).tobytes()
    s3.put_object(Bucket=bucket, Key="big.bin", Body=big)
    return keys, big


def _obstore(endpoint: str, bucket: str, keys: list[str], batch: int, concurrency: int):
    import obstore
    from obstore.store import S3Store

    store = S3Store(bucket, endpoint=endpoint, region="us-east-1", access_key_id="test", secret_access_key="test",
                    client_options={"allow_http": True}, virtual_hosted_style_request=False)

    async def fetch(group):
        sem = asyncio.Semaphore(concurrency)

        async def one(k):
            async with sem:
                return await (await obstore.get_async(store, k)).bytes_async()
        return await asyncio.gather(*(one(k) for k in group))

    def objects():
        listed = [m["path"] for chunk in obstore.list(store, prefix="small/") for m in chunk]
        total = 0
        for i in range(0, len(listed), batch):
            total += sum(len(b) for b in asyncio.run(fetch(listed[i:i + batch])))
        return len(listed), total

    def ranges(starts, lengths):
        out = obstore.get_ranges(store, "big.bin", starts=starts, lengths=lengths)
        return sum(len(b) for b in out)

    return objects, ranges


def _s3fs(endpoint: str, bucket: str, keys: list[str], batch: int, concurrency: int):
    import s3fs

    fs = s3fs.S3FileSystem(key="test", secret="test", endpoint_url=endpoint, client_kwargs={"region_name":
                           "us-east-1"}, max_concurrency=concurrency, skip_instance_cache=True)

    def objects():
        listed = fs.ls(f"{bucket}/small/", detail=False, refresh=True)
        total = 0
        for i in range(0, len(listed), batch):
            got = fs.cat(listed[i:i + batch], batch_size=concurrency)
            total += sum(len(b) for b in got.values())
        return len(listed), total

    def ranges(starts, lengths):
        ends = [s + n for s, n in zip(starts, lengths)]
        out = fs.cat_ranges([f"{bucket}/big.bin"] * len(starts), starts, ends, batch_size=concurrency)
        return sum(len(b) for b in out)

    return objects, ranges


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--objects", type=int, default=2000)
    p.add_argument("--size", type=int, default=65536, help="mean object size in bytes")
    p.add_argument("--batch", type=int, default=256, help="objects fetched per call (a reader's batch)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    from sluice.testing import s3_server

    with s3_server(process=True) as endpoint:
        keys, big = _fill(endpoint, "bench", args.objects, args.size)
        rng = np.random.default_rng(1)
        member = args.size
        starts = sorted(rng.choice(len(big) // member, args.batch, replace=False) * member)
        starts = [int(s) + 512 for s in starts]  # a tar member's data follows its 512-byte header
        lengths = [member - 512] * len(starts)
        results = {}
        for name, make in (("obstore", _obstore), ("fsspec+s3fs", _s3fs)):
            objects, ranges = make(endpoint, "bench", keys, args.batch, args.concurrency)
            best_obj = best_rng = float("inf")
            for _ in range(args.repeats):
                t = time.perf_counter()
                count, total = objects()
                best_obj = min(best_obj, time.perf_counter() - t)
                assert count == args.objects and total > 0
                t = time.perf_counter()
                got = ranges(starts, lengths)
                best_rng = min(best_rng, time.perf_counter() - t)
                assert got == sum(lengths)
            results[name] = (count / best_obj, len(starts) / best_rng)
        for i, what in enumerate(("small objects (list + get)", "byte ranges of one object")):
            report(f"s3 loopback, obstore (the \"sluice\" column: its S3 client) vs fsspec+s3fs: {what}, "
                   f"{args.objects} x ~{args.size // 1024} KiB", "objects/s",
                   results["obstore"][i], {"fsspec+s3fs": results["fsspec+s3fs"][i]})


if __name__ == "__main__":
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    main()
