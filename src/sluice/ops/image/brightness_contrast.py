"""``fn.brightness_contrast``, ``fn.brightness`` and ``fn.contrast``: pointwise intensity changes.

The formula is DALI's::

    out = brightness_shift * max_out + brightness * (contrast_center + contrast * (in - contrast_center))

where ``max_out`` is 1 for float outputs and the largest value of an integer output type, and ``contrast_center``
defaults to half the input type's positive range (128 for uint8, 0.5 for floats). Math is float32; integer outputs
are rounded to nearest and clamped (DALI's saturating conversion).
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import types
from sluice.ops.image._color_affine import affine_channels, opencv, triton_available
from sluice.ops.tensor._util import (arg_tensor, as_float_list, convert_saturate, half_range, has_per_frame,
                                     map_batch, to_batch, with_frames)
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, OpSchema

__all__ = ["brightness_contrast_kernel"]


def brightness_contrast_kernel(x: torch.Tensor, brightness: torch.Tensor, brightness_shift: torch.Tensor,
                               contrast: torch.Tensor, contrast_center: torch.Tensor | None,
                               out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Apply the brightness/contrast formula to a stack of samples ``x`` (N x ...), with per-sample parameters of
    shape (N,). ``contrast_center=None`` uses the input type's mid-grey. Works on any device.

    Example::

        y = brightness_contrast_kernel(imgs, torch.tensor([1.2]), torch.tensor([0.0]), torch.tensor([0.8]), None)
    """
    out_dtype = out_dtype or x.dtype
    shape = (-1,) + (1,) * (x.dim() - 1)
    if contrast_center is None:
        contrast_center = torch.full_like(brightness, half_range(x.dtype))
    b, s, c, cc = (t.to(x.device, torch.float32).reshape(shape)
                   for t in (brightness, brightness_shift, contrast, contrast_center))
    xf = x.to(torch.float32)
    out = s * types.max_value(out_dtype) + b * (cc + c * (xf - cc))
    return convert_saturate(out, out_dtype)


def _out_dtype(dtype, x: torch.Tensor) -> torch.dtype:
    return x.dtype if dtype is None or dtype == types.NO_TYPE else types.to_torch_dtype(dtype)


def _run_batch(images, brightness, brightness_shift, contrast, contrast_center, dtype):
    """Shared batch path. On CUDA with Triton: the formula folded into ``scale * in + offset`` per sample, one
    launch for a dense batch. Otherwise (and on the CPU) one torch call per group of equally shaped samples.
    Sequences with per-frame values run frame by frame. Returns a dense N x ... tensor or a list of samples."""
    args = dict(brightness=brightness, brightness_shift=brightness_shift, contrast=contrast,
                contrast_center=contrast_center)
    return with_frames(lambda b, a: _run_samples(b, a["brightness"], a["brightness_shift"], a["contrast"],
                                                 a["contrast_center"], dtype), images, args)


def _run_samples(images, brightness, brightness_shift, contrast, contrast_center, dtype):
    dense = images.dense  # a dense batch is never cut into its samples (64 views a batch, each freed again)
    n = len(images)
    if not n:
        return []
    first = dense if dense is not None else images.samples[0]  # the samples' device and type
    dev = first.device
    b = arg_tensor(brightness if brightness is not None else [1.0] * n, dev)
    s = arg_tensor(brightness_shift if brightness_shift is not None else [0.0] * n, dev)
    c = arg_tensor(contrast if contrast is not None else [1.0] * n, dev)
    cc = None
    if contrast_center is not None and all(v is not None for v in contrast_center):
        cc = arg_tensor(contrast_center, dev)
    out_dtype = _out_dtype(dtype, first)
    if triton_available(first):
        center = cc if cc is not None else torch.full_like(b, half_range(first.dtype))
        offset = s * types.max_value(out_dtype) + b * center * (1 - c)
        return affine_channels(images.samples if dense is None or not dense.is_contiguous() else [],
                               (b * c).reshape(n, 1, 1), offset.reshape(n, 1), out_dtype, 1, 1, dense)

    def run(stack, idx):
        ix = torch.tensor(idx, device=dev)
        return brightness_contrast_kernel(stack, b[ix], s[ix], c[ix], None if cc is None else cc[ix],
                                          _out_dtype(dtype, stack))

    return run(dense, list(range(n))) if dense is not None else map_batch(images.samples, run)


# ------------------------------------------------------------------------------------------------------------
# Operators
# ------------------------------------------------------------------------------------------------------------

_BRIGHTNESS = Arg("brightness", float, 1.0, "Brightness multiplier.", per_sample=True)
_SHIFT = Arg("brightness_shift", float, 0.0, "Brightness shift, in units of the output type's full range "
             "(1.0 is 255 for uint8).", per_sample=True)
_CONTRAST = Arg("contrast", float, 1.0, "Contrast multiplier; 0 gives uniform grey.", per_sample=True)
_CENTER = Arg("contrast_center", float, None, "The intensity unaffected by contrast; default: half of the input "
              "type's range (128 for uint8, 0.5 for floats).", per_sample=True)
