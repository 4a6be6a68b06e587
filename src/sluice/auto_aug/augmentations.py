"""The augmentations of AutoAugment's ImageNet policy, RandAugment and TrivialAugmentWide, written with pipeline
operators, with DALI's magnitude ranges (``nvidia.dali.auto_aug.augmentations``).

Each is an :class:`~sluice.auto_aug.core._augmentation.Augmentation`: called with the samples, a
``magnitude_bin`` and ``num_magnitude_bins``, it runs with the parameter of the bin,
``mag_to_param(linspace(*mag_range, num_magnitude_bins)[bin] * (-1) ** random_sign)``. The ranges are examples
that the policies adjust; change one with ``.augmentation``::

    strong_shear_x = shear_x.augmentation(mag_range=(0, 0.5))

The samples are uint8 images (``HWC``) or videos (``FHWC``). The geometric augmentations (shears, translations,
rotation) warp with ``fill_value`` outside the image (None: the border pixel repeats) and ``interp_type``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sluice import fn, types
from sluice.auto_aug.core import augmentation
from sluice.pipeline.graph import Constant, DataNode

__all__ = ["shear_x", "shear_y", "translate_x", "translate_x_no_shape", "translate_y", "translate_y_no_shape",
           "rotate", "brightness", "contrast", "color", "sharpness", "posterize", "solarize", "solarize_add",
           "invert", "equalize", "auto_contrast", "identity", "warp_x_param", "warp_y_param", "shift_enhance_range",
           "sharpness_kernel", "sharpness_kernel_shifted", "poster_mask_uint8", "solarize_add_shift"]


def warp_x_param(magnitude: float) -> list[float]:
    """The (x, y) parameter of a shear or translation along x."""
    return [magnitude, 0]


def warp_y_param(magnitude: float) -> list[float]:
    """The (x, y) parameter of a shear or translation along y."""
    return [0, magnitude]


def _warp(data: DataNode, matrix: DataNode, fill_value: Any, interp_type: Any) -> DataNode:
    """``data`` moved by the forward transform ``matrix`` (input -> output coordinates)."""
    return fn.warp_affine(data, matrix=matrix, fill_value=fill_value, interp_type=interp_type, inverse_map=False)


@augmentation(mag_range=(0, 0.3), randomly_negate=True, mag_to_param=warp_x_param)
def shear_x(data, shear, fill_value=128, interp_type=None):
    """Shear along x: ``x' = x + s * y`` (about the top-left corner, as PIL's affine transform)."""
    return _warp(data, fn.transforms.shear(shear=shear), fill_value, interp_type)


@augmentation(mag_range=(0, 0.3), randomly_negate=True, mag_to_param=warp_y_param)
def shear_y(data, shear, fill_value=128, interp_type=None):
    """Shear along y: ``y' = y + s * x``."""
    return _warp(data, fn.transforms.shear(shear=shear), fill_value, interp_type)


@augmentation(mag_range=(0.0, 1.0), randomly_negate=True, mag_to_param=warp_x_param)
def translate_x(data, rel_offset, shape, fill_value=128, interp_type=None):
    """Shift along x by a fraction of the width (``shape``: the images' (H, W, ...), a DataNode or a tuple)."""
    return _warp(data, fn.transforms.translation(offset=rel_offset * shape[1]), fill_value, interp_type)


@augmentation(mag_range=(0, 250), randomly_negate=True, mag_to_param=warp_x_param, name="translate_x")
def translate_x_no_shape(data, offset, fill_value=128, interp_type=None):
    """Shift along x by a number of pixels."""
    return _warp(data, fn.transforms.translation(offset=offset), fill_value, interp_type)


@augmentation(mag_range=(0.0, 1.0), randomly_negate=True, mag_to_param=warp_y_param)
def translate_y(data, rel_offset, shape, fill_value=128, interp_type=None):
    """Shift along y by a fraction of the height."""
    return _warp(data, fn.transforms.translation(offset=rel_offset * shape[0]), fill_value, interp_type)


@augmentation(mag_range=(0, 250), randomly_negate=True, mag_to_param=warp_y_param, name="translate_y")
def translate_y_no_shape(data, offset, fill_value=128, interp_type=None):
    """Shift along y by a number of pixels."""
    return _warp(data, fn.transforms.translation(offset=offset), fill_value, interp_type)


@augmentation(mag_range=(0, 30), randomly_negate=True)
def rotate(data, angle, fill_value=128, interp_type=None, rotate_keep_size=True):
    """Rotate by ``angle`` degrees counter-clockwise about the centre, keeping the size."""
    return fn.rotate(data, angle=angle, fill_value=fill_value, interp_type=interp_type, keep_size=rotate_keep_size)


