"""Per-clip cost of side_by_side.py's video programs against the video's length, with what the decoders did.

    python benchmarks/diag/video_length.py PROGRAM FILE... [--device gpu|cpu] [--no-share] [--clips 64]

PROGRAM is ``video_frames`` (external_source bytes -> decoders.video) or ``video_reader`` (readers.video over a
frame-number file_list), written as in ``peers/side_by_side.py`` (clips of 16 frames at stride 60, batches of 16,
random starts of seed 0), after a warm-up batch; ``--device cpu`` runs the CPU variants. Prints per file: ms per clip, frames right by
their barcodes, and the hybrid backend's work summed over the run: frames decoded per clip on each path (from
keyframe to the last wanted frame of each group of pictures) and seconds per decoded frame of each path.
``--no-share`` decodes a group of pictures wanted by several clips of a batch once per clip (as DALI does):
clips of a short video overlap, so sharing makes them cheaper there than in a long one.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
from gen import read_barcode  # noqa: E402

L, STRIDE, BATCH = 16, 60, 16


def clips(path: str, n: int) -> list[list[int]]:
    import av

    with av.open(path) as c:
        total = c.streams.video[0].frames
    rng = random.Random(0)
    return [[s + STRIDE * j for j in range(L)] for s in (rng.randint(0, total - (L + 1) * STRIDE) for _ in range(n))]


def run(program: str, path: str, n: int, device: str) -> tuple[float, list]:
    from sluice import fn, pipeline_def, types

    want = clips(path, n)
    got = []
    gpu = device == "gpu"
    if program == "video_frames":
        data = np.frombuffer(open(path, "rb").read(), dtype=np.uint8)

        @pipeline_def(batch_size=BATCH, num_threads=16 if gpu else 2, device_id=0 if gpu else None,
                      prefetch_queue_depth=1)
        def pipe():
            enc = fn.external_source(name="enc", dtype=types.UINT8, ndim=1, no_copy=True)
            fr = fn.external_source(name="fr", dtype=types.INT32, ndim=1)
            return fn.decoders.video(enc, device="mixed" if gpu else "cpu", frames=fr)

        p = pipe()
        p.build()
        t = time.perf_counter()
        for i in range(0, n, BATCH):
            b = want[i:i + BATCH]
            p.feed_input("enc", [data] * len(b))
            p.feed_input("fr", [np.array(c, np.int32) for c in b])
            out, = p.run()
            out = out.as_cpu() if gpu else out
            got += [np.asarray(out[k]) for k in range(len(b))]
    else:
        lst = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
        lst.writelines(f"{path} 0 {c[0]} {c[-1] + 1}\n" for c in want)
        lst.close()

        @pipeline_def(batch_size=BATCH, num_threads=16 if gpu else 2, device_id=0 if gpu else None)
        def pipe():
            v, _ = fn.readers.video(device=device, file_list=lst.name, file_list_frame_num=True, sequence_length=L,
                                    stride=STRIDE, step=10**9, random_shuffle=False, name="r")
            return v

        p = pipe()
        p.build()
        t = time.perf_counter()
        for _ in range(n // BATCH):
            out, = p.run()
            out = out.as_cpu() if gpu else out
            got += [np.asarray(out[k]) for k in range(BATCH)]
    dt = time.perf_counter() - t
    ok = sum(int(read_barcode(f) == w) for frames, c in zip(got, want) for f, w in zip(frames, c))
    p.close()
    return dt, [ok, len(want) * L]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("program", choices=("video_frames", "video_reader"))
    ap.add_argument("files", nargs="+")
    ap.add_argument("--device", default="gpu", choices=("gpu", "cpu"))
    ap.add_argument("--no-share", action="store_true")
    ap.add_argument("--clips", type=int, default=64)
    a = ap.parse_args()
    from sluice.backends.video import hybrid

    totals: dict = {}
    finish_batch = hybrid.HybridBackend._finish

    def counted(self, state):  # sum each batch's per-path statistics
        finish_batch(self, state)
        for path, s in self.last_stats.items():
            for k, v in s.items():
                totals.setdefault(path, {}).setdefault(k, 0)
                totals[path][k] += v

    hybrid.HybridBackend._finish = counted
    if a.no_share:
        init = hybrid.HybridBackend.__init__
        hybrid.HybridBackend.__init__ = lambda self, *x, **kw: init(self, *x, **{**kw, "share_gops": False})
    for path in a.files:
        run(a.program, path, BATCH, a.device)  # warm-up: decoder sessions, worker processes, the file's index
        totals.clear()
        dt, (ok, of) = run(a.program, path, a.clips, a.device)
        work = " ".join(f"{p}: {s['frames'] / a.clips:.0f} frames/clip {1e3 * s['seconds'] / max(s['frames'], 1):.2f} "
                        f"ms/frame" for p, s in totals.items() if s.get("jobs"))
        print(f"{a.program} {os.path.basename(path)} {a.device}{' no-share' if a.no_share else ''}: "
              f"{1e3 * dt / a.clips:.1f} ms/clip ({a.clips / dt:.2f} clips/s), ok {ok}/{of}; {work}", flush=True)


if __name__ == "__main__":
    main()
