"""Decode-only throughput on ImageNet-like JPEGs: sluice's ``mixed`` decoder beside torchvision's batched nvJPEG,
nvImageCodec and Pillow in worker processes; and sluice's per-core CPU decode beside simplejpeg alone.

Make the files first (``benchmarks/make_imagenet_like.py``); they are read into memory once (page cache), then
every decoder gets the same batches of 256 encoded files. Each figure is the best of ``--repeat`` passes over all
files after a warm-up pass. Usage::

    python benchmarks/make_imagenet_like.py /tmp/imagenet_like
    python benchmarks/decode_images.py /tmp/imagenet_like            # GPU peers when CUDA is present
    python benchmarks/decode_images.py /tmp/imagenet_like --cpu-only --cpu-files 256

Rows go through benchmarks/common.py's ``report`` (and to $SLUICE_BENCH_OUT as JSON lines).
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import time
from multiprocessing import get_context
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, report, timed  # noqa: E402

_FILES: list[bytes] = []


def load(folder: Path, count: int) -> tuple[list[bytes], list[str]]:
    paths = sorted(str(p) for p in folder.rglob("*.jpg"))[:count]
    if not paths:
        sys.exit(f"no .jpg files under {folder}; run benchmarks/make_imagenet_like.py first")
    return [Path(p).read_bytes() for p in paths], paths


def batches(data: list, size: int):
    return [data[i:i + size] for i in range(0, len(data), size)]


def best_rate(fn, n_images: int, repeat: int) -> float:
    """Images per second of ``fn()`` (one pass over all images), best of ``repeat`` after one warm-up."""
    fn()
    best = 0.0
    for _ in range(repeat):
        with timed() as t:
            fn()
        best = max(best, n_images / t["seconds"])
    return best


# --- peers ------------------------------------------------------------------------------------------------
def torchvision_pass(tensor_batches, device):
    from torchvision.io import ImageReadMode, decode_jpeg

    def run():
        for b in tensor_batches:
            decode_jpeg(b, mode=ImageReadMode.RGB, device=device)
    return run


def nvimgcodec_pass(byte_batches, device_id):
    from nvidia import nvimgcodec

    decoder = nvimgcodec.Decoder(device_id=device_id)

    def run():
        for b in byte_batches:
            decoder.decode(b)
    return run


def _pil_decode(idx: range) -> int:
    from PIL import Image

    n = 0
    for i in idx:
        n += np.asarray(Image.open(io.BytesIO(_FILES[i])).convert("RGB")).shape[0] > 0
    return n


def pillow_processes_pass(n_files: int, procs: int):
    pool = get_context("fork").Pool(procs)
    chunks = [range(i, min(i + 32, n_files)) for i in range(0, n_files, 32)]

    def run():
        assert sum(pool.imap_unordered(_pil_decode, chunks)) == n_files
    return run, pool


# --- sluice ---------------------------------------------------------------------------------------------------
def sluice_mixed_pass(byte_batches, threads: int, device_id: int, hw_decoder_load: float,
                      name: str = "decoders.image", defer_checks: bool = True):
    """sluice's mixed ``name`` decoder operator run batch after batch, as the executor runs it (``defer_checks``
    False: the decoder's checks are waited for inside each call instead)."""
    import torch

    from sluice.pipeline.batch import Batch
    from sluice.pipeline.pool import ThreadPool
    from sluice.schema import BatchArgs, BatchContext, OpSpec, get_schema

    schema = get_schema(name)
    const, _ = schema.validate({"hw_decoder_load": hw_decoder_load}, lambda v: False)
    spec = OpSpec(schema, "mixed", const, name, len(byte_batches[0]), threads, device_id, 0)
    op = schema.kernel_for("mixed")(spec)
    pool = ThreadPool(threads)  # says its threads, by which sluice's kernels share their work
    device = torch.device("cuda", device_id)
    inputs = [Batch([torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in bb]) for bb in byte_batches]
    stream = torch.cuda.Stream(device)

    def run():
        # As the executor: the decoder's deferred checks run when the batch is handed out, two batches later
        # with the default prefetch_queue_depth of 2.
        pending: list[list] = []
        with torch.cuda.stream(stream):
            for k, batch in enumerate(inputs):
                ctx = BatchContext(name, len(batch), [""] * len(batch), [""], device, pool, 0, k)
                ctx.deferred = [] if defer_checks else None
                op.run(ctx, batch, args=BatchArgs(const, {}, len(batch)))
                pending.append(ctx.deferred or [])
                if len(pending) > 2:
                    for check in pending.pop(0):
                        check()
            for checks in pending:
                for check in checks:
                    check()
        stream.synchronize()
    return run, op


def sluice_memory_pipeline_pass(byte_batches, threads: int, device_id: int):
    """fn.external_source (the same encoded batches, from memory) -> fn.decoders.image(device='mixed') in a
    pipeline: decoding as a pipeline runs it (probes and the start of each batch's decoding in the CPU stage,
    ahead of the device stage), without reading files."""
    from sluice import fn, pipeline_def

    arrays = [[np.frombuffer(bytearray(b), np.uint8) for b in bb] for bb in byte_batches]
    position = {"k": 0}

    def source():
        k = position["k"]
        position["k"] = (k + 1) % len(arrays)
        return arrays[k]

    @pipeline_def(batch_size=len(arrays[0]), num_threads=threads, device_id=device_id, seed=0)
    def pipe():
        return fn.decoders.image(fn.external_source(source=source), device="mixed")

    p = pipe()
    p.build()

    def run():
        for _ in arrays:
            p.run()
    return run, p