def shift_enhance_range(magnitude: float) -> float:
    """``1 + magnitude``: the enhance operations (brightness, contrast, color, sharpness) are neutral at 1, and get
    stronger the further they are from it, so their magnitudes are in [0, 1], randomly negated, then shifted."""
    return 1 + magnitude


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=shift_enhance_range)
def brightness(data, parameter):
    """Multiply by ``parameter``."""
    return fn.brightness(data, brightness=parameter)


_RGB_WEIGHTS = Constant(np.array([0.299, 0.587, 0.114], np.float32))


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=shift_enhance_range)
def contrast(data, parameter):
    """Blend with the image's mean grey, as PIL's ``ImageEnhance.Contrast`` (the centre is the mean of the luma
    weighted channel means)."""
    mean = fn.reductions.mean(data, axis_names="HW", keep_dims=True)
    center = fn.reductions.sum(mean * _RGB_WEIGHTS, axis_names="C", keep_dims=True)
    return fn.cast_like(center + (data - center) * parameter, data)


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=shift_enhance_range)
def color(data, parameter):
    """Scale the saturation by ``parameter``."""
    return fn.saturation(data, saturation=parameter)


def sharpness_kernel(magnitude: float) -> np.ndarray:
    """The 3 x 3 filter of a sharpness change by ``magnitude`` in [-1, 1]: ``(1 + m) * identity - m * smooth``, with
    PIL's smoothing filter ``[[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13``."""
    smooth = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], np.float32) / 13
    identity = np.zeros((3, 3), np.float32)
    identity[1, 1] = 1
    return -magnitude * smooth + (1 + magnitude) * identity


def sharpness_kernel_shifted(magnitude: float) -> np.ndarray:
    """:func:`sharpness_kernel` of a magnitude in [0, 2] (neutral at 1)."""
    return sharpness_kernel(magnitude - 1)


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=sharpness_kernel, param_device="auto")
def sharpness(data, kernel):
    """PIL's ``ImageEnhance.Sharpness`` but at the 1-pixel border, which PIL leaves as it is and this filters with
    reflected borders."""
    return fn.filter(data, kernel)


def poster_mask_uint8(magnitude: float) -> np.ndarray:
    """The uint8 mask keeping the ``round(magnitude)`` highest bits (1 to 8; 0 is taken as 1, as the RandAugment
    paper's implementation does, so that no image turns black)."""
    bits = int(np.clip(np.round(magnitude), 1, 8))
    return np.array(0xFF ^ ((1 << (8 - bits)) - 1), dtype=np.uint8)


@augmentation(mag_range=(0, 4), mag_to_param=poster_mask_uint8, param_device="auto")
def posterize(data, mask):
    """Keep only the highest bits of each value."""
    return data & mask


@augmentation(mag_range=(256, 0), param_device="auto")
def solarize(data, threshold):
    """Invert the values at or above ``threshold`` (for uint8, ``255 - x`` is ``x ^ 255``)."""
    return data ^ ((data >= threshold) * Constant(255, types.UINT8))


def solarize_add_shift(shift: float) -> np.ndarray:
    """The uint8 shift of :func:`solarize_add` (below 128)."""
    if shift >= 128:
        raise ValueError(f"solarize_add takes shifts from 0 to 127, got {shift}")
    return np.uint8(shift)


@augmentation(mag_range=(0, 110), param_device="auto", mag_to_param=solarize_add_shift)
def solarize_add(data, shift):
    """Add ``shift`` to the values below 128 (at most 127 + 110: no wrap-around)."""
    return data + (data < Constant(128, types.UINT8)) * shift


@augmentation
def invert(data, _):
    """``255 - value``."""
    return Constant(255, types.UINT8) - data


@augmentation
def equalize(data, _):
    """Per-channel histogram equalisation (OpenCV's formula, as DALI; PIL's rounds its table differently)."""
    return fn.equalize(data)


@augmentation
def auto_contrast(data, _):
    """Stretch each channel to [0, 255] (a channel of one value is left as it is)."""
    lo = fn.reductions.min(data, axis_names="HW", keep_dims=True)
    hi = fn.reductions.max(data, axis_names="HW", keep_dims=True)
    span = hi - lo
    stretch = span > 0
    keep = stretch ^ True
    divisor = span * stretch + Constant(255, types.UINT8) * keep  # 255 / divisor: 255 / span, or 1
    return fn.cast_like((data - lo * stretch) * (255 / divisor), data)


@augmentation
def identity(data, _):
    """The samples unchanged."""
    return data
