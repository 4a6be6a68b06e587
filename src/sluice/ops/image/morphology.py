"""``fn.experimental.dilate``, ``fn.experimental.erode`` and ``fn.experimental.median_blur``: rectangular-window
maximum, minimum and median of images, OpenCV's ``dilate`` / ``erode`` (rectangular structuring element) and
``medianBlur``, as DALI's operators (CV-CUDA kernels checked against OpenCV) compute them.

Sizes follow OpenCV's order: ``mask_size`` and ``window_size`` are ``(width, height)``, ``anchor`` is ``(x, y)``
(``-1``: the centre). ``iterations`` grows the window by ``(width - 1, height - 1)`` per extra pass, which is what
repeating a rectangular dilation or erosion does. Outside the image, ``border_mode`` (``constant`` ignores the
outside, OpenCV's default border value for morphology); the median repeats the edge, as ``medianBlur`` does.

The CPU kernels call OpenCV per sample (GIL released); the GPU kernels run the whole padded batch in torch, one
masked gather per tap (:func:`sluice.kernels.image2d.window_reduce`, :func:`~sluice.kernels.image2d.window_median`),
with each sample's window and its own edges.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.kernels.image2d import check_border, window_median, window_reduce
from sluice.ops.image._padded import channels_first, extents_on, from_channels_first, image_layout
from sluice.ops.tensor._util import as_float_list
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["DILATE", "ERODE", "MEDIAN_BLUR"]

_LAYOUTS = ("HWC", "CHW", "HW")
_TYPES = (torch.uint8, torch.int16, torch.uint16, torch.int32, torch.float32)

_MORPH_ARGS = [
    Arg("mask_size", "int_list", [3, 3], "Size of the rectangular structuring element, (width, height).",
        per_sample=True, min=1),
    Arg("anchor", "int_list", [-1, -1], "Anchor (x, y) within the element; -1 is its centre.", per_sample=True),
    Arg("iterations", int, 1, "How many times to apply the operation; each extra pass grows the element by "
        "(width - 1, height - 1).", min=1),
    Arg("border_mode", str, "constant", "Outside the image: 'constant' (ignored), 'replicate', 'reflect', "
        "'reflect_101' or 'wrap'.", choices=("constant", "replicate", "reflect", "reflect_101", "wrap")),
]


def _schema(name: str, what: str, cv_name: str) -> OpSchema:
    return OpSchema(
        f"experimental.{name}",
        sequences="frames",
        doc=f"""{what} of images over a rectangular window (OpenCV's ``{cv_name}`` with a rectangular structuring
        element): each pixel becomes the {'largest' if name == 'dilate' else 'smallest'} value of the
        ``mask_size`` = (width, height) window placed at ``anchor``. Layouts HWC, CHW, HW and their sequences.

        Example::

            out = fn.experimental.{name}(images, mask_size=[5, 3], border_mode="reflect_101")
        """,
        devices=("cpu", "gpu"),
        requires={"cpu": ("cv2",)},
        args=_MORPH_ARGS,
    )


DILATE = _schema("dilate", "Dilation", "dilate")
ERODE = _schema("erode", "Erosion", "erode")

MEDIAN_BLUR = OpSchema(
    "experimental.median_blur",
    sequences="frames",
    doc="""Median blur: each pixel becomes the median of the ``window_size`` = (width, height) window centred on it
    (odd sizes), the image's edge repeated outside (OpenCV's ``medianBlur``). Layouts HWC, CHW, HW and their
    sequences.

    Example::

        out = fn.experimental.median_blur(images, window_size=5)
    """,
    devices=("cpu", "gpu"),
    requires={"cpu": ("cv2",)},
    args=[Arg("window_size", "int_list", [3, 3], "Window (width, height): one value or two; odd.", per_sample=True,
              min=1)],
)


def _pair(value, name: str, op: str, sample: int) -> tuple[int, int]:
    vals = [int(v) for v in as_float_list(value)]
    if len(vals) == 1:
        vals = vals * 2
    if len(vals) != 2:
        raise ValueError(f"{op}: {name} takes 1 or 2 values (width, height), got {vals} for sample {sample}")
    return vals[0], vals[1]


def _morph_params(args_of, n: int, op: str, iterations: int) -> tuple[np.ndarray, np.ndarray]:
    """Per sample: the effective window (h, w) after ``iterations`` and its anchor (y, x)."""
    sizes = np.zeros((n, 2), np.int64)
    anchors = np.zeros((n, 2), np.int64)
    for i in range(n):
        a = args_of(i)
        w, h = _pair(a["mask_size"], "mask_size", op, i)
        ax, ay = _pair(a["anchor"], "anchor", op, i)
        ax = w // 2 if ax < 0 else ax
        ay = h // 2 if ay < 0 else ay
        if ax >= w or ay >= h:
            raise ValueError(f"{op}: anchor ({ax}, {ay}) lies outside the {w} x {h} element (sample {i})")
        k = iterations
        sizes[i] = (h + (k - 1) * (h - 1), w + (k - 1) * (w - 1))
        anchors[i] = (ay * k, ax * k)
    return sizes, anchors


def _median_sizes(args_of, n: int) -> np.ndarray:
    sizes = np.zeros((n, 2), np.int64)
    for i in range(n):
        w, h = _pair(args_of(i)["window_size"], "window_size", "experimental.median_blur", i)
        if w % 2 == 0 or h % 2 == 0:
            raise ValueError(f"experimental.median_blur: window_size must be odd, got ({w}, {h}) for sample {i}")
        sizes[i] = (h, w)
    return sizes


def _check_type(dtype: torch.dtype, op: str) -> None:
    if dtype not in _TYPES:
        raise ValueError(f"{op}: unsupported type {dtype}; supported: uint8, int16, uint16, int32, float32")


def _prepare(ctx: BatchContext, images: Batch, op: str) -> tuple[torch.Tensor, np.ndarray, str]:
    layout = ctx.layout_of(images)
    x, hw, layout = channels_first(images, layout, op, fill=None, supported=_LAYOUTS)
    _check_type(x.dtype, op)
    return _working(x), hw, layout


def _working(x: torch.Tensor) -> torch.Tensor:
    """uint16 data as int32 (torch gathers and sorts no uint16); the values, and so the results, are unchanged."""
    return x.to(torch.int32) if x.dtype == torch.uint16 else x


def _back(y: torch.Tensor, hw: np.ndarray, layout: str, dtype: torch.dtype) -> Batch:
    return from_channels_first(y if y.dtype == dtype else y.to(dtype), hw, layout)


def _gpu_morph(op: str, reduce: str):
    def kernel(ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch:
        if not len(images):
            return images
        x, hw, layout = _prepare(ctx, images, op)
        sizes, anchors = _morph_params(args.sample, len(images), op, args.const("iterations"))
        mode = check_border(args.const("border_mode"), op)
        y = window_reduce(x, (2, 3), extents_on(hw, x.device), torch.from_numpy(sizes), torch.from_numpy(anchors),
                          reduce, mode)
        return _back(y, hw, layout, images.dtype)

    kernel.__name__ = f"{op.split('.')[-1]}_gpu"
    kernel.__doc__ = "The whole padded batch: one masked gather per tap along each axis."
    return kernel


def _cpu_morph(op: str):
    def kernel(ctx, image: torch.Tensor, *, mask_size, anchor, iterations, border_mode, **_) -> torch.Tensor:
        import cv2

        layout = image_layout(ctx.layout, image.dim(), op, _LAYOUTS)
        _check_type(image.dtype, op)
        sizes, anchors = _morph_params(lambda _: {"mask_size": mask_size, "anchor": anchor}, 1, op, 1)
        (h, w), (ay, ax) = sizes[0], anchors[0]
        element = np.ones((int(h), int(w)), np.uint8)
        border = {"constant": cv2.BORDER_CONSTANT, "replicate": cv2.BORDER_REPLICATE, "reflect": cv2.BORDER_REFLECT,
                  "reflect_101": cv2.BORDER_REFLECT_101, "wrap": cv2.BORDER_WRAP}[check_border(border_mode, op)]
        fn = cv2.dilate if op.endswith("dilate") else cv2.erode
        src = image.numpy()
        planes = [src] if layout != "CHW" else list(src)
        out = [fn(np.ascontiguousarray(p), element, anchor=(int(ax), int(ay)), iterations=int(iterations),
                  borderType=border).reshape(p.shape) for p in planes]
        return torch.from_numpy(out[0] if layout != "CHW" else np.stack(out))

    kernel.__name__ = f"{op.split('.')[-1]}_cpu"
    kernel.__doc__ = "One sample with OpenCV (GIL released)."
    return kernel


for _schema_, _reduce in ((DILATE, "max"), (ERODE, "min")):
    _schema_.sample_kernel("cpu")(_cpu_morph(_schema_.name))
    _schema_.batch_kernel("gpu")(_gpu_morph(_schema_.name, _reduce))


@MEDIAN_BLUR.sample_kernel("cpu")
def median_blur_cpu(ctx, image: torch.Tensor, *, window_size, **_) -> torch.Tensor:
    """One sample with OpenCV's ``medianBlur`` where it applies (square windows; 3 and 5 for 16-bit and float,
    any for uint8); otherwise the torch kernel on the sample."""
    import cv2

    op = "experimental.median_blur"
    layout = image_layout(ctx.layout, image.dim(), op, _LAYOUTS)
    _check_type(image.dtype, op)
    h, w = _median_sizes(lambda _: {"window_size": window_size}, 1)[0]
    cv_ok = h == w and (image.dtype == torch.uint8 or (h <= 5 and image.dtype in (torch.uint16, torch.float32)))
    channels = image.shape[2] if layout == "HWC" else 1
    if not cv_ok or channels > 4:
        return _median_batch(Batch([image], layout), layout, np.array([[h, w]])).samples[0]
    src = image.numpy()
    planes = [src] if layout != "CHW" else list(src)
    out = [cv2.medianBlur(np.ascontiguousarray(p), int(w)).reshape(p.shape) for p in planes]
    return torch.from_numpy(out[0] if layout != "CHW" else np.stack(out))


def _median_batch(images: Batch, layout: str, sizes: np.ndarray) -> Batch:
    x, hw, layout = channels_first(images, layout, "experimental.median_blur", fill=None, supported=_LAYOUTS)
    y = window_median(_working(x), (2, 3), extents_on(hw, x.device), torch.from_numpy(sizes))
    return _back(y, hw, layout, x.dtype)


@MEDIAN_BLUR.batch_kernel("gpu")
def median_blur_gpu(ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch:
    """The whole padded batch: every tap of the largest window gathered, sorted once."""
    if not len(images):
        return images
    layout = ctx.layout_of(images)
    _check_type(images.dtype, "experimental.median_blur")
    return _median_batch(images, layout, _median_sizes(args.sample, len(images)))
