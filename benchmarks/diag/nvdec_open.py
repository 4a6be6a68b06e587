"""What opening PyNvVideoCodec's SimpleDecoder on a file costs, against the file's length, alone and 7 at once.

    python benchmarks/diag/nvdec_open.py video60.mp4 video600.mp4 [--sessions 7]

For each file: one decoder made (the constructor, then its first frame, which makes the hardware session), a
switch of that decoder to the file (``reconfigure_decoder``), then ``--sessions`` decoders made at once in threads
(as ``NvdecBackend.open_ahead`` does): when each thread finished, so that a serialised constructor (one that holds
the GIL or a lock) shows as finish times one after the other.
"""
from __future__ import annotations

import argparse
import threading
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--sessions", type=int, default=7)
    a = ap.parse_args()
    import PyNvVideoCodec as nvc
    import torch

    torch.cuda.init()
    warm = nvc.SimpleDecoder(a.files[0], gpu_id=0, use_device_memory=True, output_color_type=nvc.OutputColorType.RGB)
    warm.get_batch_frames_by_index([0])
    for path in a.files:
        t = time.perf_counter()
        dec = nvc.SimpleDecoder(path, gpu_id=0, use_device_memory=True, output_color_type=nvc.OutputColorType.RGB)
        made = time.perf_counter() - t
        dec.get_batch_frames_by_index([0])
        first = time.perf_counter() - t - made
        t = time.perf_counter()
        warm.reconfigure_decoder(path)
        switched = time.perf_counter() - t
        ends: list[float] = []
        t0 = time.perf_counter()

        def one() -> None:
            d = nvc.SimpleDecoder(path, gpu_id=0, use_device_memory=True, output_color_type=nvc.OutputColorType.RGB)
            ends.append(time.perf_counter() - t0)
            d.get_batch_frames_by_index([0])
            ends.append(-(time.perf_counter() - t0))
            keep.append(d)

        keep: list = []
        threads = [threading.Thread(target=one) for _ in range(a.sessions)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        made_at = sorted(e for e in ends if e >= 0)
        first_at = sorted(-e for e in ends if e < 0)
        print(f"{path}: one decoder made in {made:.3f} s, first frame {first:.3f} s; switch to it "
              f"{switched:.3f} s; {a.sessions} at once made at " + " ".join(f"{x:.2f}" for x in made_at)
              + " s, first frames at " + " ".join(f"{x:.2f}" for x in first_at) + " s", flush=True)
        del keep, dec


if __name__ == "__main__":
    main()
