"""Tar shards against loose files on the CPU, and S3 against local disk: ``fn.readers.webdataset`` ->
``fn.decoders.image`` (cpu) beside ``webdataset.WebDataset`` + PyTorch ``DataLoader`` (the same number of worker
processes as sluice has threads, the same decode: full-size RGB uint8) and beside ``fn.readers.file`` on the same
JPEGs as loose files; then the same shards read by sluice from a loopback S3 server (moto, in a child process)
against local disk, at batch 256, as a ratio.

    python benchmarks/make_imagenet_like.py /tmp/readers_bench/files --count 2048 --classes 16
    python benchmarks/readers_cpu.py /tmp/readers_bench/files --shards 8 --batch 256

Each figure is samples/s over ``--batches`` batches after ``--warmup`` batches (the best of ``--repeat`` runs);
rows go through benchmarks/common.py's ``report``.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tarfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import images_per_second, loader_warmup, report  # noqa: E402

import sluice  # noqa: E402
from sluice import fn, types  # noqa: E402


def write_shards(files: list[str], labels: list[int], out: Path, shards: int) -> list[str]:
    """The JPEGs (in their sorted order) as WebDataset shards written by webdataset's TarWriter (or, where it is
    not installed, as on the GPU machine, the same members written by the standard library's tarfile)."""
    try:
        import webdataset as wds
    except ImportError:
        wds = None

    out.mkdir(parents=True, exist_ok=True)
    paths = [str(out / f"shard-{s:04d}.tar") for s in range(shards)]
    if all(os.path.exists(p) for p in paths) and (out / f".done-{len(files)}").exists():
        return paths
    per = -(-len(files) // shards)
    for s, path in enumerate(paths):
        members = [(f"{i:07d}", Path(files[i]).read_bytes(), str(labels[i]).encode())
                   for i in range(s * per, min((s + 1) * per, len(files)))]
        if wds is None:
            with tarfile.open(path, "w") as tar:
                for key, jpg, cls in members:
                    for ext, data in (("jpg", jpg), ("cls", cls)):
                        info = tarfile.TarInfo(f"{key}.{ext}")
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
            continue
        with wds.TarWriter(path) as w:
            for key, jpg, cls in members:
                w.write({"__key__": key, "jpg": jpg, "cls": cls})
    (out / f".done-{len(files)}").touch()
    return paths


def jpeg_set(folder: Path, shards: int) -> tuple[list[str], list[int], list[str]]:
    """The JPEGs below ``folder`` (sorted), their labels (class folder index) and the same as tar shards, written
    once next to the folder."""
    files = sorted(str(p) for p in folder.rglob("*.jpg"))
    if not files:
        sys.exit(f"no .jpg files under {folder}; run benchmarks/make_imagenet_like.py first")
    classes = sorted({Path(f).parent.name for f in files})
    labels = [classes.index(Path(f).parent.name) for f in files]
    return files, labels, write_shards(files, labels, folder.parent / f"{folder.name}_shards", shards)


def endless(loader):
    while True:
        yield from loader


def sluice_rate(make, args, decode=True) -> float:
    """samples/s of a sluice pipeline whose reader ``make()`` gives (data, labels)."""
    @sluice.pipeline_def(batch_size=args.batch, num_threads=args.threads, device_id=None, seed=1,
                         prefetch_queue_depth=2)
    def pipe():
        data, labels = make()
        if decode:
            data = fn.decoders.image(data, device="cpu", output_type=types.RGB)
        return data, labels

    p = pipe()

    def batches():
        while True:
            yield p.run()

    rate = images_per_second(batches(), args.warmup, args.batches, lambda b: len(b[0]))
    p.close()
    return rate


def _simplejpeg_sample(sample: dict) -> tuple:
    import simplejpeg

    return simplejpeg.decode_jpeg(sample["jpg"]), int(sample["cls"])


def peer_rate(shards: list[str], args, decoder: str) -> float:
    """webdataset.WebDataset + DataLoader: each worker reads its shards and decodes, with Pillow (webdataset's
    ``rgb8``) or with simplejpeg (libjpeg-turbo: the decoder sluice's CPU image decoder calls)."""
    import torch
    import webdataset as wds

    ds = wds.WebDataset(shards, shardshuffle=False, nodesplitter=None, empty_check=False).repeat()
    ds = ds.decode("rgb8").to_tuple("jpg", "cls") if decoder == "pillow" else ds.map(_simplejpeg_sample)
    ds = ds.batched(args.batch, collation_fn=list, partial=False)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=args.threads, prefetch_factor=4,
                                         persistent_workers=False)
    return images_per_second(endless(loader), loader_warmup(args.warmup, args.threads), args.batches, len)


def best_of(runs: dict, repeat: int) -> dict:
    """The best rate of each candidate over ``repeat`` rounds, the candidates taking turns in each round (on a
    shared machine, load then weighs on all of them alike)."""
    best = {k: 0.0 for k in runs}
    for _ in range(repeat):
        for k, run in runs.items():
            best[k] = max(best[k], run())
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="class folders of JPEGs (make_imagenet_like.py)")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="sluice threads = peer workers")
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-s3", action="store_true", help="skip the loopback S3 comparison")
    args = ap.parse_args()
    files, labels, shards = jpeg_set(args.folder, args.shards)
    n, bs = len(files), args.batch
    cpus = f"{os.cpu_count()} CPUs, {args.threads} threads/workers"

    best = best_of({
        "webdataset": lambda: sluice_rate(lambda: fn.readers.webdataset(paths=shards, ext=["jpg", "cls"]), args),
        "file": lambda: sluice_rate(lambda: fn.readers.file(files=files, labels=labels), args),
        "simplejpeg": lambda: peer_rate(shards, args, "simplejpeg"),
        "pillow": lambda: peer_rate(shards, args, "pillow")}, args.repeat)
    peer = f"webdataset.WebDataset + DataLoader ({args.threads} workers"
    report(f"tar shards -> decode (CPU, {n} JPEGs, {args.shards} shards, batch {bs}, {cpus})", "samples/s",
           best["webdataset"], {f"{peer}, simplejpeg: the same decoder)": best["simplejpeg"],
                                f"{peer}, Pillow)": best["pillow"],
                                "sluice readers.file (loose files)": best["file"]})

    if args.no_s3:
        return
    from sluice.testing import s3_server

    with s3_server(process=True) as endpoint:
        import boto3

        os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                          AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        t = time.perf_counter()
        for s in shards:
            client.upload_file(s, "bench", "shards/" + os.path.basename(s))
        print(f"uploaded {len(shards)} shards to the loopback S3 server in {time.perf_counter() - t:.1f} s",
              flush=True)
        urls = [f"s3://bench/shards/{os.path.basename(s)}" for s in shards]
        for decode in (False, True):
            what = "reader -> decode" if decode else "reader only"
            best = best_of({
                "local": lambda: sluice_rate(lambda: fn.readers.webdataset(paths=shards, ext=["jpg", "cls"]), args,
                                             decode),
                "s3": lambda: sluice_rate(lambda: fn.readers.webdataset(paths=urls, ext=["jpg", "cls"]), args,
                                          decode)}, args.repeat)
            report(f"tar shards from loopback S3 (moto) vs local disk, {what} (batch {bs}, {cpus})", "samples/s",
                   best["s3"], {"sluice, same shards on local disk": best["local"]})


if __name__ == "__main__":
    main()
