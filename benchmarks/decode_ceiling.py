"""How fast the GPU's JPEG decoders and the host's cores decode together: each path alone, then shares of every
batch given to several at once (the hardware engines through nvImageCodec, nvJPEG on the SMs through
nvImageCodec's CUDA decoder, libjpeg-turbo in worker processes). torchvision's batched decode uses the hardware
engines as well (nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE)), so it is a peer, not a second path.

Usage (on the GPU machine, after benchmarks/make_imagenet_like.py)::

    python benchmarks/decode_ceiling.py /tmp/imagenet_like
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_diag import best as rate  # images/s, best of two passes after a warm-up, CUDA synchronised
from decode_images import batches, load, sluice_mixed_pass

_FILES: list[bytes] = []
_OUT: np.ndarray | None = None


def _cpu_decode(span: tuple[int, int]) -> int:
    """In a worker process: decode files[span] with libjpeg-turbo into a reused buffer (as into shared memory)."""
    import simplejpeg

    global _OUT
    if _OUT is None:
        _OUT = np.empty(4096 * 4096 * 3, np.uint8)
    n = 0
    for i in range(*span):
        h, w, _, _ = simplejpeg.decode_jpeg_header(_FILES[i])
        out = _OUT[:h * w * 3].reshape(h, w, 3)
        simplejpeg.decode_jpeg(_FILES[i], colorspace="RGB", fastupsample=False, strict=True, buffer=out)
        n += 1
    return n


def outputs_section(nv, hw, params, nb, stream, row) -> None:
    """nvImageCodec's images into torch: DLPack per image, the CUDA array interface per image, or decoding into
    views of one torch allocation made beforehand (when this nvImageCodec takes output images)."""
    import inspect

    import simplejpeg

    doc = (nv.Decoder.decode.__doc__ or "")[:2500]
    print("CEIL Decoder.decode doc:\n" + doc, flush=True)
    for name in ("as_image", "as_images"):
        print(f"CEIL {name} doc:\n" + (getattr(nv, name, None).__doc__ or "")[:800], flush=True)
    try:
        print("CEIL signature", inspect.signature(nv.Decoder.decode), flush=True)
    except (TypeError, ValueError) as exc:
        print("CEIL no signature", exc, flush=True)
    st = stream.cuda_stream

    def plain():
        for x in nb:
            hw.decode(x, params=params, cuda_stream=st)
    row("outputs: nvImageCodec HW, images dropped", plain)

    def dlpack():
        for x in nb:
            [torch.from_dlpack(i) for i in hw.decode(x, params=params, cuda_stream=st)]
    row("outputs: + torch.from_dlpack per image", dlpack)

    def cai():
        for x in nb:
            [i.__cuda_array_interface__["data"][0] for i in hw.decode(x, params=params, cuda_stream=st)]
    row("outputs: + __cuda_array_interface__ per image", cai)

    shapes = [[simplejpeg.decode_jpeg_header(b.tobytes())[:2] for b in x] for x in nb]
    sizes = [[h * w * 3 for h, w in s] for s in shapes]

    def views_of(k):
        buf = torch.empty(sum(sizes[k]), dtype=torch.uint8, device="cuda")
        return buf, [p.view(h, w, 3) for p, (h, w) in zip(buf.split(sizes[k]), shapes[k])]

    for kw in ("image", "images", "output", "out"):
        try:
            buf, views = views_of(0)
            imgs = nv.as_images(views) if hasattr(nv, "as_images") else [nv.as_image(v) for v in views]
            hw.decode(nb[0], params=params, cuda_stream=st, **{kw: imgs})
            ref = torch.cat([torch.from_dlpack(i).reshape(-1)
                             for i in hw.decode(nb[0], params=params, cuda_stream=st)])
            torch.cuda.synchronize()
            print(f"CEIL decode into views with {kw}=: max |diff| {int((buf.int() - ref.int()).abs().max())}",
                  flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"CEIL decode into views with {kw}=: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue

        def into(kw=kw):
            for k, x in enumerate(nb):
                _, views = views_of(k)
                imgs = nv.as_images(views) if hasattr(nv, "as_images") else [nv.as_image(v) for v in views]
                hw.decode(x, params=params, cuda_stream=st, **{kw: imgs})
        row(f"outputs: decoded into views of one torch allocation ({kw}=)", into)
        break


def sluice_section(bb, row) -> None:
    """The operator as decode_images.py runs it, with the scan check and the second GPU path switched."""
    run, op = sluice_mixed_pass(bb, 16, 0, 0.9)
    run()
    dec = op._decoder
    print(f"CEIL sluice: {dec.backend_name}; shares {dec.shares}; cuda decoder {dec._cuda}", flush=True)
    row("sluice operator (default: check on, hw 0.9)", run)
    dec.validate_scans = False
    row("sluice operator, scan check off", run)
    dec._hw_share = 1.0
    row("sluice operator, scan check off, hw 1.0", run)
    dec.validate_scans = True
    row("sluice operator, scan check on, hw 1.0", run)
    dec._hw_share = 0.0
    row("sluice operator, scan check on, hw 0.0 (torchvision)", run)
    dec.validate_scans = False
    row("sluice operator, scan check off, hw 0.0 (torchvision)", run)
    op.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path)
    ap.add_argument("--count", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--sections", nargs="+", default=["paths", "outputs", "sluice"],
                    help="paths: decoders alone and together; outputs: ways to get nvImageCodec's images into "
                         "torch; sluice: the operator with its checks and split switched")
    a = ap.parse_args()
    global _FILES
    _FILES, _ = load(a.folder, a.count)
    n = len(_FILES)
    starts = list(range(0, n, a.batch))
    bb = batches(_FILES, a.batch)
    nb = [[np.frombuffer(b, np.uint8) for b in x] for x in bb]
    # Worker processes forked before CUDA and nvImageCodec start threads in this one.
    pools = {procs: get_context("fork").Pool(procs) for procs in (8, 12, 16)} if "paths" in a.sections else {}
    dev = torch.device("cuda", 0)
    torch.cuda.init()
    results: dict[str, float] = {}

    def row(name, fn):
        try:
            r = rate(fn, n)
        except Exception as exc:  # noqa: BLE001
            print(f"CEIL {name:64s} FAILED {type(exc).__name__}: {exc}", flush=True)
            return
        results[name] = r
        print(f"CEIL {name:64s} {r:10.0f} img/s", flush=True)

    from nvidia import nvimgcodec as nv
    from torchvision.io import ImageReadMode, decode_jpeg

    tb = [[torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in x] for x in bb]

    def tv():
        for x in tb:
            decode_jpeg(x, mode=ImageReadMode.RGB, device=dev)
    row("torchvision decode_jpeg(list, cuda) [hardware engines]", tv)

    K = nv.BackendKind
    params = nv.DecodeParams(color_spec=nv.ColorSpec.SRGB, allow_any_depth=False, apply_exif_orientation=False)
    default = nv.Decoder(device_id=0)
    hw = nv.Decoder(device_id=0, max_num_cpu_threads=4, backends=[nv.Backend(K.HW_GPU_ONLY)])
    cuda = {}
    for t in (4, 8):  # nvJPEG on the SMs; nvImageCodec 0.9 on CUDA 13 may lack GPU_ONLY: its hybrid then
        for kind in (K.GPU_ONLY, K.HYBRID_CPU_GPU):
            try:
                cuda[t] = nv.Decoder(device_id=0, max_num_cpu_threads=t, backends=[nv.Backend(kind)])
                print(f"CEIL SM decoder with {t} host threads: {kind}", flush=True)
                break
            except RuntimeError as exc:
                print(f"CEIL no {kind} decoder: {exc}", flush=True)
    st_hw = torch.cuda.Stream(dev)
    st_cuda = torch.cuda.Stream(dev)

    if "outputs" in a.sections:
        outputs_section(nv, hw, params, nb, st_hw, row)

    def nv_pass(dec, params_=None, stream=None):
        def f():
            for x in nb:
                dec.decode(x, params=params_ or params, cuda_stream=(stream or st_hw).cuda_stream)
        return f
    if "paths" in a.sections:
        row("nvImageCodec default Decoder.decode(list)", nv_pass(default))
        row("nvImageCodec HW_GPU_ONLY", nv_pass(hw))
        for t, d in cuda.items():
            row(f"nvImageCodec SM decoder, {t} host threads", nv_pass(d, stream=st_cuda))

        threads = ThreadPoolExecutor(4)

        def combo(f_hw: float, f_cuda: float, procs: int, cuda_threads: int = 4, chunk: int = 8):
            pool = pools.get(procs)
            dec_cuda = cuda[cuda_threads]

            def f():
                for s, x in zip(starts, nb):
                    m = len(x)
                    k1 = round(f_hw * m)
                    k2 = k1 + round(f_cuda * m)
                    cpu_job = None
                    if k2 < m:
                        spans = [(s + i, s + min(i + chunk, m)) for i in range(k2, m, chunk)]
                        cpu_job = pool.map_async(_cpu_decode, spans)
                    futs = []
                    if k1:
                        futs.append(threads.submit(hw.decode, x[:k1], params=params, cuda_stream=st_hw.cuda_stream))
                    if k2 > k1:
                        futs.append(threads.submit(dec_cuda.decode, x[k1:k2], params=params,
                                                   cuda_stream=st_cuda.cuda_stream))
                    for fu in futs:
                        fu.result()
                    if cpu_job is not None:
                        cpu_job.get()
            return f

        for procs in (8, 12, 16):
            row(f"libjpeg-turbo in {procs} processes alone", combo(0.0, 0.0, procs))
        for f_hw, f_cuda, procs in [(0.8, 0.2, 0), (0.65, 0.35, 0), (0.5, 0.5, 0),
                                    (0.8, 0.0, 12), (0.75, 0.0, 16), (0.7, 0.0, 16),
                                    (0.7, 0.1, 12), (0.65, 0.15, 12), (0.6, 0.2, 12), (0.6, 0.15, 16)]:
            row(f"hw {f_hw:.2f} + SMs {f_cuda:.2f} + CPU {1 - f_hw - f_cuda:.2f} ({procs} processes)",
                combo(f_hw, f_cuda, procs))
        for p in pools.values():
            p.terminate()

    if "sluice" in a.sections:
        sluice_section(bb, row)
    peer = max(v for k, v in results.items() if k.startswith(("torchvision", "nvImageCodec default")))
    best = max(results.items(), key=lambda kv: kv[1])
    print(f"CEIL best peer {peer:.0f}; best combination {best[0]} {best[1]:.0f} = {best[1] / peer:.2f}x", flush=True)


if __name__ == "__main__":
    main()
