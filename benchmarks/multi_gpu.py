"""One rank of benchmarks/multi_gpu.sh: a program of peers/side_by_side.py run under torchrun, adapted only as DALI's
multi-GPU examples are (``device_id`` = LOCAL_RANK, ``shard_id`` = RANK, ``num_shards`` = WORLD_SIZE on the
reader), with DALI or sluice; writes ``OUT/rank<r>.json``: the rate it measured and what it ran on.

    torchrun --standalone --nproc_per_node=N benchmarks/multi_gpu.py WORKLOAD IMPL DATA --out DIR [--cpu]

The program's text is taken as it is and rewritten by the substitutions of ADAPT (each must apply, so a changed
program fails loudly rather than run unadapted). ``--cpu`` adds those of CPU_DRY_RUN, which move the program to
the CPU with small batches: only to check this harness on a machine without GPUs, never a figure to compare.

What the rank ran on: its share of the cores as sluice computes it (cores it may run on / LOCAL_WORLD_SIZE), the
threads of the process (peak of /proc/self/task) and its child processes (peak), the threads that were busy
(more than a quarter of a core over the timed run), and the cores the rank used on average (its CPU time and its
children's over the wall time). Standard library and torch only: DALI's environment has no sluice.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "side_by_side.py")

#: (pattern, replacement): what DALI's multi-GPU examples change in a one-GPU program
ADAPT = [
    (r"device_id=0\b", "device_id=LOCAL_RANK"),
    (r"fn\.readers\.file\(", "fn.readers.file(shard_id=RANK, num_shards=WORLD_SIZE, "),
]
#: --cpu: the same programs on CPU ranks with small batches (the harness's check, not a benchmark)
CPU_DRY_RUN = [
    (r"device='mixed'", "device='cpu'"),
    (r"device_id=LOCAL_RANK", "device_id=None"),
    (r"\.gpu\(\)", ""),
    (r"torch\.cuda\.synchronize\(\)", "None"),
    (r"bs = (256|64)\b", "bs = 4"),
    (r"n = 40\b", "n = 3"),
]


def adapt(text: str, subs: list[tuple[str, str]]) -> str:
    for pattern, replacement in subs:
        text, count = re.subn(pattern, replacement, text)
        if not count:
            raise SystemExit(f"multi_gpu.py: '{pattern}' is not in {PROGRAM}; adapt ADAPT to the program")
    return text


def _ticks(path: str) -> int:
    """utime + stime of a /proc stat file, in clock ticks; 0 when it is gone."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError):
        return 0


def child_pids() -> list[int]:
    """This process's child processes (those of every thread); tests/ranks_job.py uses it too."""
    pids: list[int] = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:  # the thread ended meanwhile
            pass
    return pids


class Census(threading.Thread):
    """Peaks of the process's threads and child processes, sampled every 20 ms, and the CPU time of every thread
    (from when it was first seen) and child, to tell the busy threads from the waiting ones."""

    def __init__(self) -> None:
        super().__init__(name="census", daemon=True)
        self.tasks = self.children = 0
        self.thread_ticks: dict[str, list[int]] = {}  # thread -> [ticks first seen, ticks last seen]
        self.child_ticks: dict[int, int] = {}
        self.done = threading.Event()

    def sample(self) -> None:
        tids = os.listdir("/proc/self/task")
        kids = child_pids()
        self.tasks, self.children = max(self.tasks, len(tids)), max(self.children, len(kids))
        for tid in tids:
            ticks = _ticks(f"/proc/self/task/{tid}/stat")
            seen = self.thread_ticks.setdefault(tid, [ticks, ticks])
            seen[1] = max(seen[1], ticks)
        for pid in kids:
            self.child_ticks[pid] = max(self.child_ticks.get(pid, 0), _ticks(f"/proc/{pid}/stat"))

    def run(self) -> None:
        while not self.done.wait(0.02):
            self.sample()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("workload")
    parser.add_argument("impl", choices=("dali", "sluice"))
    parser.add_argument("data")
    parser.add_argument("--out", required=True)
    parser.add_argument("--cpu", action="store_true", help="the harness's dry run on CPU ranks")
    args = parser.parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank, local_world = int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    with open(PROGRAM) as f:
        text = f.read()
    text = adapt(text, ADAPT + (CPU_DRY_RUN if args.cpu else []))
    body, dispatch = text.split("\ntry:\n", 1)
    sys.argv = [PROGRAM, args.workload, args.impl, args.data]
    ns = {"__name__": "side_by_side", "__file__": PROGRAM, "RANK": rank, "WORLD_SIZE": world,
          "LOCAL_RANK": local_rank}
    exec(compile(body, PROGRAM, "exec"), ns)
    result: dict = {}
    printed = ns["report"]

    def report(rate, unit, extra=""):
        result.update(rate=rate, unit=unit, extra=extra)
        printed(rate, unit, extra)

    ns["report"] = report
    if not args.cpu:
        import torch
        torch.cuda.set_device(local_rank)
    census = Census()
    census.start()
    ticks0, wall0 = os.times(), time.monotonic()
    exec(compile("try:\n" + dispatch, PROGRAM, "exec"), ns)
    census.done.set()
    census.join()
    census.sample()
    wall = time.monotonic() - wall0
    used = os.times()
    hz = os.sysconf("SC_CLK_TCK")
    affinity = len(os.sched_getaffinity(0))
    row = dict(workload=args.workload, implementation=args.impl, rank=rank, world=world, local_world=local_world,
               rate=result.get("rate"), unit=result.get("unit"), extra=result.get("extra"),
               affinity=affinity, share=max(1, affinity // max(1, local_world)),
               omp_threads=os.environ.get("OMP_NUM_THREADS"), peak_threads=census.tasks,
               peak_children=census.children,
               busy_threads=sum((last - first) / hz > 0.25 * wall for first, last in census.thread_ticks.values()),
               cores_used=round((used.user - ticks0.user + used.system - ticks0.system
                                 + sum(census.child_ticks.values()) / hz) / wall, 2),
               wall_s=round(wall, 2), cpu_dry_run=args.cpu)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(row, f)
    return 0 if result else 1


if __name__ == "__main__":
    sys.exit(main())
