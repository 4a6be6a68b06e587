"""``fn.hsv``, ``fn.hue``, ``fn.saturation`` and ``fn.color_twist``: colour changes done, as DALI does them, by one
3x3 matrix (plus an offset) per sample in RGB space.

The matrix is built in YIQ space: with ``RGB2YIQ`` / ``YIQ2RGB`` the NTSC conversion matrices (DALI's constants),
``H(hue)`` a rotation of the I/Q plane by ``hue`` degrees, ``S`` a scaling of I and Q by ``saturation`` and ``V``
a scaling of all three by ``value``::

    M = brightness * contrast * YIQ2RGB @ H(hue) @ S(saturation) @ V(value) @ RGB2YIQ
    out = M @ rgb + (half_range - half_range * contrast) * brightness

``half_range`` is 128 for integer inputs and 0.5 for float inputs. ``fn.hsv`` uses only H, S, V; ``fn.color_twist``
uses hue, saturation, brightness and contrast. Integer outputs are rounded to nearest and clamped.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import types
from sluice.ops.image._color_affine import affine_channels, affine_channels_cpu, triton_available
from sluice.ops.tensor._util import (as_float_list, check_channel_last, convert_saturate, has_per_frame,
                                     map_batch, to_batch, with_frames)
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, OpSchema

__all__ = ["color_matrix", "apply_color_matrix", "RGB2YIQ", "YIQ2RGB"]

RGB2YIQ = torch.tensor([[0.299, 0.587, 0.114],
                        [0.596, -0.274, -0.321],
                        [0.211, -0.523, 0.311]], dtype=torch.float64)
YIQ2RGB = torch.tensor([[1.0, 0.956, 0.621],
                        [1.0, -0.272, -0.647],
                        [1.0, -1.107, 1.705]], dtype=torch.float64)
_RGB2YIQ = RGB2YIQ.numpy()
_YIQ2RGB = YIQ2RGB.numpy()


def color_matrix(hue, saturation, value, brightness, contrast, bgr: bool = False) -> torch.Tensor:
    """Per-sample RGB->RGB matrices (N x 3 x 3, float64) for per-sample parameters (each N values: tensors,
    arrays or lists). Built with NumPy: a few 3 x 3 products, cheap enough to run per sample.

    Example::

        m = color_matrix([30.0], [1.0], [1.0], [1.0], [1.0])   # rotate hue by 30 degrees
    """
    hue, saturation, value, brightness, contrast = (
        np.asarray(as_float_list(t), dtype=np.float64) for t in (hue, saturation, value, brightness, contrast))
    n = hue.size
    rad = np.radians(hue)
    h = np.zeros((n, 3, 3))
    h[:, 0, 0] = 1.0
    h[:, 1, 1] = h[:, 2, 2] = np.cos(rad)
    h[:, 1, 2] = np.sin(rad)
    h[:, 2, 1] = -np.sin(rad)
    sat = np.zeros((n, 3, 3))
    sat[:, 0, 0] = 1.0
    sat[:, 1, 1] = sat[:, 2, 2] = saturation
    m = _YIQ2RGB @ h @ sat @ _RGB2YIQ * (value * brightness * contrast).reshape(n, 1, 1)
    if bgr:  # the same map on reversed channels: reverse the rows and the columns
        m = m[:, ::-1, ::-1]
    return torch.from_numpy(np.ascontiguousarray(m))


def apply_color_matrix(x: torch.Tensor, matrix: torch.Tensor, offset: torch.Tensor,
                       out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``out = matrix @ pixel + offset`` over the last (channel) axis of a stack ``x`` (N x ... x 3);
    ``matrix`` is N x 3 x 3 and ``offset`` N. Float32 math, then DALI's saturating cast."""
    if x.shape[-1] != 3:
        raise ValueError(f"expected 3 channels in the last dimension (RGB/BGR, channel-last layout), got shape "
                         f"{tuple(x.shape[1:])}")
    out_dtype = out_dtype or x.dtype
    n = x.shape[0]
    m = matrix.to(x.device, torch.float32)
    xf = x.to(torch.float32).reshape(n, -1, 3)
    out = torch.baddbmm(offset.to(x.device, torch.float32).reshape(n, 1, 1), xf, m.transpose(1, 2))
    return convert_saturate(out.reshape(x.shape), out_dtype)