def sluice_pipeline_pass(folder: Path, n_files: int, batch: int, threads: int, device_id: int):
    """fn.readers.file + fn.decoders.image(device='mixed') in a real pipeline (reads from the page cache)."""
    from sluice import fn, pipeline_def

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=device_id, seed=0)
    def pipe():
        files, _ = fn.readers.file(file_root=str(folder))
        return fn.decoders.image(files, device="mixed")

    p = pipe()
    p.build()
    steps = n_files // batch

    def run():
        for _ in range(steps):
            p.run()
    return run, steps * batch


def cpu_per_core(files: list[bytes], repeat: int) -> None:
    """One thread: simplejpeg.decode_jpeg alone vs sluice's CPU kernel (header probe, decode, tensor)."""
    import simplejpeg
    import torch

    from sluice.ops.decoders.image import _make_cpu_kernel
    from sluice.schema import SampleContext, get_schema

    kernel = _make_cpu_kernel("decoders.image")
    const, _ = get_schema("decoders.image").validate({}, lambda v: False)
    samples = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in files]
    ctx = SampleContext("decoders.image", 0, "", "")

    def sj():
        for b in files:
            simplejpeg.decode_jpeg(b, colorspace="RGB")

    def sl():
        for s in samples:
            kernel(ctx, s, **const)

    def pil():
        from PIL import Image
        for b in files:
            np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))

    # Interleaved passes (best of each): a busy machine slows all three alike instead of whichever ran last.
    n = len(files)
    best = [0.0, 0.0, 0.0]
    for rep in range(repeat + 1):
        for k, f in enumerate((sj, sl, pil)):
            start = time.perf_counter()
            f()
            if rep:  # the first round warms up
                best[k] = max(best[k], n / (time.perf_counter() - start))
    r_sj, r_sl, r_pil = best
    report("JPEG decode, 1 CPU core (ImageNet-like)", "img/s", r_sl, {"simplejpeg alone": r_sj, "Pillow": r_pil})


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--count", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--procs", type=int, default=16, help="Pillow worker processes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpu-files", type=int, default=512, help="files for the per-core CPU comparison")
    ap.add_argument("--cpu-only", action="store_true")
    ap.add_argument("--hw-decoder-load", type=float, default=0.9)
    ap.add_argument("--device-id", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)

    global _FILES
    _FILES, paths = load(args.folder, args.count)
    n = len(_FILES)
    sizes = np.array([len(b) for b in _FILES])
    print(f"# {n} JPEGs, mean {sizes.mean() / 1024:.1f} KiB; batch {args.batch}; {machine()}", flush=True)

    cpu_per_core(_FILES[:args.cpu_files], args.repeat)
    if args.cpu_only:
        return

    import torch

    if not torch.cuda.is_available():
        print("# no CUDA device: GPU rows skipped", flush=True)
        return
    device = torch.device("cuda", args.device_id)
    byte_batches = batches(_FILES, args.batch)
    tensor_batches = [[torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in bb] for bb in byte_batches]

    peers: dict[str, float] = {}
    pil_run, pool = pillow_processes_pass(n, args.procs)
    peers[f"Pillow, {args.procs} processes"] = best_rate(pil_run, n, args.repeat)
    pool.close()
    try:
        peers["torchvision.io.decode_jpeg(list, cuda)"] = best_rate(torchvision_pass(tensor_batches, device), n,
                                                                    args.repeat)
    except Exception as exc:  # noqa: BLE001 - a missing peer is reported, not fatal
        print(f"# torchvision peer failed: {exc}", flush=True)
    try:
        peers["nvImageCodec Decoder.decode(list)"] = best_rate(nvimgcodec_pass(byte_batches, args.device_id), n,
                                                               args.repeat)
    except Exception as exc:  # noqa: BLE001
        print(f"# nvImageCodec peer failed: {exc}", flush=True)

    run, op = sluice_mixed_pass(byte_batches, args.threads, args.device_id, args.hw_decoder_load)
    ours = best_rate(run, n, args.repeat)
    dec = op._decoder
    print(f"# sluice mixed: {dec.backend_name}; shares {({k: round(v, 2) for k, v in dec.shares.items()})}; "
          f"last split {dec.last_split}; {dec.stats}", flush=True)
    report(f"JPEG decode, batch {args.batch}, mixed (ImageNet-like)", "img/s", ours, peers)
    best_peer = max(peers.values()) if peers else float("nan")
    print(f"# sluice / best peer = {ours / best_peer:.2f}x (target >= 1.3x)", flush=True)
    op.close()

    if len({len(b) for b in byte_batches}) == 1:  # external_source takes whole batches of one size
        run, _pipe = sluice_memory_pipeline_pass(byte_batches, args.threads, args.device_id)
        mem = best_rate(run, n, args.repeat)
        report(f"JPEG decode, batch {args.batch}, external_source + decoders.image mixed pipeline (ImageNet-like)",
               "img/s", mem, peers)
        print(f"# sluice pipeline (bytes from memory) / best peer = {mem / best_peer:.2f}x", flush=True)

    try:
        run, m = sluice_pipeline_pass(args.folder, n, args.batch, args.threads, args.device_id)
        report(f"readers.file + decoders.image mixed pipeline, batch {args.batch}", "img/s",
               best_rate(run, m, args.repeat), {})
    except Exception as exc:  # noqa: BLE001
        print(f"# pipeline run failed: {exc}", flush=True)


if __name__ == "__main__":
    main()
