"""RandAugment (https://arxiv.org/abs/1909.13719), as DALI's ``nvidia.dali.auto_aug.rand_augment``: each sample
gets ``n`` augmentations, each picked uniformly at random from the suite, all at magnitude bin ``m``.

The pipeline must be defined with ``enable_conditionals=True`` (the augmentations are chosen per sample with
``if`` statements on DataNodes).

Example::

    @pipeline_def(enable_conditionals=True, batch_size=128, num_threads=4, device_id=0)
    def pipe():
        ...
        images = rand_augment.rand_augment(images, n=2, m=9, shape=[224, 224])
"""

from __future__ import annotations

import warnings
from typing import Any

from sluice import fn, types
from sluice.auto_aug import augmentations as a
from sluice.auto_aug.core import _Augmentation, signed_bin
from sluice.auto_aug.core._args import forbid_unused_kwargs as _forbid_unused_kwargs
from sluice.auto_aug.core._utils import get_translations as _get_translations
from sluice.auto_aug.core._utils import pretty_select as _pretty_select
from sluice.auto_aug.core._utils import require_conditionals as _require_conditionals
from sluice.auto_aug.core._utils import warp_kwargs as _warp_kwargs
from sluice.pipeline import conditionals
from sluice.pipeline.graph import DataNode as _DataNode

__all__ = ["rand_augment", "apply_rand_augment", "get_rand_augment_suite", "get_rand_augment_non_monotonic_suite"]


def rand_augment(data: _DataNode, n: int, m: int, num_magnitude_bins: int = 31,
                 shape: _DataNode | tuple[int, int] | None = None, fill_value: int | None = 128,
                 interp_type: types.DALIInterpType | None = None, max_translate_abs: int | None = None,
                 max_translate_rel: float | None = None, seed: int | None = None, monotonic_mag: bool = True,
                 excluded: list[str] | None = None) -> _DataNode:
    """Apply RandAugment to a batch of uint8 images (HWC) or videos (FHWC).

    Args:
        data: the samples.
        n: how many augmentations each sample gets (in sequence).
        m: the magnitude bin of every augmentation, in ``[0, num_magnitude_bins - 1]``.
        num_magnitude_bins: how many bins the magnitude ranges are divided into.
        shape: the (height, width, ...) of the samples: translations then go up to ``max_translate_rel`` of the
            size (default 100/224); without it, up to ``max_translate_abs`` pixels (default 100).
        fill_value: the value outside the image of the warped samples; None repeats the border pixel.
        interp_type: the warps' interpolation (``types.INTERP_LINEAR``, the default, or ``types.INTERP_NN``).
        max_translate_abs, max_translate_rel: the translation limits (one value or (height, width)).
        seed: the seed of the random choices.
        monotonic_mag: with True (default) every augmentation gets stronger with the bin; with False, the
            ranges of AutoAugment for brightness, contrast, color, sharpness (0.1 to 1.9), posterize and
            solarize (:func:`get_rand_augment_non_monotonic_suite`).
        excluded: names of augmentations of the suite to leave out.

    Returns:
        The augmented samples.
    """
    kwargs = _warp_kwargs(shape, fill_value, interp_type)
    use_shape = shape is not None
    suite = (get_rand_augment_suite if monotonic_mag else get_rand_augment_non_monotonic_suite)(
        use_shape, max_translate_abs, max_translate_rel)
    return apply_rand_augment(_without(suite, excluded, "RandAugment"), data, n, m,
                              num_magnitude_bins=num_magnitude_bins, seed=seed, **kwargs)


def _without(suite: list[_Augmentation], excluded: list[str] | None, what: str) -> list[_Augmentation]:
    """``suite`` without the augmentations named in ``excluded`` (each must be in the suite)."""
    names = [aug.name for aug in suite]
    for name in excluded or []:
        if name not in names:
            raise ValueError(f"`{name}` is in excluded, but the {what} suite has no augmentation of that name. The "
                             f"augmentations in the suite are: {', '.join(names)}.")
    return [aug for aug in suite if aug.name not in (excluded or [])]


def apply_rand_augment(augmentations: list[_Augmentation], data: _DataNode, n: int, m: int,
                       num_magnitude_bins: int = 31, seed: int | None = None, **kwargs: Any) -> _DataNode:
    """Apply ``augmentations`` in RandAugment's way: each sample gets ``n`` of them in sequence, each picked at
    random, all with magnitude bin ``m``. ``kwargs`` go to the augmentations that name them."""
    # through conditionals.call: the function's `if` statements are rewritten even where its caller was not
    return conditionals.call(_apply_rand_augment, augmentations, data, n, m, num_magnitude_bins, seed, **kwargs)


