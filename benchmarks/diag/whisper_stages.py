"""Where the Whisper log-mel program (benchmarks/whisper_side_by_side.py, sluice) spends its host time: each stage's
and each operator's host milliseconds a batch (the executor's stage runner and node runs timed, as audio_stages.py
does).

    python benchmarks/diag/whisper_stages.py /tmp/sbs/whisper [--iterations 24]
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from audio_stages import STAGE_SECONDS, time_stages  # noqa: E402
from whisper_side_by_side import build  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--iterations", type=int, default=24)
    a = ap.parse_args()
    time_stages()
    files = sorted(glob.glob(os.path.join(a.root, "*", "*.wav")))
    p = build("sluice", files, 80)()
    p.build()
    for _ in range(4):
        p.run()
    torch.cuda.synchronize()
    STAGE_SECONDS.clear()
    t = time.perf_counter()
    for _ in range(a.iterations):
        p.run()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / a.iterations
    print(f"wall {1e3 * wall:.2f} ms a batch ({32 / wall:,.0f} clips/s)")
    for k, v in sorted(STAGE_SECONDS.items(), key=lambda kv: -kv[1]):
        print(f"  {k:40s} {1e3 * v / a.iterations:7.2f} ms")


if __name__ == "__main__":
    main()
