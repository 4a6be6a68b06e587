"""Shared output format for the benchmark scripts: one table per workload, sluice beside its peers.

Every script prints, for each workload, lines of the form::

    workload | sluice <value> <unit> | <peer> <value> <unit> | ratio <sluice/peer>

and appends the same rows as JSON lines to ``$SLUICE_BENCH_OUT`` when it is set, so that one GPU run can be
collected into ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import json
import os
import platform
import time
from contextlib import contextmanager


def machine() -> str:
    """A short description of the machine: CPU count and, when present, the GPU name."""
    desc = f"{platform.machine()}, {os.cpu_count()} CPUs"
    try:
        import torch

        if torch.cuda.is_available():
            desc += f", {torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    except ImportError:  # pragma: no cover - torch is a core dependency
        pass
    return desc


def report(workload: str, unit: str, sluice: float, peers: dict[str, float], higher_is_better: bool = True) -> None:
    """Print sluice's figure beside each peer's and the ratio (>1 means sluice is better)."""
    rows = []
    for peer, value in peers.items():
        if higher_is_better:
            ratio = sluice / value if value else float("inf")
        else:
            ratio = value / sluice if sluice else float("inf")
        rows.append({"workload": workload, "unit": unit, "sluice": sluice, "peer": peer, "peer_value": value,
                     "ratio": ratio, "machine": machine(), "date": time.strftime("%Y-%m-%d")})
        print(f"{workload} | sluice {sluice:,.2f} {unit} | {peer} {value:,.2f} {unit} | ratio {ratio:.2f}x",
              flush=True)
    if not peers:
        rows.append({"workload": workload, "unit": unit, "sluice": sluice, "machine": machine(),
                     "date": time.strftime("%Y-%m-%d")})
        print(f"{workload} | sluice {sluice:,.2f} {unit}", flush=True)
    out = os.environ.get("SLUICE_BENCH_OUT")
    if out:
        with open(out, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


@contextmanager
def timed(sync_cuda: bool = True):
    """Yields a dict whose 'seconds' is filled on exit; synchronises CUDA around the block when available."""
    result = {}
    cuda = False
    if sync_cuda:
        try:
            import torch

            cuda = torch.cuda.is_available()
        except ImportError:  # pragma: no cover
            pass
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    yield result
    if cuda:
        torch.cuda.synchronize()
    result["seconds"] = time.perf_counter() - start


def images_per_second(batches, warmup: int, count: int, consume) -> float:
    """Items/s over ``count`` batches of the iterator ``batches`` after ``warmup`` batches; ``consume(batch)``
    does the per-batch work (moving to the GPU, normalising) and returns the batch's item count."""
    import torch

    it = iter(batches)
    for _ in range(warmup):
        consume(next(it))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start, items = time.perf_counter(), 0
    for _ in range(count):
        items += consume(next(it))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return items / (time.perf_counter() - start)


def loader_warmup(warmup: int, workers: int, prefetch_factor: int = 4) -> int:
    """Batches a DataLoader consumes before timing: all its workers prefetch and a few more, so that the timed
    batches are made while timed (timing a few batches after a short warm-up times batches that were already
    waiting in the queue)."""
    return warmup + prefetch_factor * workers + 2


def side_by_side_args(doc: str, make, count: int, what: str, batch: int, threads: int):
    """The command line of a DALI-vs-sluice program (``*_side_by_side.py``): ``SCRIPT make ROOT [COUNT]`` runs
    ``make(ROOT, COUNT)`` (COUNT default ``count``), says how long it took and returns None; otherwise returns an
    ArgumentParser with ``impl`` (dali | sluice), ``root``, ``--batch``, ``--threads`` and ``--cpu`` for the script
    to extend and parse."""
    import argparse
    import sys

    if len(sys.argv) > 2 and sys.argv[1] == "make":
        n = int(sys.argv[3]) if len(sys.argv) > 3 else count
        t = time.perf_counter()
        make(sys.argv[2], n)
        print(f"made {n} {what} in {time.perf_counter() - t:.1f} s")
        return None
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("impl", choices=("dali", "sluice"))
    ap.add_argument("root")
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--threads", type=int, default=threads)
    ap.add_argument("--cpu", action="store_true", help="every operator on the CPU: a smoke test of sluice without a "
                    "GPU (the timed program is the GPU one)")
    return ap
