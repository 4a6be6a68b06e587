"""Where the time of side_by_side.py's video programs goes in a fresh process: build, then each batch.

    python benchmarks/diag/video_startup.py PROGRAM FILE [--clips 64] [--batches-only]

PROGRAM is ``video_frames`` or ``video_reader``, written as in ``peers/side_by_side.py`` (clips of 16 frames at
stride 60, batches of 16, random starts of seed 0, 16 threads). The peer program times its clips from the first
``run()`` after ``build()`` in a fresh process, so what the first batch pays (decoder sessions, worker processes,
the file's index) weighs on its figure as much as the decoding: this prints ``build`` and every batch's seconds,
then the program's own figure (clips / seconds of the batches) and every frame's barcode check.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from video_length import BATCH, L, STRIDE, clips  # noqa: E402
from gen import read_barcode  # noqa: E402  (video_length put peers/ on the path)


JOBS: list = []  # (start, seconds, where, frames, thread) of every job
MAIN: list = []  # (start, end, phase) of the program's own steps: "run" (p.run()) and "copy" (as_cpu)


def trace_jobs(t0: float) -> None:
    """Record each job of the hybrid backend (NVDEC, CPU in a thread, CPU in a process) and each worker process's
    start and readiness, relative to ``t0``."""
    from sluice.backends.video import cpu_worker, hybrid, nvdec

    do, in_process = hybrid.HybridBackend._do, hybrid.HybridBackend._decode_in_process
    start = cpu_worker.WorkerProcess.start
    ready = cpu_worker.WorkerProcess.poll_ready

    def traced_do(self, job, kind, state):
        self._local.where = kind if kind == "nvdec" else "cpu-thread"
        t = time.perf_counter()
        do(self, job, kind, state)
        JOBS.append((t - t0, time.perf_counter() - t, self._local.where, job.weight, threading.current_thread().name))

    def traced_in_process(self, job, worker):
        self._local.where = "cpu-process"
        return in_process(self, job, worker)

    def traced_start(self):
        start(self)
        print(f"  worker process started at {time.perf_counter() - t0:.2f} s", flush=True)

    def traced_ready(self):
        was = getattr(self, "_seen_ready", False)
        now = ready(self)
        if now and not was:
            self._seen_ready = True
            print(f"  worker process {self.pid} ready at {time.perf_counter() - t0:.2f} s", flush=True)
        return now

    opened = nvdec.NvdecBackend.open_ahead

    def traced_open_ahead(self, path):
        threads = opened(self, path)
        print(f"  NVDEC decoders opened ahead from {time.perf_counter() - t0:.2f} s", flush=True)

        def watch() -> None:
            for th in threads:
                th.join()
                print(f"  an NVDEC decoder opened ahead at {time.perf_counter() - t0:.2f} s", flush=True)

        threading.Thread(target=watch, daemon=True).start()
        return threads

    nvdec.NvdecBackend.open_ahead = traced_open_ahead
    hybrid.HybridBackend._do = traced_do
    hybrid.HybridBackend._decode_in_process = traced_in_process
    cpu_worker.WorkerProcess.start = traced_start
    cpu_worker.WorkerProcess.poll_ready = traced_ready


def job_summary(since: float) -> str:
    """Jobs that started after ``since``: count, frames, summed and longest seconds, per place."""
    rows = {}
    for start, seconds, where, frames, _ in JOBS:
        if start >= since:
            r = rows.setdefault(where, [0, 0, 0.0, 0.0])
            r[0] += 1
            r[1] += frames
            r[2] += seconds
            r[3] = max(r[3], seconds)
    return "; ".join(f"{w}: {n} jobs {f} frames {s:.2f} s (longest {m:.2f})" for w, (n, f, s, m) in rows.items())


def timeline(sessions: int, workers: int, since: float, step: float = 0.1) -> None:
    """Per ``step`` seconds from ``since``: the share of NVDEC sessions and CPU workers decoding, and what the
    program's thread did (r: in run(), c: copying the batch to the host, .: its own work)."""
    end = max(s + d for s, d, *_ in JOBS)
    firsts = {}
    for s, _, where, _, thread in sorted(JOBS):
        firsts.setdefault((where, thread), s)
    for where in ("nvdec", "cpu-process", "cpu-thread"):
        starts = sorted(v for (w, _), v in firsts.items() if w == where)
        if starts:
            print(f"  first job of each {where} thread at " + " ".join(f"{x:.2f}" for x in starts) + " s")
    for b in np.arange(since, end, step):
        busy = {"nvdec": 0.0, "cpu": 0.0}
        for s, d, where, *_ in JOBS:
            overlap = min(s + d, b + step) - max(s, b)
            if overlap > 0:
                busy["nvdec" if where == "nvdec" else "cpu"] += overlap
        phase = "".join(p for s, e, p in MAIN if min(e, b + step) - max(s, b) > step / 2) or "."
        print(f"  {b:6.2f} s  nvdec {busy['nvdec'] / step / sessions:4.0%} "
              f"{'#' * round(10 * busy['nvdec'] / step / sessions):10s} cpu {busy['cpu'] / step / workers:4.0%} "
              f"{'#' * round(10 * busy['cpu'] / step / workers):10s} {phase}")


