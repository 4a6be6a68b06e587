"""The Triton kernels (the colour kernel behind every colour operator, the blur kernel behind gaussian_blur) equal
the torch path (the CPU path, checked against OpenCV / scikit-image / NumPy elsewhere). Without a GPU they run in
Triton's interpreter (``TRITON_INTERPRET=1``, in a subprocess because the flag is read when kernels are defined);
on a GPU the ``cuda`` test runs the compiled kernels. Tolerance: exact for uint8 except ties at .5 after float32
math in another order (<= 1 level), 1e-5 relative for float outputs."""

import textwrap

import numpy as np
import pytest
import torch

from sluice import types
from sluice.pipeline.batch import Batch

triton = pytest.importorskip("triton")

SCRIPT = textwrap.dedent("""
    import numpy as np, torch
    from sluice import types
    from sluice.pipeline.batch import Batch
    import sluice.ops.image.brightness_contrast as bc
    import sluice.ops.image.hsv as hsv
    import sluice.ops.image.color_space_conversion as csc

    def compare(mod, run):
        torch_out = run()
        mod.triton_available = lambda x: True
        triton_out = run()
        mod.triton_available = lambda x: False
        for a, b in zip(torch_out, triton_out):
            assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
            tol = 1e-5 * max(1.0, a.double().abs().max().item()) if a.dtype.is_floating_point else 1
            assert (a.double() - b.double()).abs().max() <= tol, (a.dtype, (a.double() - b.double()).abs().max())

    rng = np.random.default_rng(0)
    ragged = Batch([torch.from_numpy(rng.integers(0, 256, s, dtype=np.uint8)) for s in ((5, 7, 3), (4, 6, 3))])
    dense = Batch.from_dense(torch.from_numpy(rng.integers(0, 256, (3, 4, 5, 3), dtype=np.uint8)))
    for b in (ragged, dense):
        n = len(b)
        compare(bc, lambda: bc._run_batch(b, [1.3] * n, [0.05] * n, [0.7] * n, [None] * n, None))
        compare(bc, lambda: bc._run_batch(b, [0.5] * n, [0.0] * n, [2.0] * n, [100.0] * n, types.FLOAT))
        compare(hsv, lambda: hsv._run_batch(b, hue=[20.0] * n, saturation=[0.6] * n, value=[1.1] * n))
        compare(hsv, lambda: hsv._run_batch(b, hue=[-10.0] * n, brightness=[1.2] * n, contrast=[0.8] * n,
                                            image_type=types.BGR, dtype=types.FLOAT))
        for src, dst in ((types.RGB, types.GRAY), (types.RGB, types.YCbCr), (types.YCbCr, types.BGR),
                         (types.BGR, types.RGB)):
            compare(csc, lambda: csc._run_batch(b, src, dst))
        compare(csc, lambda: csc._run_batch(b, types.RGB, types.YCbCr, types.FLOAT))
    seqs = Batch.from_dense(torch.from_numpy(rng.integers(0, 256, (2, 3, 4, 5, 3), dtype=np.uint8)), "FHWC")
    compare(bc, lambda: bc._run_batch(seqs, [[0.5, 1.0, 1.5], [2.0]], None, None, None, None))  # per frame
    compare(hsv, lambda: hsv._run_batch(seqs, hue=[[0.0, 30.0, 60.0], [10.0]]))
    gray = Batch([torch.from_numpy(rng.integers(0, 256, (4, 4, 1), dtype=np.uint8))])
    compare(csc, lambda: csc._run_batch(gray, types.GRAY, types.YCbCr))
    compare(csc, lambda: csc._run_batch(gray, types.GRAY, types.RGB))

    import sluice.ops.image._blur_triton as bt
    from sluice.ops.image.gaussian_blur import blur_axes
    params = [[(1.0, 7), (2.0, 13)], [(0.6, 3), (1.5, 19)], [(1.0, 7), (1.0, 7)]]
    for x, axes in ((dense.as_tensor(), [1, 2]), (dense.as_tensor().float(), [1, 2]),
                    (torch.rand(3, 3, 1, 6), [2, 3]), (torch.rand(3, 2, 5, 4, 3), [2, 3])):
        compare(bt, lambda: list(blur_axes(x, axes, params)))
        compare(bt, lambda: list(blur_axes(x, axes, params, torch.float32)))
    print("ok")
""")


def test_triton_kernels_equal_torch_path_in_interpreter(triton_interpreter):
    triton_interpreter(SCRIPT, timeout=300)


@pytest.mark.cuda
def test_compiled_kernel_equals_torch_path():
    from sluice.ops.image._color_affine import affine_channels
    from sluice.ops.image.hsv import apply_color_matrix, color_matrix

    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.integers(0, 256, (4, 33, 47, 3), dtype=np.uint8))
    m = color_matrix(torch.tensor([10.0, -20.0, 90.0, 0.0]), torch.tensor([1.2, 0.5, 1.0, 0.0]), torch.ones(4),
                     torch.tensor([1.0, 1.1, 0.9, 1.0]), torch.tensor([1.0, 0.7, 1.3, 1.0])).float()
    off = torch.tensor([0.0, 38.4, -38.4, 0.0])
    ref = apply_color_matrix(x, m, off)
    out = affine_channels(list(x.cuda()), m.cuda(), off[:, None].expand(4, 3).cuda(), torch.uint8, 3, 3,
                          dense=x.cuda()).cpu()
    assert (ref.int() - out.int()).abs().max() <= 1
    assert (ref != out).float().mean() < 0.01
    b = Batch.from_dense(x.cuda())
    from sluice.ops.image.color_space_conversion import _run_batch
    gray = _run_batch(b, types.RGB, types.GRAY)
    assert gray.shape == (4, 33, 47, 1) and gray.is_cuda

    import sluice.ops.image._blur_triton as bt
    from sluice.ops.image.gaussian_blur import blur_axes
    params = [[(1.0, 7), (2.0, 13)], [(0.6, 3), (1.5, 19)], [(1.0, 7), (1.0, 7)], [(3.0, 19), (0.5, 3)]]
    fused = blur_axes(x.cuda(), [1, 2], params).cpu()
    assert bt.triton_available(x.cuda())
    plain = blur_axes(x, [1, 2], params)  # CPU: the torch path
    assert (fused.int() - plain.int()).abs().max() <= 1
