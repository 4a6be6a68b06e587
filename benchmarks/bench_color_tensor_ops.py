"""GPU throughput of the colour, generic-tensor and detection-adjacent operators beside torchvision's functional
transforms (the peer that runs on the same tensors; DALI is not a dependency).

Each workload runs the operator's GPU batch kernel on a dense batch of uint8 HWC images already on the GPU
(torchvision gets the same batch as NCHW), so the figures compare kernels, not decoding. Per-sample parameters
vary in sluice's runs (as with ``fn.random.uniform``); torchvision's functional API takes one value per call.

Usage (on a GPU machine; ``--device cpu`` compares the per-sample CPU kernels with OpenCV and Pillow instead)::

    python benchmarks/bench_color_tensor_ops.py --batch 256 --size 224 --iters 50
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, timed  # noqa: E402

from sluice import types  # noqa: E402
from sluice.ops.image import brightness_contrast, color_space_conversion, gaussian_blur, hsv  # noqa: E402
from sluice.ops.tensor.normalize import normalize_samples  # noqa: E402
from sluice.pipeline.batch import Batch  # noqa: E402


def _rate(fn, n_images: int, iters: int) -> float:
    fn()  # warm-up (Triton compilation, cuDNN autotuning)
    with timed() as t:
        for _ in range(iters):
            fn()
    return n_images * iters / t["seconds"]


def cpu_main(n: int, s: int, iters: int) -> None:
    """Per-sample CPU kernels (one thread) beside OpenCV and Pillow doing the same on the same images."""
    import cv2
    import numpy as np
    from PIL import Image, ImageEnhance

    from sluice.schema import SampleContext, get_schema

    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (s, s, 3), dtype=np.uint8) for _ in range(n)]
    timgs = [torch.from_numpy(x) for x in imgs]
    ctx = SampleContext("bench", 0, "", "HWC")

    def run(op, **kw):
        schema = get_schema(op)
        args, _ = schema.validate(kw, lambda v: False)
        kernel = schema.kernels["cpu"].kernel
        return lambda: [kernel(ctx, x, **args) for x in timgs]

    unit = "images/s"
    pil = [Image.fromarray(x) for x in imgs]
    report("cpu brightness uint8", unit, _rate(run("brightness", brightness=1.3), n, iters),
           {"Pillow ImageEnhance": _rate(lambda: [ImageEnhance.Brightness(p).enhance(1.3) for p in pil], n, iters),
            "OpenCV convertScaleAbs": _rate(lambda: [cv2.convertScaleAbs(x, alpha=1.3) for x in imgs], n, iters)})
    report("cpu saturation uint8", unit, _rate(run("saturation", saturation=1.5), n, iters),
           {"Pillow ImageEnhance": _rate(lambda: [ImageEnhance.Color(p).enhance(1.5) for p in pil], n, iters)})
    report("cpu RGB->GRAY uint8", unit,
           _rate(run("color_space_conversion", image_type=types.RGB, output_type=types.GRAY), n, iters),
           {"OpenCV cvtColor": _rate(lambda: [cv2.cvtColor(x, cv2.COLOR_RGB2GRAY) for x in imgs], n, iters)})
    report("cpu gaussian_blur uint8 sigma 1.5", unit, _rate(run("gaussian_blur", sigma=1.5), n, iters),
           {"OpenCV GaussianBlur": _rate(lambda: [cv2.GaussianBlur(x, (11, 11), 1.5) for x in imgs], n, iters)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    a = ap.parse_args()
    if a.device == "cpu":
        torch.set_num_threads(1)
        cpu_main(a.batch, a.size, a.iters)
        return
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU (or --device cpu)")
    try:
        import torchvision.transforms.v2.functional as tvf
    except ImportError:
        tvf = None
    n, s = a.batch, a.size
    gen = torch.Generator(device="cuda").manual_seed(0)
    hwc = torch.randint(0, 256, (n, s, s, 3), dtype=torch.uint8, device="cuda", generator=gen)
    nchw = hwc.permute(0, 3, 1, 2).contiguous()
    batch = Batch.from_dense(hwc, "HWC")
    rnd = torch.rand(n).tolist()
    unit = "images/s"

    def peers(fn):
        return {"torchvision.v2": _rate(fn, n, a.iters)} if tvf is not None else {}

    bright = [0.5 + v for v in rnd]
    report("brightness_contrast uint8", unit,
           _rate(lambda: brightness_contrast._run_batch(batch, bright, [0.0] * n, [1.2] * n, [None] * n, None), n,
                 a.iters),
           peers(lambda: tvf.adjust_contrast(tvf.adjust_brightness(nchw, 1.3), 1.2)))
    hues = [60 * v - 30 for v in rnd]
    report("hsv uint8 (hue, saturation)", unit,
           _rate(lambda: hsv._run_batch(batch, hue=hues, saturation=[1.2] * n), n, a.iters),
           peers(lambda: tvf.adjust_saturation(tvf.adjust_hue(nchw, 0.05), 1.2)))
    report("color_twist uint8", unit,
           _rate(lambda: hsv._run_batch(batch, hue=hues, saturation=[1.2] * n, brightness=bright,
                                        contrast=[0.9] * n), n, a.iters),
           peers(lambda: tvf.adjust_contrast(tvf.adjust_brightness(
               tvf.adjust_saturation(tvf.adjust_hue(nchw, 0.05), 1.2), 1.3), 0.9)))
    report("color_space_conversion RGB->GRAY uint8", unit,
           _rate(lambda: color_space_conversion._run_batch(batch, types.RGB, types.GRAY), n, a.iters),
           peers(lambda: tvf.rgb_to_grayscale(nchw)))
    sig = [[0.5 + 1.5 * v] for v in rnd]
    report("gaussian_blur uint8, per-sample sigma", unit,
           _rate(lambda: gaussian_blur._run_batch(batch, sig, [None] * n), n, a.iters),
           peers(lambda: tvf.gaussian_blur(nchw, [9, 9], [1.25, 1.25])))
    report("gaussian_blur uint8, one sigma", unit,
           _rate(lambda: gaussian_blur._run_batch(batch, [[1.25]] * n, [[9]] * n), n, a.iters),
           peers(lambda: tvf.gaussian_blur(nchw, [9, 9], [1.25, 1.25])))
    report("normalize uint8 -> float32, fixed mean/stddev", unit,
           _rate(lambda: normalize_samples(batch.samples, mean=[120.0] * n, stddev=[60.0] * n, dense=hwc), n,
                 a.iters),
           peers(lambda: tvf.normalize(nchw.float(), [120.0] * 3, [60.0] * 3)))
    report("normalize uint8 -> float32, per-sample per-channel statistics", unit,
           _rate(lambda: normalize_samples(batch.samples, layout="HWC", axes=[0, 1], dense=hwc), n, a.iters), {})


if __name__ == "__main__":
    main()