_DTYPE = Arg("dtype", types.DALIDataType, None, "Output type; None keeps the input type.")
_LAYOUT_DOC = "Input: channel-last images (HWC, FHWC, DHWC) or any tensor; the operation is pointwise."

SCHEMA = OpSchema(
    "brightness_contrast",
    sequences="axis",
    doc=f"""Adjusts the brightness and contrast of images.

    ``out = brightness_shift * max_out + brightness * (contrast_center + contrast * (in - contrast_center))``,
    ``max_out`` being 1 for float outputs and the type's maximum for integer outputs. {_LAYOUT_DOC}
    Example::

        images = fn.brightness_contrast(images, brightness=fn.random.uniform(range=[0.5, 1.5]), contrast=1.2)
    """,
    devices=("cpu", "gpu"),
    args=[_BRIGHTNESS, _SHIFT, _CONTRAST, _CENTER, _DTYPE],
)

BRIGHTNESS_SCHEMA = OpSchema(
    "brightness",
    sequences="axis",
    doc=f"""Adjusts the brightness of images: ``out = brightness_shift * max_out + brightness * in``.

    {_LAYOUT_DOC} Example::

        images = fn.brightness(images, brightness=fn.random.uniform(range=[0.5, 1.5]))
    """,
    devices=("cpu", "gpu"),
    args=[_BRIGHTNESS, _SHIFT, _DTYPE],
)

CONTRAST_SCHEMA = OpSchema(
    "contrast",
    sequences="axis",
    doc=f"""Adjusts the contrast of images: ``out = contrast_center + contrast * (in - contrast_center)``.

    {_LAYOUT_DOC} Example::

        images = fn.contrast(images, contrast=fn.random.uniform(range=[0.5, 1.5]))
    """,
    devices=("cpu", "gpu"),
    args=[_CONTRAST, _CENTER, _DTYPE],
)


def _sample(image, brightness=1.0, brightness_shift=0.0, contrast=1.0, contrast_center=None, dtype=None,
            layout=""):
    out = _run_batch(Batch([image], layout), [brightness], [brightness_shift], [contrast], [contrast_center], dtype)
    return out[0]


def brightness_contrast_gpu(ctx, images, *, args):
    """GPU kernel of brightness_contrast, brightness and contrast: one launch per dense batch."""
    get = {n: args[n] for n in ("brightness", "brightness_shift", "contrast", "contrast_center") if n in args}
    out = _run_batch(images, get.get("brightness"), get.get("brightness_shift"), get.get("contrast"),
                     get.get("contrast_center"), args.const("dtype"))
    return to_batch(out, images.layout())


def brightness_contrast_cpu(ctx, image, **a):
    """CPU kernel of brightness_contrast, brightness and contrast, per sample in the pipeline's threads. uint8
    images go through a 256-entry table made by the same formula (identical values, one lookup per pixel)."""
    params = (a.get("brightness", 1.0), a.get("brightness_shift", 0.0), a.get("contrast", 1.0),
              a.get("contrast_center"), a["dtype"])
    if has_per_frame(dict(zip(("b", "s", "c", "cc"), params[:4]))):
        return _sample(image, *params, layout=ctx.layout)
    if image.dtype == torch.uint8 and image.numel():
        lut = uint8_table(*params)
        src = image.numpy()
        cv2 = opencv()  # OpenCV's LUT is vectorised and releases the GIL
        if cv2 is not None and lut.dtype == np.uint8 and (src.ndim == 2 or (src.ndim == 3 and src.shape[2] <= 4)):
            return torch.from_numpy(cv2.LUT(src, lut).reshape(src.shape))
        return torch.from_numpy(lut[src])
    return _sample(image, *params)


def uint8_table(brightness, brightness_shift, contrast, contrast_center, dtype) -> np.ndarray:
    """The operator's output for each of the 256 uint8 values, in float32 with the kernel's operation order and
    DALI's rounding, so that a lookup gives the same values as ``brightness_contrast_kernel``."""
    out_dtype = _out_dtype(dtype, torch.empty(0, dtype=torch.uint8))
    f = np.float32
    b, s, c = (f(as_float_list(v)[0]) for v in (brightness, brightness_shift, contrast))
    cc = f(128.0) if contrast_center is None or not as_float_list(contrast_center) else \
        f(as_float_list(contrast_center)[0])
    x = np.arange(256, dtype=np.float32)
    out = s * f(types.max_value(out_dtype)) + b * (cc + c * (x - cc))
    return convert_saturate(torch.from_numpy(out), out_dtype).numpy()


for _schema in (SCHEMA, BRIGHTNESS_SCHEMA, CONTRAST_SCHEMA):
    _schema.sample_kernel("cpu")(brightness_contrast_cpu)
    _schema.batch_kernel("gpu")(brightness_contrast_gpu)
