"""How many frames per second each video decoding path gives on side_by_side.py's clips, alone and together.

    python benchmarks/diag/video_capacity.py FILE MODE [--sessions 7] [--cpu N] [--batches 8] [--no-share]
                                             [--timeline]

MODE ``hybrid`` runs the hybrid backend (``sessions`` NVDEC workers, ``cpu`` CPU worker processes: by default as many as
the backend chooses; ``--cpu 0`` or ``--sessions 0`` leave one path out) on the batches ``readers.video`` makes of the
peer's clips (16 clips of 16 frames at stride 60, seed 0), submitting each batch before waiting for the one before, as
the reader does. MODE ``simple`` gives the same batches' groups of pictures to ``sessions`` threads, each with its own
PyNvVideoCodec SimpleDecoder on the file, with nothing of sluice around them: what NVDEC gives through that API. Both
print decoded frames per second (from each group's keyframe to its last wanted frame) and clips per second after two
warm-up batches, and for ``hybrid`` how many cores the host kept busy (from /proc/stat) and each path's share;
``--timeline`` prints, per batch, each path's jobs, busy seconds and when its last job ended.
"""
from __future__ import annotations

import argparse
import os
import queue
import sys
import threading
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from video_length import BATCH, clips  # noqa: E402

JOBS: list = []  # (batch state id, path, thread, start, end, frames)


def trace(t0: float) -> None:
    from sluice.backends.video import hybrid

    do = hybrid.HybridBackend._do

    def traced(self, job, kind, state):
        t = time.perf_counter()
        do(self, job, kind, state)
        JOBS.append((id(state), kind, threading.current_thread().name, t - t0, time.perf_counter() - t0, job.weight))

    hybrid.HybridBackend._do = traced


def busy_cores() -> tuple[float, float]:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def run_hybrid(a, path: str, want: list) -> None:
    from sluice.backends.video.hybrid import HybridBackend
    from sluice.backends.video.index import get_index

    t0 = time.perf_counter()
    trace(t0)
    backend = HybridBackend(device_id=0, sessions=a.sessions, cpu_workers=a.cpu, share_gops=not a.no_share)
    backend.get_ready(path)
    idx = get_index(path)
    batches = [[(path, idx, c) for c in want[i:i + BATCH]] for i in range(0, len(want), BATCH)]
    for b in batches[-2:]:  # warm-up: worker processes, decoders on the file
        backend.decode_batch(b)
    timed = batches[:a.batches]
    frames, ends, states = 0, [], []
    del JOBS[:]  # the warm-up's (a later batch may reuse a state's id)
    start, cpu0 = time.perf_counter(), busy_cores()
    pending = backend.submit_batch(timed[0])
    for k in range(len(timed)):
        nxt = backend.submit_batch(timed[k + 1]) if k + 1 < len(timed) else None
        pending.result()
        ends.append(time.perf_counter() - t0)
        states.append(id(pending._state))
        frames += sum(s["frames"] for s in pending._state.stats.values())
        pending = nxt
    dt, cpu1 = time.perf_counter() - start, busy_cores()
    cores = (cpu1[0] - cpu0[0]) / (cpu1[1] - cpu0[1]) * os.cpu_count()
    by_path = defaultdict(lambda: [0, 0, 0.0])
    for sid, kind, _, s, e, w in JOBS:
        if sid in states:
            by_path[kind][0] += 1
            by_path[kind][1] += w
            by_path[kind][2] += e - s
    paths = "; ".join(f"{k}: {n} jobs {w} frames ({w / max(frames, 1):.0%}) {1e3 * busy / max(w, 1):.2f} ms/frame"
                      for k, (n, w, busy) in by_path.items())
    share = " no-share" if a.no_share else ""
    print(f"hybrid sessions={a.sessions} cpu={backend.cpu_workers}{share}: {frames / dt:.0f} frames/s, "
          f"{len(timed) * BATCH / dt:.2f} clips/s, {frames / len(timed):.0f} frames/batch, "
          f"{cores:.1f} cores busy; {paths}", flush=True)
    if a.timeline:
        prev = start - t0
        for k, (sid, end) in enumerate(zip(states, ends)):
            rows = defaultdict(lambda: [0, 0.0, set(), 0.0])
            for s_id, kind, thread, s, e, w in JOBS:
                if s_id == sid:
                    r = rows[kind]
                    r[0] += 1
                    r[1] += e - s
                    r[2].add(thread)
                    r[3] = max(r[3], e)
            text = "; ".join(f"{kind} {n} jobs busy {busy:.2f} s on {len(th)} threads, last ends {last - prev:+.2f} s"
                             for kind, (n, busy, th, last) in rows.items())
            print(f"  batch {k}: {end - prev:.2f} s; {text}", flush=True)
            prev = end
    backend.close()


def run_simple(a, path: str, want: list) -> None:
    import PyNvVideoCodec as nvc
    import torch

    from sluice.backends.video.index import get_index

    idx = get_index(path)
    keys = list(idx.key_frames)
    import bisect

    def jobs_of(batch):
        groups = {}
        for clip in batch:
            for f in clip:
                k = keys[bisect.bisect_right(keys, f) - 1]
                groups.setdefault((0 if not a.no_share else id(clip), k), set()).add(f)
        return [(k, sorted(fs)) for (_, k), fs in groups.items()]

    decoders = [nvc.SimpleDecoder(path, gpu_id=0, use_device_memory=True, output_color_type=nvc.OutputColorType.RGB)
                for _ in range(a.sessions)]
    for d in decoders:
        d.get_batch_frames_by_index([0])

    def work(dec, q, counts):
        while True:
            item = q.get()
            if item is None:
                return
            key, frames = item
            got = dec.get_batch_frames_by_index(frames)
            for fr in got:
                torch.from_dlpack(fr)[:idx.height, :idx.width].clone()
            counts.append(frames[-1] - key + 1)

    batches = [want[i:i + BATCH] for i in range(0, len(want), BATCH)][:a.batches]
    q, counts = queue.Queue(), []
    for b in batches:
        for job in sorted(jobs_of(b), key=lambda j: -(j[1][-1] - j[0])):
            q.put(job)
    for _ in decoders:
        q.put(None)
    torch.cuda.synchronize()
    start = time.perf_counter()
    threads = [threading.Thread(target=work, args=(d, q, counts)) for d in decoders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    dt = time.perf_counter() - start
    print(f"simple sessions={a.sessions}{' no-share' if a.no_share else ''}: {sum(counts) / dt:.0f} frames/s, "
          f"{len(batches) * BATCH / dt:.2f} clips/s, {len(counts)} jobs", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("mode", choices=("hybrid", "simple"))
    ap.add_argument("--sessions", type=int, default=7)
    ap.add_argument("--cpu", type=int, default=None, help="default: the backend's")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--no-share", action="store_true")
    ap.add_argument("--timeline", action="store_true")
    a = ap.parse_args()
    want = clips(a.file, BATCH * (a.batches + 2))
    (run_hybrid if a.mode == "hybrid" else run_simple)(a, a.file, want)


if __name__ == "__main__":
    main()
