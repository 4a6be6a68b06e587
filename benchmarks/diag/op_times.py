"""Where a pipeline's batch time goes, operator by operator: the speech program (speech_side_by_side.py), the
Whisper program (whisper_side_by_side.py) or nnU-Net's 3-D program (nnunet_side_by_side.py) run by sluice with
every node's run timed (host time; with ``--sync`` each device node also waits for the GPU, so its time is the
GPU's).

    python benchmarks/diag/op_times.py speech ROOT [--batches 40] [--sync]
    python benchmarks/diag/op_times.py whisper ROOT
    python benchmarks/diag/op_times.py nnunet ROOT [--cpu]     (--cpu: every operator on the CPU, no GPU needed)

Prints per node the mean milliseconds a batch, per stage, and the pipeline's rate over the same batches.
"""
import argparse
import collections
import glob
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("program", choices=("speech", "whisper", "nnunet"))
    ap.add_argument("root")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("--cpu", action="store_true", help="nnunet only: the program with every operator on the CPU")
    a = ap.parse_args()
    import torch
    from sluice.pipeline import executor as ex

    times = collections.defaultdict(float)
    counts = collections.Counter()
    original = ex.Executor.run_node

    def timed(self, node, iteration, values):
        start = time.perf_counter()
        original(self, node, iteration, values)
        if a.sync and node.device != "cpu":
            torch.cuda.synchronize()
        times[node.describe()] += time.perf_counter() - start
        counts[node.describe()] += 1

    ex.Executor.run_node = timed
    if a.program == "speech":
        import speech_side_by_side as prog
        files = sorted(glob.glob(os.path.join(a.root, "**", "*.wav"), recursive=True) +
                       glob.glob(os.path.join(a.root, "**", "*.flac"), recursive=True))
        pipe = prog.build("sluice", files, 64, 16)()
    elif a.program == "nnunet":
        import nnunet_side_by_side as prog
        pipe = prog.build("sluice", sorted(glob.glob(os.path.join(a.root, "*_x.npy"))),
                          sorted(glob.glob(os.path.join(a.root, "*_y.npy"))), 2, 8, cpu=a.cpu)()
    else:
        import whisper_side_by_side as prog
        files = sorted(glob.glob(os.path.join(a.root, "*", "*.wav")))
        pipe = prog.build("sluice", files, 80, 32)()
    pipe.build()
    sync = (lambda: None) if a.cpu else torch.cuda.synchronize
    for _ in range(5):
        pipe.run()
    sync()
    times.clear()
    counts.clear()
    t = time.perf_counter()
    for _ in range(a.batches):
        pipe.run()
    sync()
    dt = time.perf_counter() - t
    print(f"{a.program}: {a.batches / dt:.1f} batches/s ({dt / a.batches * 1e3:.2f} ms a batch){' synced' if a.sync else ''}")
    for name, total in sorted(times.items(), key=lambda kv: -kv[1]):
        print(f"  {total / max(1, counts[name]) * 1e3:7.2f} ms  {name}")


if __name__ == "__main__":
    main()
