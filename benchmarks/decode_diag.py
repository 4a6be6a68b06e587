"""Diagnostics for the ``mixed`` JPEG decoder: each GPU/CPU decoding primitive alone, whether it releases the GIL,
paths run concurrently on parts of a batch, and sluice's GpuImageDecoder with several settings.

Usage (on the GPU machine, after benchmarks/make_imagenet_like.py)::

    python benchmarks/decode_diag.py /tmp/imagenet_like
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from sluice.pipeline.pool import ThreadPool
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_images import batches, load


class GilMeter:
    """A Python thread counting loop iterations: its rate while ``fn`` runs, relative to idle, tells how much of
    the time ``fn`` holds the GIL (1.0: never holds it)."""

    def __init__(self):
        self.count = 0
        self.stop = False

    def _loop(self):
        while not self.stop:
            self.count += 1

    def measure(self, seconds=0.2, fn=None):
        self.count, self.stop = 0, False
        t = threading.Thread(target=self._loop)
        start = time.perf_counter()
        t.start()
        if fn is None:
            time.sleep(seconds)
        else:
            fn()
        self.stop = True
        t.join()
        return self.count / (time.perf_counter() - start)


def best(fn, n, repeat=2):
    fn()
    torch.cuda.synchronize()
    out = 0.0
    for _ in range(repeat):
        s = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out = max(out, n / (time.perf_counter() - s))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path)
    ap.add_argument("--count", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args()
    files, _ = load(a.folder, a.count)
    n = len(files)
    bb = batches(files, a.batch)
    tb = [[torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in x] for x in bb]
    nb = [[np.frombuffer(b, np.uint8) for b in x] for x in bb]
    dev = torch.device("cuda", 0)
    torch.cuda.init()
    gil = GilMeter()
    idle = gil.measure(0.3)
    results = {}

    def row(name, fn, gil_check=False):
        try:
            r = best(fn, n)
            g = gil.measure(fn=fn) / idle if gil_check else float("nan")
            results[name] = r
            print(f"DIAG {name:60s} {r:10.0f} img/s   GIL-free fraction {g:.2f}", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"DIAG {name:60s} FAILED {type(exc).__name__}: {exc}", flush=True)

    from torchvision.io import ImageReadMode, decode_jpeg

    def tv(parts=tb):
        for x in parts:
            decode_jpeg(x, mode=ImageReadMode.RGB, device=dev)
    row("torchvision decode_jpeg(list, cuda)", tv, gil_check=True)

    def tv_hwc():
        for x in tb:
            [t.permute(1, 2, 0).contiguous() for t in decode_jpeg(x, mode=ImageReadMode.RGB, device=dev)]
    row("torchvision + per-sample HWC contiguous", tv_hwc)

    import simplejpeg
    pool = ThreadPool(16)  # says its threads, by which sluice's kernels share their work

    def cpu16():
        for x in bb:
            list(pool.map(lambda b: simplejpeg.decode_jpeg(b, colorspace="RGB", fastupsample=False, strict=True), x))
    row("simplejpeg, 16 threads (pool.map)", cpu16)

    def cpu16_chunks():
        for x in bb:
            chunks = [x[i::16] for i in range(16)]
            list(pool.map(lambda c: [simplejpeg.decode_jpeg(b, colorspace="RGB") for b in c], chunks))
    row("simplejpeg, 16 threads (16 chunks)", cpu16_chunks)

    from sluice.backends.image import cpu as scpu
    s = time.perf_counter()
    for x in tb:
        for t in x:
            scpu.probe(t.numpy())
    print(f"DIAG sluice probe per sample {1e6 * (time.perf_counter() - s) / n:.1f} us", flush=True)
    sluice_rows(tb, pool, row)

    try:
        from nvidia import nvimgcodec as nv
    except ImportError as exc:
        print("DIAG no nvimgcodec", exc)
        nv = None
    if nv is not None:
        K = nv.BackendKind
        decs = {}
        for name, kw in [("default", {}), ("HW_GPU_ONLY", dict(backends=[nv.Backend(K.HW_GPU_ONLY)])),
                         ("HW_GPU_ONLY+GPU_ONLY", dict(backends=[nv.Backend(K.HW_GPU_ONLY, load_hint=1.0),
                                                                 nv.Backend(K.GPU_ONLY)])),
                         ("GPU_ONLY", dict(backends=[nv.Backend(K.GPU_ONLY)])),
                         ("GPU_ONLY 4 threads", dict(max_num_cpu_threads=4, backends=[nv.Backend(K.GPU_ONLY)])),
                         ("HYBRID_CPU_GPU", dict(backends=[nv.Backend(K.HYBRID_CPU_GPU)]))]:
            t0 = time.perf_counter()
            try:
                decs[name] = nv.Decoder(device_id=0, **kw)
            except Exception as exc:  # noqa: BLE001
                print(f"DIAG nvImageCodec {name}: cannot create ({exc})", flush=True)
            print(f"DIAG   creating {name}: {time.perf_counter() - t0:.2f} s", flush=True)
        params = nv.DecodeParams(color_spec=nv.ColorSpec.SRGB, allow_any_depth=False, apply_exif_orientation=False)
        for name, d in decs.items():
            def f(d=d):
                for x in bb:
                    d.decode(x, params=params)
            row(f"nvImageCodec {name} (bytes)", f)
        hw = decs.get("HW_GPU_ONLY")
        if hw is None:
            return
        st = torch.cuda.current_stream(dev).cuda_stream

        def hw_np_dlpack():
            for x in nb:
                imgs = hw.decode(x, params=params, cuda_stream=st)
                [torch.from_dlpack(i) for i in imgs]
        row("nvImageCodec HW_GPU_ONLY (numpy in, from_dlpack out)", hw_np_dlpack, gil_check=True)

        def hw_cs():
            for x in nb:
                hw.decode([nv.CodeStream(b) for b in x], params=params, cuda_stream=st)
        row("nvImageCodec HW_GPU_ONLY (CodeStream in)", hw_cs)

        # Paths concurrently on parts of each batch.
        gthreads = ThreadPoolExecutor(4)
        streams = [torch.cuda.Stream(dev) for _ in range(3)]
        gpu = decs.get("GPU_ONLY") or decs.get("HYBRID_CPU_GPU")

        def combo(f_hw, f_cuda, cuda_dec, same_stream, cpu_mode="chunks"):
            def run():
                for x, xn, xt in zip(bb, nb, tb):
                    m = len(x)
                    k1 = int(round(f_hw * m))
                    k2 = k1 + int(round(f_cuda * m))
                    s0 = st if same_stream else streams[0].cuda_stream
                    s1 = st if same_stream else streams[1].cuda_stream
                    futs = []
                    if k1:
                        futs.append(gthreads.submit(hw.decode, x[:k1], params=params, cuda_stream=s0))
                    if k2 > k1:
                        if cuda_dec == "tv":
                            futs.append(gthreads.submit(decode_jpeg, xt[k1:k2], mode=ImageReadMode.RGB, device=dev))
                        else:
                            futs.append(gthreads.submit(gpu.decode, x[k1:k2], params=params, cuda_stream=s1))
                    rest = x[k2:]
                    if rest:
                        chunks = [rest[i::16] for i in range(min(16, len(rest)))]
                        list(pool.map(lambda c: [simplejpeg.decode_jpeg(b, colorspace="RGB") for b in c], chunks))
                    for fu in futs:
                        fu.result()
                    if not same_stream:
                        for s_ in streams[:2]:
                            s_.synchronize()
            return run
        for f_hw, f_cuda, cd, same in [(1.0, 0, "nv", True), (0.7, 0.3, "tv", True), (0.5, 0.5, "tv", True),
                                       (0.3, 0.7, "tv", True), (0.5, 0.4, "tv", True), (0.0, 0.9, "tv", True)]:
            if cd == "nv" and gpu is None:
                continue
            row(f"concurrent hw {f_hw:.2f} + {cd} cuda {f_cuda:.2f} + cpu {1 - f_hw - f_cuda:.2f} "
                f"{'one stream' if same else 'own streams'}", combo(f_hw, f_cuda, cd, same))

    reader_rows(a.folder, row)


def reader_rows(folder, row):
    """What the pipeline costs around the decoder: fn.readers.file alone, batch 256, 16 threads."""
    from sluice import fn, pipeline_def

    @pipeline_def(batch_size=256, num_threads=16, device_id=0, seed=0)
    def pipe():
        files, labels = fn.readers.file(file_root=str(folder))
        return files, labels

    p = pipe()
    p.build()

    def run():
        for _ in range(16):
            p.run()
    n0 = 16 * 256
    s = time.perf_counter()
    run()
    print(f"DIAG fn.readers.file alone (batch 256, first pass) {n0 / (time.perf_counter() - s):10.0f} files/s",
          flush=True)
    s = time.perf_counter()
    run()
    print(f"DIAG fn.readers.file alone (batch 256)             {n0 / (time.perf_counter() - s):10.0f} files/s",
          flush=True)


def sluice_rows(tb, pool, row):
    """sluice's GpuImageDecoder with several settings (probes made beforehand, as the operator does)."""
    from sluice.backends.image import cpu as scpu
    from sluice.backends.image.gpu import GpuImageDecoder
    from sluice.backends.image.scheduler import ShareTuner
    infos = [[scpu.probe(t.numpy()) for t in x] for x in tb]
    t0 = time.perf_counter()
    d = GpuImageDecoder(0, num_cpu_threads=16, cpu_load=0.0, adaptive=False)
    print(f"DIAG sluice decoder: {d.backend_name}, created in {time.perf_counter() - t0:.2f} s", flush=True)
    for kw in [dict(cpu_load=0.0, adaptive=False, hw_decoder_load=0.0),
               dict(cpu_load=0.0, adaptive=False, hw_decoder_load=1.0),
               dict(cpu_load=0.0, adaptive=False, hw_decoder_load=0.8),
               dict(cpu_load=0.0, adaptive=False, hw_decoder_load=0.6),
               dict(cpu_load=0.0, adaptive=False, hw_decoder_load=0.45),
               dict(cpu_load=0.0, adaptive=False, hw_decoder_load=0.3),
               dict(cpu_load=0.1, adaptive=False, hw_decoder_load=0.5),
               dict(cpu_load=0.1, adaptive=False, hw_decoder_load=0.0),
               dict(), dict(hw_decoder_load=0.5)]:
        # One decoder (creating nvImageCodec decoders takes time); each setting set on it.
        d.cpu_tuner = ShareTuner(kw.get("cpu_load", 0.0), hi=0.3) if kw.get("adaptive", True) else None
        d.hw_tuner = ShareTuner(kw.get("hw_decoder_load", 0.9), step=0.2, min_step=0.05) if kw.get("adaptive", True) and d._hw else None
        d._tuners = [t for t in (d.cpu_tuner, d.hw_tuner) if t is not None]
        d._cpu_share = kw.get("cpu_load", 0.0)
        d._hw_share = kw.get("hw_decoder_load", 0.9) if d._hw is not None else 0.0
        def sl(d=d):
            for x, inf in zip(tb, infos):
                d.decode([t.numpy() for t in x], infos=inf, thread_pool=pool)
        row(f"sluice GpuImageDecoder {d.backend_name[:14]} {kw}", sl, gil_check=False)
        print(f"DIAG   split {d.last_split} shares {d.shares} {d.stats}", flush=True)
    d.close()


if __name__ == "__main__":
    main()
