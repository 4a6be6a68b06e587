"""The batched JPEG scan check's parts, timed alone on an idle GPU: header walks, the gather into pinned memory,
the GPU classification with its copy back, and the whole call (GPU and CPU forms).

    python benchmarks/scan_check_micro.py
"""

from __future__ import annotations

import time

import numpy as np
import simplejpeg
import torch

from sluice.backends.image.formats import as_bytes, jpeg_scan_start
from sluice.backends.image.scan_check import BatchScanCheck, _as_tensor


def timed(name, fn, repeat=5):
    fn()
    best = float("inf")
    for _ in range(repeat):
        s = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - s)
    print(f"SCAN {name:50s} {best * 1e3:8.2f} ms/batch", flush=True)


def main() -> None:
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (375, 500, 3), dtype=np.uint8)
    smooth = np.clip(base.astype(np.int16) // 4 + np.linspace(0, 180, 500)[None, :, None], 0, 255).astype(np.uint8)
    jpegs = [bytearray(simplejpeg.encode_jpeg(np.roll(smooth, i, axis=1), quality=90)) for i in range(256)]
    print(f"SCAN 256 JPEGs, mean {np.mean([len(j) for j in jpegs]) / 1024:.1f} KiB", flush=True)
    views = [as_bytes(j) for j in jpegs]
    total = sum(len(v) for v in views)
    timed("header walks (jpeg_scan_start)", lambda: [jpeg_scan_start(v) for v in views])
    host = torch.empty(total, dtype=torch.uint8, pin_memory=True)
    timed("torch.cat into pinned", lambda: torch.cat([_as_tensor(v) for v in views], out=host))
    timed("pinned alloc + cat", lambda: torch.cat([_as_tensor(v) for v in views],
                                                 out=torch.empty(total, dtype=torch.uint8, pin_memory=True)))
    dev = torch.device("cuda", 0)
    check = BatchScanCheck(dev)

    def gpu_part():
        with torch.cuda.stream(check._stream):
            d = host.to(dev, non_blocking=True)
            pos, code = check._classify(d)
            pos.cpu(), code.cpu()
    timed("H2D + classify + copy back", gpu_part)
    timed("BatchScanCheck (gpu), whole call", lambda: check(jpegs))
    timed("BatchScanCheck (cpu), whole call", lambda: BatchScanCheck(dev, "cpu")(jpegs))


if __name__ == "__main__":
    main()