def to_host(out, how: str):
    """The batch on the host as the peer copies it (``as_cpu``), or (diagnosis) not at all; other ways of copying
    are compared by ``to_host.py``."""
    if how == "none":
        import torch

        torch.cuda.synchronize()
        return None
    return out.as_cpu()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("program", choices=("video_frames", "video_reader"))
    ap.add_argument("file")
    ap.add_argument("--clips", type=int, default=64)
    ap.add_argument("--jobs", action="store_true", help="per batch: the hybrid backend's jobs by where they ran, "
                    "and when its CPU worker processes got ready")
    ap.add_argument("--timeline", action="store_true", help="with --jobs: each path's share busy per 0.1 s")
    ap.add_argument("--to-host", default="as_cpu", choices=("as_cpu", "none"),
                    help="whether the batch is copied to the host (as_cpu, as the peer program does) or not")
    a = ap.parse_args()
    t0 = time.perf_counter()
    from sluice import fn, pipeline_def, types

    if a.jobs:
        trace_jobs(t0)

    t_import = time.perf_counter() - t0
    want = clips(a.file, a.clips)
    if a.program == "video_frames":
        data = np.frombuffer(open(a.file, "rb").read(), dtype=np.uint8)

        @pipeline_def(batch_size=BATCH, num_threads=16, device_id=0, prefetch_queue_depth=1)
        def pipe():
            enc = fn.external_source(name="enc", dtype=types.UINT8, ndim=1, no_copy=True)
            fr = fn.external_source(name="fr", dtype=types.INT32, ndim=1)
            return fn.decoders.video(enc, device="mixed", frames=fr)
    else:
        import tempfile
        lst = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
        lst.writelines(f"{a.file} 0 {c[0]} {c[-1] + 1}\n" for c in want)
        lst.close()

        @pipeline_def(batch_size=BATCH, num_threads=16, device_id=0)
        def pipe():
            v, _ = fn.readers.video(device="gpu", file_list=lst.name, file_list_frame_num=True, sequence_length=L,
                                    stride=STRIDE, step=10**9, random_shuffle=False,
                                    file_list_include_preceding_frame=False, name="r")
            return v
    t = time.perf_counter()
    p = pipe()
    p.build()
    t_build = time.perf_counter() - t
    got, times = [], []
    start = time.perf_counter()
    for i in range(0, a.clips, BATCH):
        t = time.perf_counter()
        since = t - t0
        if a.program == "video_frames":
            b = want[i:i + BATCH]
            p.feed_input("enc", [data] * len(b))
            p.feed_input("fr", [np.array(c, np.int32) for c in b])
        t_run = time.perf_counter()
        out, = p.run()
        t_copy = time.perf_counter()
        host = to_host(out, a.to_host)
        MAIN.extend([(t_run - t0, t_copy - t0, "r"), (t_copy - t0, time.perf_counter() - t0, "c")])
        got += [np.asarray(host[k]) for k in range(len(out))] if host is not None else []
        times.append(time.perf_counter() - t)
        if a.jobs:
            print(f"  batch {len(times)}: {times[-1]:.2f} s; {job_summary(since)}", flush=True)
    total = time.perf_counter() - start
    if a.timeline:
        from sluice.ops.decoders.video import gpu_backend
        backend = gpu_backend(p.executor.runtime, 0)
        timeline(max(1, backend.nvdec_workers), max(1, backend.cpu_workers), start - t0)
    ok = sum(int(read_barcode(f) == w) for frames, c in zip(got, want) for f, w in zip(frames, c))
    print(f"{a.program} {os.path.basename(a.file)}: import {t_import:.2f} s, build {t_build:.2f} s, batches "
          + " ".join(f"{x:.2f}" for x in times) + f" s; {a.clips / total:.2f} clips/s (the peer's figure), "
          f"steady {BATCH * (len(times) - 1) / max(sum(times[1:]), 1e-9):.2f} clips/s; ok {ok}/{len(want) * L}"
          + (f" (to host: {a.to_host})" if a.to_host != "as_cpu" else ""),
          flush=True)
    p.close()


if __name__ == "__main__":
    main()
