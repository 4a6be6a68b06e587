"""``fn.color_space_conversion``: between RGB, BGR, GRAY and YCbCr (channel-last images).

Conversions follow DALI:

* GRAY is luma with the BT.601 weights ``0.299 R + 0.587 G + 0.114 B`` over the full range (as OpenCV's
  ``COLOR_RGB2GRAY``);
* YCbCr is ITU-R BT.601 "studio swing": ``Y = 16 + 219 * luma`` (16..235), ``Cb``/``Cr`` centred at 128 with
  range 16..240 (as scikit-image's ``rgb2ycbcr``), expressed in the input type's normalised range for float data;
* GRAY <-> YCbCr map between the full gray range and the 16..235 luma range.

Math is float32 on values normalised to [0, 1] (integers divided by their type's maximum); integer outputs are
rounded to nearest and clamped.
"""

from __future__ import annotations

import functools

import torch

from sluice import types
from sluice.ops.image._color_affine import affine_channels, affine_channels_cpu, opencv, triton_available
from sluice.ops.tensor._util import check_channel_last, convert_saturate, map_batch, to_batch
from sluice.schema import REQUIRED, Arg, OpSchema

__all__ = ["convert_color"]

_LUMA = (0.299, 0.587, 0.114)
# ITU-R BT.601 studio-swing coefficients (DALI's constants), for values normalised to [0, 1].
_Y = (0.257, 0.504, 0.098)
_CB = (-0.148, -0.291, 0.439)
_CR = (0.439, -0.368, -0.071)
_Y_SCALE = sum(_Y)
_SUPPORTED = (types.RGB, types.BGR, types.GRAY, types.YCbCr)
_SWAPS = {types.RGB: (types.BGR,), types.BGR: (types.RGB,)}  # channel reversals: exact copies, no arithmetic
_GRAY_CV = {(types.RGB, types.GRAY): "COLOR_RGB2GRAY", (types.BGR, types.GRAY): "COLOR_BGR2GRAY",
            (types.GRAY, types.RGB): "COLOR_GRAY2RGB", (types.GRAY, types.BGR): "COLOR_GRAY2BGR"}


def _dot(x: torch.Tensor, w: tuple[float, float, float]) -> torch.Tensor:
    return x[..., 0] * w[0] + x[..., 1] * w[1] + x[..., 2] * w[2]


def _to_rgb(x: torch.Tensor, src: types.DALIImageType, y_off: float, mid: float) -> torch.Tensor:
    if src is types.RGB:
        return x
    if src is types.BGR:
        return x.flip(-1)
    if src is types.GRAY:
        return x.expand(*x.shape[:-1], 3)
    y = 1.164 * (x[..., 0] - y_off)
    cb = x[..., 1] - mid
    cr = x[..., 2] - mid
    return torch.stack([y + 1.596 * cr, y - 0.813 * cr - 0.392 * cb, y + 2.017 * cb], -1)


def _from_rgb(rgb: torch.Tensor, dst: types.DALIImageType, y_off: float, mid: float) -> torch.Tensor:
    if dst is types.RGB:
        return rgb
    if dst is types.BGR:
        return rgb.flip(-1)
    if dst is types.GRAY:
        return _dot(rgb, _LUMA).unsqueeze(-1)
    return torch.stack([_dot(rgb, _Y) + y_off, _dot(rgb, _CB) + mid, _dot(rgb, _CR) + mid], -1)