def _apply_rand_augment(augmentations: list[_Augmentation], data: _DataNode, n: int, m: int,
                        num_magnitude_bins: int = 31, seed: int | None = None, **kwargs: Any) -> _DataNode:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"The number of augmentations n must be a non-negative integer, got {n!r}.")
    if isinstance(num_magnitude_bins, bool) or not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 1:
        raise ValueError(f"num_magnitude_bins must be a positive integer, got {num_magnitude_bins!r}.")
    if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < num_magnitude_bins:
        raise ValueError(f"The magnitude bin m must be an integer in [0, {num_magnitude_bins - 1}], got {m!r}.")
    if n == 0:
        warnings.warn("apply_rand_augment was called with n=0: no augmentation is applied.", Warning, stacklevel=2)
        return data
    if not augmentations:
        raise ValueError("The augmentations list of apply_rand_augment is empty; it may be only where n=0.")
    _require_conditionals("apply_rand_augment")
    shape = () if n == 1 else (n,)
    op_idx = fn.random.uniform(values=list(range(len(augmentations))), seed=seed, shape=shape, dtype=types.INT32)
    signed = any(aug.randomly_negate for aug in augmentations)
    mag_bin = signed_bin(m, seed=seed, shape=shape) if signed else m
    _forbid_unused_kwargs(augmentations, kwargs, "apply_rand_augment")
    for level in range(n):
        level_bin = mag_bin[level] if signed and n > 1 else mag_bin
        level_kwargs = dict(data=data, magnitude_bin=level_bin, num_magnitude_bins=num_magnitude_bins, **kwargs)
        data = _pretty_select(augmentations, op_idx if n == 1 else op_idx[level], level_kwargs,
                              auto_aug_name="apply_rand_augment", ref_suite_name="get_rand_augment_suite")
    return data


def get_rand_augment_suite(use_shape: bool = False, max_translate_abs: int | None = None,
                           max_translate_rel: float | None = None) -> list[_Augmentation]:
    """The RandAugment suite, every augmentation stronger with the bin: translations (relative with ``use_shape``,
    up to ``max_translate_rel``, default 100/224; else up to ``max_translate_abs`` pixels, default 100), shears,
    rotation, brightness, contrast, color, sharpness, posterize, solarize, equalize, auto_contrast, identity."""
    return monotonic_suite(_get_translations(use_shape, 100, 100 / 224, max_translate_abs, max_translate_rel),
                           shear=0.3, angle=30, enhance=(0, 0.9), posterize=(8, 4))


def monotonic_suite(translations: list[_Augmentation], shear: float, angle: float, enhance: tuple[float, float],
                    posterize: tuple[float, float]) -> list[_Augmentation]:
    """``translations`` and the augmentations of RandAugment's and TrivialAugment's suites with these ranges,
    every one stronger with the magnitude bin: shears up to ``shear``, rotation up to ``angle`` degrees,
    brightness, contrast, color and sharpness by ``enhance`` either way, posterize to ``posterize`` bits,
    solarize (a lower threshold is stronger), equalize, auto_contrast, identity."""
    return translations + [
        a.shear_x.augmentation((0, shear), True),
        a.shear_y.augmentation((0, shear), True),
        a.rotate.augmentation((0, angle), True),
        a.brightness.augmentation(enhance, True, a.shift_enhance_range),
        a.contrast.augmentation(enhance, True, a.shift_enhance_range),
        a.color.augmentation(enhance, True, a.shift_enhance_range),
        a.sharpness.augmentation(enhance, True, a.sharpness_kernel),
        a.posterize.augmentation(posterize, False, a.poster_mask_uint8),
        a.solarize.augmentation((256, 0)),
        a.equalize,
        a.auto_contrast,
        a.identity,
    ]


def get_rand_augment_non_monotonic_suite(use_shape: bool = False, max_translate_abs: int | None = None,
                                         max_translate_rel: float | None = None) -> list[_Augmentation]:
    """:func:`get_rand_augment_suite` with AutoAugment's ranges for brightness, contrast, color, sharpness (0.1 to
    1.9: weakest in the middle), posterize (0 to 4 bits) and solarize (0 to 256: weaker with the bin)."""
    return _get_translations(use_shape, 100, 100 / 224, max_translate_abs, max_translate_rel) + [
        a.shear_x.augmentation((0, 0.3), True),
        a.shear_y.augmentation((0, 0.3), True),
        a.rotate.augmentation((0, 30), True),
        a.brightness.augmentation((0.1, 1.9), False, None),
        a.contrast.augmentation((0.1, 1.9), False, None),
        a.color.augmentation((0.1, 1.9), False, None),
        a.sharpness.augmentation((0.1, 1.9), False, a.sharpness_kernel_shifted),
        a.posterize.augmentation((0, 4), False, a.poster_mask_uint8),
        a.solarize.augmentation((0, 256), False, None),
        a.equalize,
        a.auto_contrast,
        a.identity,
    ]
