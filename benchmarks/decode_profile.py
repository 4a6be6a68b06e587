"""Where the ``mixed`` image decoder's time goes, batch by batch: the operator with and without the scan check,
the decoder with the probes made beforehand, and the wall time of each phase (header probes, each GPU path's
decode call and finishing, the scan check, waiting for the GPU paths).

Usage (on the GPU machine, after benchmarks/make_imagenet_like.py)::

    python benchmarks/decode_profile.py /tmp/imagenet_like
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_diag import best
from decode_images import batches, load, sluice_mixed_pass

from sluice.backends.image import cpu as scpu
from sluice.backends.image import formats
from sluice.backends.image.scan_check import BatchScanCheck
from sluice.pipeline.pool import ThreadPool


class PhaseClock:
    """Wraps functions to add up their wall time per name (thread-safe enough for a diagnostic: += on floats
    under the GIL)."""

    def __init__(self):
        self.seconds = defaultdict(float)
        self.calls = defaultdict(int)

    def wrap(self, owner, attr: str, name: str):
        original = getattr(owner, attr)

        def timed(*a, **k):
            s = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                self.seconds[name] += time.perf_counter() - s
                self.calls[name] += 1
        setattr(owner, attr, timed)
        return original

    def report(self, n_batches: int):
        for name in sorted(self.seconds):
            print(f"PHASE {name:40s} {1e3 * self.seconds[name] / n_batches:8.2f} ms/batch "
                  f"({self.calls[name] / n_batches:.0f} calls/batch)", flush=True)
        self.seconds.clear()
        self.calls.clear()


def rate(fn, n_images: int) -> float:
    """Best of three timed passes after a warm-up, images/s (decode_diag's timing)."""
    return best(fn, n_images, repeat=3)


def wrap_decoder(clock: PhaseClock, dec, prefix: str = "") -> None:
    """Time a GpuImageDecoder's phases: the batch, each GPU path's decode call and finishing, the scan check."""
    clock.wrap(dec, "_decode_on", f"{prefix}gpu decode call (per path)")
    clock.wrap(dec, "_run_gpu_path", f"{prefix}gpu path incl. finishing (per path)")
    clock.wrap(dec, "_scan_check", f"{prefix}scan check (helper thread)")
    clock.wrap(dec, "decode", f"{prefix}GpuImageDecoder.decode")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path)
    ap.add_argument("--count", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=16)
    a = ap.parse_args()
    files, _ = load(a.folder, a.count)
    n = len(files)
    bb = batches(files, a.batch)
    nb = [[np.frombuffer(b, np.uint8) for b in x] for x in bb]

    s = time.perf_counter()
    infos = [[scpu.probe(b) for b in x] for x in nb]
    print(f"PROFILE probe, one thread: {1e6 * (time.perf_counter() - s) / n:.1f} us/img", flush=True)
    s = time.perf_counter()
    for x in nb:
        for b in x:
            formats.jpeg_scan_is_plausible(b)
    print(f"PROFILE scan check, one thread: {1e6 * (time.perf_counter() - s) / n:.1f} us/img", flush=True)
    pool = ThreadPool(a.threads)  # says its threads, by which sluice's kernels share their work
    s = time.perf_counter()
    for x in nb:
        list(pool.map(formats.jpeg_scan_is_plausible, x))
    print(f"PROFILE scan check, {a.threads} threads: {1e6 * (time.perf_counter() - s) / n:.1f} us/img wall",
          flush=True)

    run, op = sluice_mixed_pass(bb, a.threads, 0, 0.9)
    print(f"PROFILE operator, default: {rate(run, n):,.0f} img/s", flush=True)
    dec = op._decoder
    dec.validate_scans = False
    print(f"PROFILE operator, scan check off: {rate(run, n):,.0f} img/s", flush=True)
    dec.validate_scans = True
    gpu_check = dec._scan_check
    dec._scan_check = BatchScanCheck(gpu_check.device, "cpu")
    print(f"PROFILE operator, scan check on the CPU (one helper thread): {rate(run, n):,.0f} img/s", flush=True)
    dec._scan_check = gpu_check

    stream = torch.cuda.current_stream()

    def decoder_only():
        for x, inf in zip(nb, infos):
            dec.decode(x, infos=inf, thread_pool=pool, stream=stream)
    for hw in (0.9, 0.0, 1.0):
        dec._hw_share = hw
        for check in (True, False):
            dec.validate_scans = check
            print(f"PROFILE decoder (probes beforehand), hw share {hw}, scan check {check}: "
                  f"{rate(decoder_only, n):,.0f} img/s", flush=True)
    dec._hw_share, dec.validate_scans = 0.9, True

    clock = PhaseClock()
    wrap_decoder(clock, dec)
    clock.wrap(scpu, "probe", "probe (summed)")
    import sluice.ops.decoders.image as dimg
    clock.wrap(dimg, "probe", "operator probes")
    run()
    torch.cuda.synchronize()
    clock.report(len(bb))

    # decoders.image_random_crop: the training pipeline's decoder (window draws, whole-image hardware decode
    # cropped on the GPU, region decode on the CUDA path).
    run_rc, op_rc = sluice_mixed_pass(bb, a.threads, 0, 0.9, name="decoders.image_random_crop")
    print(f"PROFILE image_random_crop operator, default: {rate(run_rc, n):,.0f} img/s", flush=True)
    dec_rc = op_rc._decoder
    dec_rc.validate_scans = False
    print(f"PROFILE image_random_crop operator, scan check off: {rate(run_rc, n):,.0f} img/s", flush=True)
    dec_rc.validate_scans = True
    wrap_decoder(clock, dec_rc, "rc: ")
    clock.wrap(dimg, "random_crop_window", "rc: window draws")
    run_rc()
    torch.cuda.synchronize()
    clock.report(len(bb))


if __name__ == "__main__":
    main()
