"""TrivialAugment Wide (https://arxiv.org/abs/2103.10158), as DALI's ``nvidia.dali.auto_aug.trivial_augment``:
each sample gets one augmentation of the wide suite, picked uniformly at random, at a magnitude bin picked
uniformly at random.

The pipeline must be defined with ``enable_conditionals=True``.

Example::

    @pipeline_def(enable_conditionals=True, batch_size=128, num_threads=4, device_id=0)
    def pipe():
        ...
        images = trivial_augment.trivial_augment_wide(images, shape=[224, 224])
"""

from __future__ import annotations

from typing import Any

from sluice import fn, types
from sluice.auto_aug.core import _Augmentation, signed_bin
from sluice.auto_aug.core._args import forbid_unused_kwargs as _forbid_unused_kwargs
from sluice.auto_aug.core._utils import get_translations as _get_translations
from sluice.auto_aug.core._utils import pretty_select as _pretty_select
from sluice.auto_aug.core._utils import require_conditionals as _require_conditionals
from sluice.auto_aug.core._utils import warp_kwargs as _warp_kwargs
from sluice.auto_aug.rand_augment import _without, monotonic_suite
from sluice.pipeline import conditionals
from sluice.pipeline.graph import DataNode as _DataNode

__all__ = ["trivial_augment_wide", "apply_trivial_augment", "get_trivial_augment_wide_suite"]


def trivial_augment_wide(data: _DataNode, num_magnitude_bins: int = 31,
                         shape: _DataNode | tuple[int, int] | None = None, fill_value: int | None = 128,
                         interp_type: types.DALIInterpType | None = None, max_translate_abs: int | None = None,
                         max_translate_rel: float | None = None, seed: int | None = None,
                         excluded: list[str] | None = None) -> _DataNode:
    """Apply TrivialAugment Wide to a batch of uint8 images (HWC) or videos (FHWC).

    Args:
        data: the samples.
        num_magnitude_bins: how many bins the magnitude ranges are divided into.
        shape: the (height, width, ...) of the samples: translations then go up to ``max_translate_rel`` of the
            size (default 1); without it, up to ``max_translate_abs`` pixels (default 32).
        fill_value: the value outside the image of the warped samples; None repeats the border pixel.
        interp_type: the warps' interpolation (``types.INTERP_LINEAR``, the default, or ``types.INTERP_NN``).
        max_translate_abs, max_translate_rel: the translation limits (one value or (height, width)).
        seed: the seed of the random choices.
        excluded: names of augmentations of the suite to leave out.

    Returns:
        The augmented samples.
    """
    kwargs = _warp_kwargs(shape, fill_value, interp_type)
    use_shape = shape is not None
    suite = get_trivial_augment_wide_suite(use_shape=use_shape, max_translate_abs=max_translate_abs,
                                           max_translate_rel=max_translate_rel)
    return apply_trivial_augment(_without(suite, excluded, "TrivialAugmentWide"), data,
                                 num_magnitude_bins=num_magnitude_bins, seed=seed, **kwargs)


def apply_trivial_augment(augmentations: list[_Augmentation], data: _DataNode, num_magnitude_bins: int = 31,
                          seed: int | None = None, **kwargs: Any) -> _DataNode:
    """Apply ``augmentations`` in TrivialAugment's way: each sample gets one of them, picked at random, at a
    magnitude bin picked at random from ``[0, num_magnitude_bins - 1]``. ``kwargs`` go to the augmentations that
    name them."""
    # through conditionals.call: the function's `if` statements are rewritten even where its caller was not
    return conditionals.call(_apply_trivial_augment, augmentations, data, num_magnitude_bins, seed, **kwargs)


def _apply_trivial_augment(augmentations: list[_Augmentation], data: _DataNode, num_magnitude_bins: int = 31,
                           seed: int | None = None, **kwargs: Any) -> _DataNode:
    if isinstance(num_magnitude_bins, bool) or not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 1:
        raise ValueError(f"num_magnitude_bins must be a positive integer, got {num_magnitude_bins!r}.")
    if not augmentations:
        raise ValueError("The augmentations list of apply_trivial_augment is empty.")
    _require_conditionals("apply_trivial_augment")
    magnitude_bin = fn.random.uniform(values=list(range(num_magnitude_bins)), dtype=types.INT32, seed=seed)
    if any(aug.randomly_negate for aug in augmentations):
        magnitude_bin = signed_bin(magnitude_bin, seed=seed)
    _forbid_unused_kwargs(augmentations, kwargs, "apply_trivial_augment")
    op_kwargs = dict(data=data, magnitude_bin=magnitude_bin, num_magnitude_bins=num_magnitude_bins, **kwargs)
    op_idx = fn.random.uniform(values=list(range(len(augmentations))), seed=seed, dtype=types.INT32)
    return _pretty_select(augmentations, op_idx, op_kwargs, auto_aug_name="apply_trivial_augment",
                          ref_suite_name="get_trivial_augment_wide_suite")


def get_trivial_augment_wide_suite(use_shape: bool = False, max_translate_abs: int | None = None,
                                   max_translate_rel: float | None = None) -> list[_Augmentation]:
    """The wide suite of TrivialAugment (14 augmentations): translations (relative with ``use_shape``, up to
    ``max_translate_rel``, default 1; else up to ``max_translate_abs`` pixels, default 32), shears up to 0.99,
    rotation up to 135 degrees, brightness, contrast, color and sharpness by up to 0.99, posterize to 2 bits,
    solarize, equalize, auto_contrast, identity."""
    return monotonic_suite(_get_translations(use_shape, 32, 1.0, max_translate_abs, max_translate_rel),
                           shear=0.99, angle=135, enhance=(0.01, 0.99), posterize=(8, 2))
