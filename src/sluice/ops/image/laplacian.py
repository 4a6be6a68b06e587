"""``fn.laplacian``: the sum of second derivatives along every spatial axis, as DALI computes it.

Each partial derivative is a separable filter: along its own axis a derivative window of ``window_size`` (``[1, -2,
1]`` convolved with the binomial smoothing window two shorter), along every other axis a binomial smoothing window
(of ``smoothing_size`` when given, else of the partial's own ``window_size``). These are OpenCV's
``getDerivKernels(2, 0, k)`` windows, so with equal sizes on a 2-D image the result is ``cv2.Laplacian(ksize=k)``.
``normalized_kernel`` scales partial ``i`` by ``2 ** -(s_i - n - 2)`` (``s_i`` the sum of its window sizes, ``n``
the number of spatial axes); ``scale`` gives the factors instead. Borders reflect without repeating the edge
(``BORDER_REFLECT_101``), at each sample's own extent. Math is float32; integer outputs round and saturate.

The whole batch, ragged or not, runs as one padded tensor: one gather and one multiply-add per tap and axis
(:func:`sluice.kernels.image2d.conv_axis`), on the CPU and the GPU alike.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sluice import types
from sluice.kernels.image2d import conv_axis
from sluice.ops.image.gaussian_blur import spatial_axes
from sluice.ops.tensor._util import as_float_list, convert_saturate
from sluice.pipeline import ragged
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "smoothing_window", "derivative_window", "laplacian_batch"]

MAX_WINDOW = 23  # DALI's limit: float32 keeps the binomial coefficients exact up to here

SCHEMA = OpSchema(
    "laplacian",
    sequences="frames",
    doc="""Computes the Laplacian: the sum of the second-order partial derivatives along the spatial axes (every
    axis but ``C`` and ``F``).

    Partial derivative ``i`` uses a derivative window of ``window_size`` along axis ``i`` and binomial smoothing
    windows along the others (``smoothing_size``; by default of the same size as the derivative window). Windows
    are odd; derivative windows 3 to 23, smoothing windows 1 (no smoothing) to 23. ``normalized_kernel`` scales
    partial ``i`` by ``2 ** -(s - n - 2)`` (``s``: the sum of its window sizes, ``n``: the number of spatial axes);
    ``scale`` sets the factors instead (one, or one per axis). Borders reflect (101). Example::

        edges = fn.laplacian(images, window_size=5, dtype=types.FLOAT)
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("window_size", "int_list", [3], "Derivative window size: one value, or one per spatial axis "
            "(outermost first). Odd, 3 to 23.", per_sample=True),
        Arg("smoothing_size", "int_list", None, "Smoothing window size: one value, or one per spatial axis. Odd, 1 "
            "to 23; default: the derivative window's size.", per_sample=True),
        Arg("scale", "float_list", [1.0], "Factor of each partial derivative: one value, or one per axis.",
            per_sample=True),
        Arg("normalized_kernel", bool, False, "Scale each partial derivative by 2 ** -(s - n - 2); must be False when "
            "scale is given."),
        Arg("dtype", types.DALIDataType, None, "Output type: the input's (default) or FLOAT."),
    ],
)


def smoothing_window(size: int) -> np.ndarray:
    """The binomial smoothing window of odd ``size`` (``[1, 2, 1]`` for 3, ``[1]`` for 1)."""
    return np.array([math.comb(size - 1, k) for k in range(size)], dtype=np.float64)


def derivative_window(size: int) -> np.ndarray:
    """The second-derivative window of odd ``size`` >= 3: ``[1, -2, 1]`` convolved with the smoothing window of
    ``size - 2`` (``[1, 0, -2, 0, 1]`` for 5), OpenCV's ``getDerivKernels(2, 0, size)``."""
    return np.convolve([1.0, -2.0, 1.0], smoothing_window(size - 2))


def _per_axis(value, naxes: int, name: str, sample: int) -> list:
    values = as_float_list(value)
    if len(values) == 1:
        values = values * naxes
    if len(values) != naxes:
        raise ValueError(f"laplacian: {name} has {len(values)} values for sample {sample}; give 1 or one per spatial "
                         f"axis ({naxes})")
    return values