def _per_sample(values, n, default) -> np.ndarray:
    if values is None:
        return np.full(n, default, dtype=np.float64)
    out = [as_float_list(v) for v in values]
    if any(len(v) != 1 for v in out):
        raise ValueError(f"expected one value per sample, got {[len(v) for v in out]}")
    return np.array([v[0] for v in out], dtype=np.float64)


def _transform(n, in_dtype, hue, saturation, value, brightness, contrast, dtype, image_type):
    """Per-sample matrices (N x 3 x 3, float64), offsets (N) and the output type, on the host."""
    h = _per_sample(hue, n, 0.0)
    s = _per_sample(saturation, n, 1.0)
    v = _per_sample(value, n, 1.0)
    b = _per_sample(brightness, n, 1.0)
    c = _per_sample(contrast, n, 1.0)
    mats = color_matrix(h, s, v, b, c, bgr=image_type == types.BGR)
    half = 0.5 if in_dtype.is_floating_point else 128.0
    out_dtype = in_dtype if dtype is None or dtype == types.NO_TYPE else types.to_torch_dtype(dtype)
    return mats, torch.from_numpy((half - half * c) * b), out_dtype


def _run_batch(images, *, hue=None, saturation=None, value=None, brightness=None, contrast=None, dtype=None,
               image_type=types.RGB):
    """Shared batch path of the four operators: a matrix per sample; on CUDA with Triton one launch for a dense
    batch, otherwise one bmm per group of equally shaped samples. Sequences with per-frame values run frame by
    frame. Returns a dense tensor or a list."""
    args = dict(hue=hue, saturation=saturation, value=value, brightness=brightness, contrast=contrast)
    return with_frames(lambda b, a: _run_samples(b, **a, dtype=dtype, image_type=image_type), images, args)


def _run_samples(images, *, hue, saturation, value, brightness, contrast, dtype, image_type):
    dense = images.dense  # a dense batch is never cut into its samples (64 views a batch, each freed again)
    n = len(images)
    if not n:
        return []
    if image_type not in (types.RGB, types.BGR):
        raise ValueError(f"image_type={image_type!r} is not supported; supported: types.RGB, types.BGR")
    check_channel_last(images.layout(), "colour operator")
    first = dense if dense is not None else images.samples[0]  # the samples' device and type
    mats, offsets, out_dtype = _transform(n, first.dtype, hue, saturation, value, brightness, contrast, dtype,
                                          image_type)
    dev = first.device
    if dev.type == "cuda":  # page-locked: from pageable memory the copies would wait for the stream
        mats, offsets = mats.to(torch.float32).pin_memory(), offsets.pin_memory()
    mats = mats.to(dev, torch.float32, non_blocking=True)
    offsets = offsets.to(dev, non_blocking=True)
    if triton_available(first):
        for x in (dense[0],) if dense is not None else images.samples:  # a dense batch's samples share one shape
            if x.dim() == 0 or x.shape[-1] != 3:
                raise ValueError(f"expected 3 channels in the last dimension (RGB/BGR, channel-last layout), got "
                                 f"shape {tuple(x.shape)}")
        return affine_channels(images.samples if dense is None or not dense.is_contiguous() else [], mats,
                               offsets.reshape(n, 1).expand(n, 3), out_dtype, 3, 3, dense)

    def run(stack, idx):
        ix = torch.tensor(idx, device=dev)
        return apply_color_matrix(stack, mats[ix], offsets[ix], out_dtype)

    return run(dense, list(range(n))) if dense is not None else map_batch(images.samples, run)


# ------------------------------------------------------------------------------------------------------------
# Operators
# ------------------------------------------------------------------------------------------------------------
_HUE = Arg("hue", float, 0.0, "Hue change, in degrees (an additive rotation; values wrap around).", per_sample=True)
_SAT = Arg("saturation", float, 1.0, "Saturation multiplier; 0 gives greyscale.", per_sample=True)
_VALUE = Arg("value", float, 1.0, "Value (brightness) multiplier.", per_sample=True)
_BRIGHT = Arg("brightness", float, 1.0, "Brightness multiplier (0: black, 1: unchanged).", per_sample=True)
_CONTR = Arg("contrast", float, 1.0, "Contrast multiplier around mid-grey (0: uniform grey, 1: unchanged).",
             per_sample=True)
