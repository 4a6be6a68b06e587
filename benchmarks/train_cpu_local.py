"""The CPU half of DALI's ImageNet example with ``dali_cpu=True`` (issue 18's ``train_cpu`` workload) on a machine
without a GPU: readers.file -> decoders.image_random_crop(cpu) -> resize 224x224 (cpu, INTERP_TRIANGULAR), no
``.gpu()`` and no crop_mirror_normalize, in img/s and in CPU milliseconds per image (all threads); once with
sluice's compiled core (native) and once with its pure-Python fallbacks (``sluice.native.fallback()``),
interleaved, best of ``--rounds``.

With ``PYTHONPATH`` pointing at an older checkout the same script measures that code (before the core decoded and
resized, both figures are its per-sample kernels).

Usage::

    python benchmarks/train_cpu_local.py                        # 512 generated JPEGs in a temporary folder
    python benchmarks/train_cpu_local.py /tmp/imagenet_like --threads 2 --batch-size 256 --iters 6
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import report  # noqa: E402
from make_imagenet_like import main as make_files  # noqa: E402


def build(file_root: str, batch_size: int, threads: int):
    from sluice import fn, pipeline_def, types

    @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, seed=12)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=file_root, random_shuffle=True, name="Reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                               random_aspect_ratio=[0.8, 1.25], random_area=[0.1, 1.0],
                                               num_attempts=100)
        images = fn.resize(images, device="cpu", resize_x=224, resize_y=224, interp_type=types.INTERP_TRIANGULAR)
        return images, labels

    p = pipe()
    p.build()
    return p


def measure(p, batch_size: int, iters: int) -> tuple[float, float]:
    """(images per second, CPU milliseconds per image over all threads). The CPU time is the steadier figure on a
    shared machine: other processes stretch the wall time, much less the work done."""
    p.run()  # warm-up: thread start, first allocations
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(iters):
        p.run()
    images = iters * batch_size
    return images / (time.perf_counter() - start), (time.process_time() - cpu) / images * 1e3


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", type=Path, help="JPEGs in class sub-folders (default: 512 generated)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--iters", type=int, default=6, help="timed batches per measurement")
    ap.add_argument("--rounds", type=int, default=3, help="measurements per mode (best is reported)")
    args = ap.parse_args(argv)

    from sluice import native

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.folder
        if folder is None:
            folder = Path(tmp)
            make_files([str(folder), "--count", "512", "--classes", "8", "--workers", str(os.cpu_count() or 1)])
        best = {"native": (0.0, float("inf")), "fallback": (0.0, float("inf"))}
        for _ in range(args.rounds):  # interleaved: a busy machine slows both alike
            for mode, (rate, cpu) in best.items():
                with native.fallback() if mode == "fallback" else contextlib.nullcontext():
                    p = build(str(folder), args.batch_size, args.threads)
                    got = measure(p, args.batch_size, args.iters)
                    best[mode] = (max(rate, got[0]), min(cpu, got[1]))
                    p.close()
    workload = f"train_cpu local ({args.threads} threads, batch {args.batch_size})"
    print(f"compiled core built and enabled: {native.available()}")
    fallback = "sluice fallback (native.fallback())"
    report(workload, "img/s", best["native"][0], {fallback: best["fallback"][0]})
    report(workload + " CPU time", "ms/img", best["native"][1], {fallback: best["fallback"][1]},
           higher_is_better=False)


if __name__ == "__main__":
    main()
