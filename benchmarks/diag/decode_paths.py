"""Which batched GPU JPEG decode keeps the engines busiest at the least GIL: torchvision and nvImageCodec's
hardware decoder, from one or two threads, whole images or regions, on the side-by-side data.

    python benchmarks/diag/decode_paths.py /tmp/sbs/images [--count 4096] [--batch 256]

Each row: images/s, and the CPU time of the calling thread per image (host work done in Python's thread).
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import threading
import time

import numpy as np
import torch


def timed(name, fn, n, spinner, alone):
    fn()
    torch.cuda.synchronize()
    best = 0.0
    for _ in range(2):
        c0, t0 = time.thread_time(), time.perf_counter()
        fn()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        best = max(best, n / dt)
        cpu = (time.thread_time() - c0) / n * 1e6
    print(f"PATH {name:60s} {best:9.0f} img/s   calling thread's CPU {cpu:6.1f} us/image", flush=True)


def windows(shapes, rng):
    out = []
    for h, w in shapes:
        area = rng.uniform(0.6, 1.0) * h * w
        r = math.exp(rng.uniform(math.log(0.8), math.log(1.25)))
        cw, ch = min(w, int(round(math.sqrt(area * r)))), min(h, int(round(math.sqrt(area / r))))
        y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
        out.append((int(y), int(x), ch, cw))
    return out


def main():
    import faulthandler, sys
    faulthandler.dump_traceback_later(150, exit=True, file=sys.stderr)
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--count", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.folder, "*", "*.jpg")))[: a.count]
    data = [open(f, "rb").read() for f in files]
    n = len(data)
    bb = [data[i:i + a.batch] for i in range(0, n, a.batch)]
    nb = [[np.frombuffer(b, np.uint8) for b in x] for x in bb]
    tb = [[torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in x] for x in bb]
    import simplejpeg
    shapes = [[simplejpeg.decode_jpeg_header(b)[:2] for b in x] for x in bb]
    rng = np.random.default_rng(0)
    rois = [windows(s, rng) for s in shapes]
    dev = torch.device("cuda", 0)
    torch.cuda.init()
    spinner = alone = None  # a GIL-holding spinner thread slows every torch call ~5 ms (the switch interval)
    print(f"{n} files, batch {a.batch}", flush=True)

    from torchvision.io import ImageReadMode, decode_jpeg

    def tv(parts):
        for x in parts:
            decode_jpeg(x, mode=ImageReadMode.RGB, device=dev)

    def two(fn, parts):
        half = len(parts) // 2
        ts = [threading.Thread(target=fn, args=(parts[:half],)), threading.Thread(target=fn, args=(parts[half:],))]
        [t.start() for t in ts]
        [t.join() for t in ts]

    timed("torchvision decode_jpeg(list), 1 thread", lambda: tv(tb), n, spinner, alone)
    timed("torchvision decode_jpeg(list), 2 threads", lambda: two(tv, tb), n, spinner, alone)

    from nvidia import nvimgcodec as nv
    K = nv.BackendKind
    params = nv.DecodeParams(color_spec=nv.ColorSpec.SRGB, allow_any_depth=False, apply_exif_orientation=False)
    print("nvimgcodec", getattr(nv, "__version__", "?"), flush=True)
    for threads, options in ((2, ':fancy_upsampling=0'), (4, ':fancy_upsampling=0'), (2, '')):
        decs = [nv.Decoder(device_id=0, max_num_cpu_threads=threads, backends=[nv.Backend(K.HW_GPU_ONLY)],
                           options=options) for _ in range(2)]
        streams = [torch.cuda.Stream() for _ in range(2)]

        def nvhw(parts, k=0, conv=True):
            with torch.cuda.stream(streams[k]):
                for x in parts:
                    imgs = decs[k].decode(x, params=params, cuda_stream=streams[k].cuda_stream)
                    if conv:
                        [torch.from_dlpack(i) for i in imgs]

        def nvhw2(parts):
            half = len(parts) // 2
            ts = [threading.Thread(target=nvhw, args=(parts[:half], 0)),
                  threading.Thread(target=nvhw, args=(parts[half:], 1))]
            [t.start() for t in ts]
            [t.join() for t in ts]

        timed(f"nvImageCodec HW {options}, {threads} host threads, 1 thread, no conversion",
              lambda: nvhw(nb, 0, False), n, spinner, alone)
        timed(f"nvImageCodec HW {options}, {threads} host threads, 1 thread, dlpack", lambda: nvhw(nb), n, spinner, alone)
        timed(f"nvImageCodec HW {options}, {threads} host threads, 2 threads, dlpack", lambda: nvhw2(nb), n, spinner, alone)

        def tv_and_hw(k_tv):
            # torchvision's batched decode on the first k_tv of every batch, nvImageCodec's engines on the rest, at
            # the same time from two threads: do they add up (two kinds of decoder) or share the same engines?
            ta = threading.Thread(target=tv, args=([x[:k_tv] for x in tb],))
            tb_ = threading.Thread(target=nvhw, args=([x[k_tv:] for x in nb], 0))
            [t.start() for t in (ta, tb_)]
            [t.join() for t in (ta, tb_)]
        for frac in (0.5, 0.7):
            k_tv = int(a.batch * frac)
            timed(f"torchvision on {frac:.0%} + nvImageCodec HW on the rest, together", lambda: tv_and_hw(k_tv), n,
                  spinner, alone)

        def regions(k_range, k=0):
            out = []
            for j in k_range:
                out.append([nv.CodeStream(x).get_sub_code_stream(
                    region=nv.Region(start_y=r[0], start_x=r[1], end_y=r[0] + r[2], end_x=r[1] + r[3]))
                    for x, r in zip(nb[j], rois[j])])
            return out
        try:
            srcs = regions(range(len(nb)))
            got = decs[0].decode(srcs[0], params=params, cuda_stream=streams[0].cuda_stream)
            ok = [g is not None for g in got]
            sh = [tuple(g.shape[:2]) for g in got if g is not None][:3]
            print(f"ROI on HW: {sum(ok)}/{len(ok)} decoded; shapes {sh} want {[r[2:] for r in rois[0][:3]]}",
                  flush=True)

            def roi_run(parts, k=0):
                with torch.cuda.stream(streams[k]):
                    for x in parts:
                        [torch.from_dlpack(i) for i in decs[k].decode(x, params=params,
                                                                      cuda_stream=streams[k].cuda_stream)]
            timed(f"nvImageCodec HW {options}, {threads} host threads, ROI (sources made ahead), 1 thread",
                  lambda: roi_run(srcs), n, spinner, alone)
            t0 = time.perf_counter()
            regions(range(len(nb)))
            print(f"   making ROI code streams: {1e6 * (time.perf_counter() - t0) / n:.1f} us/image", flush=True)
        except Exception as exc:  # noqa: BLE001
            print("ROI failed", type(exc).__name__, exc, flush=True)
        del decs
    try:
        d = nv.Decoder(device_id=0)
        timed("nvImageCodec default backends, 1 thread",
              lambda: [[torch.from_dlpack(i) for i in d.decode(x, params=params)] for x in nb], n, spinner, alone)
    except Exception as exc:  # noqa: BLE001
        print("default failed", exc)


if __name__ == "__main__":
    main()
