"""What slows readers.file's batch read when the audio program's device stage runs beside it: the host memory the
batch's DMA reads, or the GIL the device stage's Python holds.

    python benchmarks/diag/read_interference.py /tmp/sbs/wav [--iterations 300]

Rows (clips/s of a GPU pipeline that only reads batches of 64 WAVs into its page-locked buffer, 16 threads):
alone; beside a thread copying 56 MB page-locked buffers to the GPU without a pause (no GIL held); beside a thread
running pure Python 30 % of the time (GIL held in 0.3 ms stretches). Then side_by_side.py's `audio_mixed` program
with Python's default GIL switch interval (5 ms) and with 0.5 ms.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from audio_stages import build  # noqa: E402  (side_by_side.py's audio program)


def read_rate(files, iterations: int, full: bool = False) -> float:
    p = build(files, "full" if full else "read", mixed=True)
    for _ in range(10):
        p.run()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iterations):
        p.run()
    torch.cuda.synchronize()
    rate = iterations * 64 / (time.perf_counter() - t)
    p.close()
    return rate


def beside(work, files, iterations: int) -> float:
    stop = threading.Event()
    th = threading.Thread(target=work, args=(stop,), daemon=True)
    th.start()
    try:
        return read_rate(files, iterations)
    finally:
        stop.set()
        th.join()


def copier(stop) -> None:
    host = torch.empty(56 << 20, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty_like(host, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        while not stop.is_set():
            dev.copy_(host, non_blocking=True)
            s.synchronize()


def python_spinner(stop) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        x = 0
        while time.perf_counter() - t < 3e-4:
            x += 1
        time.sleep(7e-4)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--iterations", type=int, default=300)
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.data, "*.wav")))
    for round_ in range(2):
        alone, dma = read_rate(files, a.iterations), beside(copier, files, a.iterations)
        spinning = beside(python_spinner, files, a.iterations)
        print(f"round {round_ + 1}: read alone {alone:,.0f} clips/s; beside DMA {dma:,.0f}; beside Python 30 % "
              f"{spinning:,.0f}", flush=True)
        default = read_rate(files, a.iterations, full=True)
        sys.setswitchinterval(5e-4)
        short = read_rate(files, a.iterations, full=True)
        sys.setswitchinterval(5e-3)
        print(f"round {round_ + 1}: audio_mixed, switch interval 5 ms {default:,.0f} clips/s; 0.5 ms {short:,.0f}",
              flush=True)


if __name__ == "__main__":
    main()