def convert_color(x: torch.Tensor, image_type: types.DALIImageType, output_type: types.DALIImageType,
                  out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Convert channel-last image data ``x`` (... x C) from ``image_type`` to ``output_type``. Any device.

    Example::

        gray = convert_color(rgb_u8, types.RGB, types.GRAY)     # H x W x 1 uint8
    """
    for name, t in (("image_type", image_type), ("output_type", output_type)):
        if t not in _SUPPORTED:
            raise ValueError(f"color_space_conversion: {name}={t!r} is not supported; supported: "
                             "types.RGB, types.BGR, types.GRAY, types.YCbCr")
    channels = image_type.channels
    if x.dim() == 0 or x.shape[-1] != channels:
        raise ValueError(f"color_space_conversion: image_type={image_type!r} needs {channels} channel(s) in the "
                         f"last dimension; got shape {tuple(x.shape)}")
    out_dtype = out_dtype or x.dtype
    if image_type is output_type and out_dtype == x.dtype:
        return x.clone()
    if {image_type, output_type} <= {types.RGB, types.BGR} and out_dtype == x.dtype:
        return x.flip(-1).contiguous()
    xf = x.to(torch.float32) / types.max_value(x.dtype)
    out = _normalized(xf, image_type, output_type, x.dtype.is_floating_point)
    if out_dtype.is_floating_point:
        return out.to(out_dtype)
    return convert_saturate(out * types.max_value(out_dtype), out_dtype)


def _normalized(xf: torch.Tensor, src: types.DALIImageType, dst: types.DALIImageType,
                float_input: bool) -> torch.Tensor:
    """The conversion on values normalised to [0, 1]."""
    # Integer data: offsets are exactly 16 and 128 of 255 (DALI's uint8 path); float data: 1/16 and 1/2.
    y_off, mid = (0.0625, 0.5) if float_input else (16.0 / 255.0, 128.0 / 255.0)
    if src is types.GRAY and dst is types.YCbCr:
        y = xf * _Y_SCALE + y_off
        return torch.cat([y, torch.full_like(y, mid), torch.full_like(y, mid)], -1)
    if src is types.YCbCr and dst is types.GRAY:
        return (xf[..., :1] - y_off) / _Y_SCALE
    return _from_rgb(_to_rgb(xf, src, y_off, mid), dst, y_off, mid)


@functools.lru_cache(maxsize=64)
def affine_of(src: types.DALIImageType, dst: types.DALIImageType, in_dtype: torch.dtype,
              out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The conversion as ``out = M @ in + o`` on raw values of the given types (every conversion here is
    affine): M is C_out x C_in, o is C_out (float64), read off by converting the origin and the unit vectors."""
    c_in = src.channels
    points = torch.cat([torch.zeros(1, c_in, dtype=torch.float64), torch.eye(c_in, dtype=torch.float64)])
    values = _normalized(points, src, dst, in_dtype.is_floating_point)
    o = values[0]
    m = (values[1:] - o).T
    scale_out = types.max_value(out_dtype)
    return m * (scale_out / types.max_value(in_dtype)), o * scale_out


def _run_batch(images, image_type, output_type, dtype=None):
    """On CUDA with Triton: the conversion as one affine map, one launch for a dense batch. Otherwise one torch
    call per group of equally shaped samples."""
    out_dtype = _torch_dtype(dtype)
    check_channel_last(images.layout(), "color_space_conversion")
    samples = list(images.samples)
    if samples and triton_available(samples[0]) and image_type in _SUPPORTED and output_type in _SUPPORTED:
        for x in samples:
            if x.dim() == 0 or x.shape[-1] != image_type.channels:
                raise ValueError(f"color_space_conversion: image_type={image_type!r} needs {image_type.channels} "
                                 f"channel(s) in the last dimension; got shape {tuple(x.shape)}")
        out_dtype = out_dtype or samples[0].dtype
        m, o = affine_of(image_type, output_type, samples[0].dtype, out_dtype)
        n = len(samples)
        dev = samples[0].device
        return affine_channels(samples, m.expand(n, *m.shape).to(dev), o.expand(n, *o.shape).to(dev), out_dtype,
                               image_type.channels, output_type.channels, images.dense)
    return map_batch(list(images.samples), lambda s, _: convert_color(s, image_type, output_type, out_dtype),
                      images.dense)


SCHEMA = OpSchema(
    "color_space_conversion",
    sequences="axis",
    doc="""Converts channel-last images between colour spaces: RGB, BGR, GRAY (1 channel) and YCbCr (BT.601).

    GRAY is ``0.299 R + 0.587 G + 0.114 B`` (as OpenCV's ``COLOR_RGB2GRAY``); YCbCr is ITU-R BT.601 with
    Y in 16..235 (as scikit-image's ``rgb2ycbcr``). Example::

        gray = fn.color_space_conversion(images, image_type=types.RGB, output_type=types.GRAY)
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("image_type", types.DALIImageType, REQUIRED, "Colour space of the input.",
            choices=(types.RGB, types.BGR, types.GRAY, types.YCbCr)),
        Arg("output_type", types.DALIImageType, REQUIRED, "Colour space of the output.",
            choices=(types.RGB, types.BGR, types.GRAY, types.YCbCr)),
        Arg("dtype", types.DALIDataType, None, "Output type; None keeps the input type."),
    ],
)


def _torch_dtype(dtype):
    return None if dtype is None or dtype == types.NO_TYPE else types.to_torch_dtype(dtype)


@SCHEMA.sample_kernel("cpu")
def color_space_conversion_cpu(ctx, image, *, image_type, output_type, dtype, **_):
    check_channel_last(ctx.layout, "color_space_conversion")
    out_dtype = _torch_dtype(dtype) or image.dtype
    cv2 = opencv()
    if cv2 is not None and (image_type, output_type) in _GRAY_CV and image.dtype == out_dtype == torch.uint8 and \
            image.dim() == 3 and image.shape[-1] == image_type.channels:
        # OpenCV's dedicated 8-bit luma conversion (fixed point, within one level of the float formula)
        gray = cv2.cvtColor(image.numpy(), getattr(cv2, _GRAY_CV[(image_type, output_type)]))
        return torch.from_numpy(gray.reshape(*image.shape[:-1], output_type.channels))
    if image_type not in (output_type, *(_SWAPS.get(image_type, ()))) and image.dim() and \
            image.shape[-1] == image_type.channels:
        # An affine map per pixel: OpenCV's cv2.transform (vectorised, releases the GIL), else the torch path.
        m, o = affine_of(image_type, output_type, image.dtype, out_dtype)
        out = affine_channels_cpu(image, m, o, out_dtype)
        if out is not None:
            return out
    return convert_color(image, image_type, output_type, out_dtype)


@SCHEMA.batch_kernel("gpu")
def color_space_conversion_gpu(ctx, images, *, args):
    out = _run_batch(images, args.const("image_type"), args.const("output_type"), args.const("dtype"))
    return to_batch(out, images.layout())
