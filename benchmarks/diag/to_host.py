"""How fast a large batch of GPU samples reaches host memory, by several ways of copying it.

    python benchmarks/diag/to_host.py [--samples 16] [--shape 16 720 1280 3] [--rounds 4]

The video programs of peers/side_by_side.py copy each batch (16 clips of 16 720p frames: 708 MB) to the host with
``as_cpu()``. Each way is timed on fresh destination memory every round (the program keeps every batch), after
one warm-up round; prints GB/s per way. Before 2026-11-25 ``as_cpu`` copied as "per-sample .cpu()" does; it now
copies through ``sluice.pipeline.to_host`` (16-18 GB/s against 1.2 on the H200, lease of that day).
"""
from __future__ import annotations

import argparse
import mmap
import time

import torch

from sluice.pipeline.to_host import _fresh_host_bytes, samples_to_host


def fresh(nbytes: int, huge: bool) -> torch.Tensor:
    """Fresh anonymous memory (never touched); ``huge``: advised to transparent huge pages (as as_cpu's)."""
    if huge:
        return _fresh_host_bytes(nbytes)
    return torch.frombuffer(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS), dtype=torch.uint8)


def per_sample(samples):
    return [s.cpu() for s in samples]


def one_buffer(samples, huge=False):
    n = sum(s.numel() for s in samples)
    host = fresh(n, huge)
    off = 0
    for s in samples:
        host[off:off + s.numel()].copy_(s.reshape(-1))
        off += s.numel()
    return host


def pinned_dest(samples):
    return [torch.empty(s.shape, dtype=s.dtype, pin_memory=True).copy_(s) for s in samples]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--shape", type=int, nargs="+", default=[16, 720, 1280, 3])
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    samples = [torch.randint(0, 255, a.shape, dtype=torch.uint8, device="cuda") for _ in range(a.samples)]
    nbytes = sum(s.numel() for s in samples)
    ref = torch.cat([s.reshape(-1) for s in samples]).cpu()
    ways = {"per-sample .cpu() (torch)": per_sample, "one buffer, copy_": one_buffer,
            "one buffer, huge pages, copy_": lambda s: one_buffer(s, True),
            "pinned staging (as_cpu, to_host.py)": samples_to_host, "pinned destination": pinned_dest}
    print(f"{a.samples} samples of {a.shape}: {nbytes / 1e6:.0f} MB; torch threads {torch.get_num_threads()}; THP "
          + open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip())
    keep = []
    for name, way in ways.items():
        times = []
        for r in range(a.rounds + 1):
            torch.cuda.synchronize()
            t = time.perf_counter()
            out = way(samples)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
            keep.append(out)
        flat = torch.cat([o.reshape(-1) for o in out]) if isinstance(out, list) else out
        ok = torch.equal(flat, ref)
        best, med = min(times[1:]), sorted(times[1:])[len(times[1:]) // 2]
        print(f"  {name:34s} best {nbytes / best / 1e9:5.1f} GB/s, median {nbytes / med / 1e9:5.1f} GB/s, first "
              f"{times[0]:.3f} s; equal {ok}", flush=True)
        if len(keep) > 12:
            keep = keep[-8:]


if __name__ == "__main__":
    main()