_DTYPE = Arg("dtype", types.DALIDataType, None, "Output type; None keeps the input type.")
_ITYPE = Arg("image_type", types.DALIImageType, types.RGB, "Colour space of the input and output images "
             "(types.RGB or types.BGR).")
_NOTE = ("Inputs are channel-last 3-channel images (HWC, FHWC, DHWC). The change is one 3x3 matrix per sample in "
         "RGB space, built in YIQ space as DALI does (an approximation of HSV).")

HSV_SCHEMA = OpSchema(
    "hsv",
    sequences="axis",
    doc=f"""Adjusts hue, saturation and value (brightness) of RGB images.

    ``hue`` is added (degrees); ``saturation`` and ``value`` multiply. {_NOTE} Example::

        images = fn.hsv(images, hue=fn.random.uniform(range=[-30, 30]), saturation=1.2)
    """,
    devices=("cpu", "gpu"),
    args=[_HUE, _SAT, _VALUE, _DTYPE],
)
HUE_SCHEMA = OpSchema(
    "hue",
    sequences="axis",
    doc=f"""Changes the hue of images by ``hue`` degrees. {_NOTE} Example::

        images = fn.hue(images, hue=45.0)
    """,
    devices=("cpu", "gpu"),
    args=[_HUE, _DTYPE, _ITYPE],
)
SATURATION_SCHEMA = OpSchema(
    "saturation",
    sequences="axis",
    doc=f"""Changes the saturation of images (multiplier; 0 gives greyscale). {_NOTE} Example::

        images = fn.saturation(images, saturation=fn.random.uniform(range=[0.5, 1.5]))
    """,
    devices=("cpu", "gpu"),
    args=[_SAT, _DTYPE, _ITYPE],
)
COLOR_TWIST_SCHEMA = OpSchema(
    "color_twist",
    sequences="axis",
    doc=f"""Adjusts hue, saturation, brightness and contrast of images in one pass.

    ``out = brightness * (contrast * M(hue, saturation) @ rgb + (1 - contrast) * half_range)``, with
    ``half_range`` 128 for integer and 0.5 for float inputs. {_NOTE} Example::

        images = fn.color_twist(images, brightness=fn.random.uniform(range=[0.8, 1.2]), hue=10.0)
    """,
    devices=("cpu", "gpu"),
    args=[_HUE, _SAT, _BRIGHT, _CONTR, _DTYPE, _ITYPE],
)

_PARAMS = ("hue", "saturation", "value", "brightness", "contrast")


def _sample(image, layout: str, args: dict):
    per = {k: [args[k]] for k in _PARAMS if k in args}
    return _run_batch(Batch([image], layout), dtype=args.get("dtype"), image_type=args.get("image_type", types.RGB),
                      **per)[0]


def _batch(images, args):
    per = {k: args[k] for k in _PARAMS if k in args}
    image_type = args.const("image_type") if "image_type" in args else types.RGB
    return to_batch(_run_batch(images, dtype=args.const("dtype"), image_type=image_type, **per), images.layout())


def color_matrix_cpu(ctx, image, **a):
    """CPU kernel of hsv, hue, saturation and color_twist, per sample in the pipeline's threads: OpenCV's
    ``cv2.transform`` for uint8 / float32 RGB (within one level of the float formula), else the torch path."""
    image_type = a.get("image_type", types.RGB)
    if image_type in (types.RGB, types.BGR) and not has_per_frame({k: a[k] for k in _PARAMS if k in a}):
        check_channel_last(ctx.layout, ctx.op_name)
        per = {k: [a[k]] for k in _PARAMS if k in a}
        mats, offsets, out_dtype = _transform(1, image.dtype, per.get("hue"), per.get("saturation"),
                                              per.get("value"), per.get("brightness"), per.get("contrast"),
                                              a.get("dtype"), image_type)
        out = affine_channels_cpu(image, mats[0], offsets.expand(3), out_dtype)
        if out is not None:
            return out
    return _sample(image, ctx.layout, a)


def color_matrix_gpu(ctx, images, *, args):
    """GPU kernel of hsv, hue, saturation and color_twist: one matrix per sample, one bmm per shape group."""
    return _batch(images, args)


for _schema in (HSV_SCHEMA, HUE_SCHEMA, SATURATION_SCHEMA, COLOR_TWIST_SCHEMA):
    _schema.sample_kernel("cpu")(color_matrix_cpu)
    _schema.batch_kernel("gpu")(color_matrix_gpu)