def _sample_windows(i: int, a: dict, naxes: int, normalize: bool, scale_given: bool):
    """Window sizes ``[partial][axis]`` and the factors of one sample, checked as DALI checks them."""
    deriv = [int(v) for v in _per_axis(a["window_size"], naxes, "window_size", i)]
    for d in deriv:
        if d % 2 == 0 or not 3 <= d <= MAX_WINDOW:
            raise ValueError(f"laplacian: window_size must be an odd integer between 3 and {MAX_WINDOW}, got {d} for "
                             f"sample {i}")
    smooth = None
    if a.get("smoothing_size") is not None:
        smooth = [int(v) for v in _per_axis(a["smoothing_size"], naxes, "smoothing_size", i)]
        for s in smooth:
            if s % 2 == 0 or not 1 <= s <= MAX_WINDOW:
                raise ValueError(f"laplacian: smoothing_size must be an odd integer between 1 and {MAX_WINDOW}, got "
                                 f"{s} for sample {i}")
    sizes = [[deriv[p] if (p == q or smooth is None) else smooth[q] for q in range(naxes)] for p in range(naxes)]
    if normalize:
        if scale_given:
            raise ValueError("laplacian: scale cannot be given when normalized_kernel is True")
        factors = [2.0 ** -(sum(row) - naxes - 2) for row in sizes]
    else:
        factors = _per_axis(a["scale"], naxes, "scale", i)
    return sizes, factors


def laplacian_batch(x: torch.Tensor, extents: torch.Tensor, axes: list[int], sizes: np.ndarray,
                    factors: np.ndarray) -> torch.Tensor:
    """The Laplacian of a float padded batch ``x`` along ``axes`` (batch-tensor axes): ``sizes`` ``(n, P, P)``
    window sizes of partial ``p`` on axis ``q``, ``factors`` ``(n, P)``; ``extents`` ``(n, P)`` each sample's
    length on each axis. Returns float32 of ``x``'s shape."""
    n, naxes = sizes.shape[0], len(axes)
    out = None
    for p in range(naxes):
        y = x
        for q in range(naxes):
            kmax = int(sizes[:, p, q].max())
            table = np.zeros((n, kmax))
            for s in np.unique(sizes[:, p, q]):
                win = derivative_window(int(s)) if p == q else smoothing_window(int(s))
                pad = (kmax - int(s)) // 2
                table[sizes[:, p, q] == s, pad:pad + int(s)] = win
            if p == q:
                table = table * factors[:, p:p + 1]
            if kmax > 1 or p == q:
                y = conv_axis(y, axes[q], torch.from_numpy(table.astype(np.float32)), extents[:, q])
        out = y if out is None else out + y
    return out


def _run(ctx: BatchContext, images: Batch, args: BatchArgs) -> Batch:
    n = len(images)
    if n == 0:
        return images
    layout = ctx.layout_of(images)
    shapes = images.shapes_array()
    ndim = shapes.shape[1]
    axes = spatial_axes(ndim, layout, "laplacian")
    if not 1 <= len(axes) <= 3:
        raise ValueError(f"laplacian: {len(axes)} spatial axes; supported: 1 to 3")
    dtype = args.const("dtype")
    in_dtype = images.dtype
    out_dtype = in_dtype if dtype is None or dtype == types.NO_TYPE else types.to_torch_dtype(dtype)
    if out_dtype not in (in_dtype, torch.float32):
        raise ValueError(f"laplacian: output type must be the input's ({in_dtype}) or FLOAT, got {dtype}")
    normalize = bool(args.const("normalized_kernel"))
    scale_given = not args.is_const("scale") or args.const("scale") != [1.0]
    per = [_sample_windows(i, a, len(axes), normalize, scale_given) for i, a in enumerate(args.samples())]
    sizes = np.array([p[0] for p in per], np.int64)
    factors = np.array([p[1] for p in per], np.float64)
    padded, _ = images.padded(fill=None)
    extents = ragged.shape_table(shapes[:, axes], padded.device)
    y = laplacian_batch(padded.to(torch.float32), extents, [a + 1 for a in axes], sizes, factors)
    return Batch.from_padded(convert_saturate(y, out_dtype), shapes, layout)


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def laplacian(ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch:
    """The batch in one padded tensor: per axis and partial, one gather and one multiply-add per tap."""
    return _run(ctx, images, args)
