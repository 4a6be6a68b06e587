"""The Triton resample kernels against the torch reference path (sluice.kernels.resample), all filters, ragged
sizes, flipped regions, normalisation, mirror and CHW output.

On a GPU this runs the compiled kernels (cuda mark); without one, it runs them in Triton's interpreter
(``TRITON_INTERPRET=1``, in a subprocess because the variable must be set before Triton is imported) when Triton
is installed. Tolerance: 1 grey level on uint8 (float rounding at .5), 1e-3 on float32.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

CHECK = textwrap.dedent("""
    import numpy as np, torch
    from sluice.kernels import _triton_resample
    from sluice.kernels.batched import resample_batch, _triton_batch, _TRITON_STATE
    _TRITON_STATE["module"] = _triton_resample
    dev = "{device}"
    rng = np.random.default_rng(0)
    imgs = [torch.from_numpy((rng.random((h, w, 3)) * 255).astype(np.uint8)).to(dev)
            for h, w in [(23, 31), (17, 12), (9, 40)]]
    rois = np.array([[2, 3, 20, 29], [0, 0, 17, 12], [8.5, 39, 0.5, 1]], dtype=np.float64)
    outs = np.array([[10, 7], [30, 20], [5, 13]])
    norm = np.stack([np.array([[10, 0.5, 1], [20, 0.25, -1], [30, 2, 0], [0, 0, 7]], np.float32)] * 3)
    worst = 0.0
    for fmin, fmag in [("linear", "linear"), ("cubic", "lanczos3"), ("nn", "nn"), ("triangular", "linear"),
                       ("gaussian", "cubic")]:
        for aa in (True, False):
            for kw in [dict(dtype=torch.uint8), dict(dtype=torch.float32, norm=norm, mirror=[1, 0, 1],
                                                     output_layout="CHW")]:
                ref = resample_batch([i.cpu() for i in imgs], rois, outs, fmin, fmag, aa, **kw)
                got = _triton_batch(imgs, rois, outs, fmin, fmag, aa, kw["dtype"],
                                    np.asarray(kw.get("mirror", [0, 0, 0]), bool), kw.get("norm"),
                                    kw.get("output_layout", "HWC"), False, 3)
                for r, g in zip(ref, got):
                    assert r.shape == g.shape, (r.shape, g.shape)
                    d = (r.float() - g.cpu().float()).abs().max().item()
                    tol = 1.0 if kw["dtype"] == torch.uint8 else 1e-3
                    assert d <= tol, (fmin, fmag, aa, kw["dtype"], d)
                    worst = max(worst, d)
    print("OK", worst)
""")


def _have_triton() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


@pytest.mark.skipif(not _have_triton(), reason="Triton is not installed")
@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the compiled kernels are tested instead")
@pytest.mark.slow
def test_triton_kernels_in_interpreter_match_torch_path():
    env = dict(os.environ, TRITON_INTERPRET="1")
    src = os.path.join(os.path.dirname(__file__), "..", "..", "..", "src")
    env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(src), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", CHECK.format(device="cpu")], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]


@pytest.mark.cuda
def test_triton_kernels_on_gpu_match_torch_path():
    exec(compile(CHECK.format(device="cuda"), "<triton-check>", "exec"), {})


@pytest.mark.cuda
def test_dense_fp16_chw_batch_shape_and_values():
    from sluice.kernels.batched import resample_batch

    imgs = [torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, device="cuda") for h, w in [(300, 400), (500, 375)]]
    rois = np.array([[0, 0, 300, 400], [10, 20, 410, 320]], dtype=np.float64)
    outs = np.array([[224, 224], [224, 224]])
    out = resample_batch(imgs, rois, outs, "linear", "linear", dtype=torch.float16, output_layout="CHW", dense=True)
    assert out.shape == (2, 3, 224, 224) and out.dtype == torch.float16 and out.is_cuda
    ref = resample_batch([i.cpu() for i in imgs], rois, outs, "linear", "linear", dtype=torch.float32,
                         output_layout="CHW", dense=True)
    assert (out.float().cpu() - ref).abs().max() < 0.13  # fp16 spacing at 255 is 0.125
