"""AutoAugment (https://arxiv.org/abs/1805.09501): the ImageNet policy and the paper's other policies, and custom
policies, as DALI's ``nvidia.dali.auto_aug.auto_augment``.

Each sample gets one sub-policy, picked uniformly at random; its steps run in order, each with its probability.
The choice is made per sample with ``if`` statements on DataNodes, so the pipeline must be defined with
``enable_conditionals=True``.

Example::

    from sluice import fn, pipeline_def, types
    from sluice.auto_aug import auto_augment

    @pipeline_def(enable_conditionals=True, batch_size=128, num_threads=4, device_id=0)
    def training_pipe(files):
        jpegs, labels = fn.readers.file(files=files, random_shuffle=True)
        images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB)
        images = fn.resize(images, size=[224, 224])
        images = auto_augment.auto_augment_image_net(images, shape=[224, 224])
        return fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW"), labels
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sluice import fn, types
from sluice.auto_aug import augmentations as a
from sluice.auto_aug.core import Policy, _Augmentation, signed_bin
from sluice.auto_aug.core._args import forbid_unused_kwargs as _forbid_unused_kwargs
from sluice.auto_aug.core._augmentation import table_row as _table_row
from sluice.auto_aug.core._utils import get_translations as _get_translations
from sluice.auto_aug.core._utils import pretty_select as _pretty_select
from sluice.auto_aug.core._utils import require_conditionals as _require_conditionals
from sluice.auto_aug.core._utils import warp_kwargs as _warp_kwargs
from sluice.pipeline import conditionals
from sluice.pipeline.graph import DataNode as _DataNode

__all__ = ["auto_augment", "auto_augment_image_net", "apply_auto_augment", "get_image_net_policy",
           "get_reduced_image_net_policy", "get_svhn_policy", "get_reduced_cifar10_policy"]


def auto_augment(data: _DataNode, policy_name: str = "image_net", shape: _DataNode | tuple[int, int] | None = None,
                 fill_value: int | None = 128, interp_type: types.DALIInterpType | None = None,
                 max_translate_abs: int | None = None, max_translate_rel: float | None = None,
                 seed: int | None = None) -> _DataNode:
    """Apply one of the AutoAugment paper's policies to a batch of uint8 images (HWC) or videos (FHWC).

    Args:
        data: the samples.
        policy_name: ``image_net`` (default), ``reduced_image_net``, ``svhn`` or ``reduced_cifar10``.
        shape: the (height, width, ...) of the samples (a DataNode, e.g. from ``fn.peek_image_shape``, or a tuple):
            with it, translations go up to ``max_translate_rel`` of the size; without it, up to
            ``max_translate_abs`` pixels.
        fill_value: the value outside the image of the warped samples (shear, translation, rotation); None
            repeats the border pixel.
        interp_type: the warps' interpolation (``types.INTERP_LINEAR``, the default, or ``types.INTERP_NN``).
        max_translate_abs: without ``shape``, the largest shift in pixels (one value or (height, width));
            default 250.
        max_translate_rel: with ``shape``, the largest shift as a fraction of the size; default 1.
        seed: the seed of the random choices (sub-policy, steps, signs).

    Returns:
        The augmented samples.
    """
    policies = {"image_net": get_image_net_policy, "reduced_image_net": get_reduced_image_net_policy,
                "svhn": get_svhn_policy, "reduced_cifar10": get_reduced_cifar10_policy}
    if not isinstance(policy_name, str) or policy_name not in policies:
        raise ValueError(f"Invalid policy_name ({policy_name!r}). Supported values are "
                         f"{', '.join(repr(p) for p in policies)}.")
    given = [name for name, value in (("shape", shape), ("max_translate_abs", max_translate_abs),
                                      ("max_translate_rel", max_translate_rel)) if value is not None]
    kwargs = _warp_kwargs(shape, fill_value, interp_type)
    if policy_name == "reduced_image_net":
        if given:
            raise ValueError(f"The policy 'reduced_image_net' has no augmentation that uses the image shape; do not "
                             f"give `{given[0]}`.")
        policy = get_reduced_image_net_policy()
    else:
        policy = policies[policy_name](use_shape=shape is not None, max_translate_abs=max_translate_abs,
                                       max_translate_rel=max_translate_rel)
    return apply_auto_augment(policy, data, seed, **kwargs)


def auto_augment_image_net(data: _DataNode, shape: _DataNode | tuple[int, int] | None = None,
                           fill_value: int | None = 128, interp_type: types.DALIInterpType | None = None,
                           max_translate_abs: int | None = None, max_translate_rel: float | None = None,
                           seed: int | None = None) -> _DataNode:
    """:func:`auto_augment` with the ImageNet policy."""
    return auto_augment(data, "image_net", shape, fill_value, interp_type, max_translate_abs, max_translate_rel,
                        seed)


def apply_auto_augment(policy: Policy, data: _DataNode, seed: int | None = None, **kwargs: Any) -> _DataNode:
    """Apply ``policy`` in AutoAugment's way: each sample gets one of its sub-policies, picked at random, whose
    steps run in order, each with its probability.

    ``kwargs`` go to the augmentations that name them (the default suite's take ``shape``, ``fill_value`` and
    ``interp_type``); one that no augmentation takes is an error.
    """
    # through conditionals.call: the function's `if` statements are rewritten even where its caller was not
    return conditionals.call(_apply_auto_augment, policy, data, seed, **kwargs)


def _apply_auto_augment(policy: Policy, data: _DataNode, seed: int | None = None, **kwargs: Any) -> _DataNode:
    if not policy.sub_policies:
        raise ValueError(f"Cannot run an empty policy, got {policy} in apply_auto_augment.")
    _require_conditionals("apply_auto_augment")
    steps = max(len(sub_policy) for sub_policy in policy.sub_policies)
    should_run = fn.random.uniform(range=[0, 1], shape=(steps,), dtype=types.FLOAT, seed=seed)
    sub_policy_id = fn.random.uniform(values=list(range(len(policy.sub_policies))), seed=seed, dtype=types.INT32)
    probabilities, bins = _sub_policy_tables(policy, steps)
    run_probabilities = _table_row(probabilities, sub_policy_id)
    magnitude_bins = _table_row(bins, sub_policy_id)
    stage_ids, stage_augments = _sub_policy_to_augmentation_matrix_map(policy)
    aug_ids = _table_row(stage_ids, sub_policy_id)
    if any(aug.randomly_negate for aug in policy.augmentations.values()):
        magnitude_bins = signed_bin(magnitude_bins, seed=seed, shape=(steps,))
    _forbid_unused_kwargs(policy.augmentations.values(), kwargs, "apply_auto_augment")
    for stage in range(steps):
        if should_run[stage] < run_probabilities[stage]:
            stage_kwargs = dict(data=data, magnitude_bin=magnitude_bins[stage],
                                num_magnitude_bins=policy.num_magnitude_bins, **kwargs)
            data = _pretty_select(stage_augments[stage], aug_ids[stage], stage_kwargs,
                                  auto_aug_name="apply_auto_augment", ref_suite_name="get_image_net_policy")
    return data


def _sub_policy_tables(policy: Policy, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Per sub-policy and step: the probability (0 past the sub-policy's end) and the magnitude bin (0 where the
    augmentation takes none; it is not read)."""
    probabilities = np.zeros((len(policy.sub_policies), steps), np.float32)
    bins = np.zeros((len(policy.sub_policies), steps), np.int32)
    for i, sub_policy in enumerate(policy.sub_policies):
        for stage, (_, p, mag) in enumerate(sub_policy):
            probabilities[i, stage] = p
            bins[i, stage] = 0 if mag is None else mag
    return probabilities, bins


def _sub_policy_to_augmentation_matrix_map(policy: Policy) -> tuple[np.ndarray, list[list[_Augmentation]]]:
    """The augmentations of each step (those some sub-policy has there, in order of first use, then ``identity``
    for the sub-policies that have no such step) and, per sub-policy and step, the index of its augmentation in
    that step's list."""
    steps = max(len(sub_policy) for sub_policy in policy.sub_policies)
    stage_augments: list[list[_Augmentation]] = []
    for stage in range(steps):
        seen: list[_Augmentation] = []
        for sub_policy in policy.sub_policies:
            if stage < len(sub_policy) and sub_policy[stage][0] not in seen:
                seen.append(sub_policy[stage][0])
        stage_augments.append(seen + [a.identity])
    ids = np.array([[len(augs) - 1 for augs in stage_augments] for _ in policy.sub_policies], np.int32)
    for i, sub_policy in enumerate(policy.sub_policies):
        for stage, (aug, _, _) in enumerate(sub_policy):
            ids[i, stage] = stage_augments[stage].index(aug)
    return ids, stage_augments


def _policy(name: str, table: list[list[tuple[str, float, int | None]]],
            translations: list[_Augmentation] | None = None) -> Policy:
    """A policy of the AutoAugment paper: ``table`` names its steps' augmentations (with the paper's ranges; the
    translations are given, as the call's ``use_shape`` makes them)."""
    augs = {aug.name: aug for aug in translations or []}
    augs.update(shear_x=a.shear_x.augmentation((0, 0.3), True),
                shear_y=a.shear_y.augmentation((0, 0.3), True),
                rotate=a.rotate.augmentation((0, 30), True),
                brightness=a.brightness.augmentation((0.1, 1.9), False, None),
                color=a.color.augmentation((0.1, 1.9), False, None),
                contrast=a.contrast.augmentation((0.1, 1.9), False, None),
                sharpness=a.sharpness.augmentation((0.1, 1.9), False, a.sharpness_kernel_shifted),
                posterize=a.posterize.augmentation((0, 4), False, a.poster_mask_uint8),
                solarize=a.solarize.augmentation((0, 256), False),
                solarize_add=a.solarize_add.augmentation((0, 110), False),
                invert=a.invert, equalize=a.equalize, auto_contrast=a.auto_contrast)
    return Policy(name=name, num_magnitude_bins=11,
                  sub_policies=[[(augs[aug], p, mag) for aug, p, mag in sub_policy] for sub_policy in table])


_IMAGE_NET = [
    [("equalize", 0.8, None), ("shear_y", 0.8, 4)],
    [("color", 0.4, 9), ("equalize", 0.6, None)],
    [("color", 0.4, 1), ("rotate", 0.6, 8)],
    [("solarize", 0.8, 3), ("equalize", 0.4, None)],
    [("solarize", 0.4, 2), ("solarize", 0.6, 2)],
    [("color", 0.2, 0), ("equalize", 0.8, None)],
    [("equalize", 0.4, None), ("solarize_add", 0.8, 3)],
    [("shear_x", 0.2, 9), ("rotate", 0.6, 8)],
    [("color", 0.6, 1), ("equalize", 1.0, None)],
    [("invert", 0.4, None), ("rotate", 0.6, 0)],
    [("equalize", 1.0, None), ("shear_y", 0.6, 3)],
    [("color", 0.4, 7), ("equalize", 0.6, None)],
    [("posterize", 0.4, 6), ("auto_contrast", 0.4, None)],
    [("solarize", 0.6, 8), ("color", 0.6, 9)],
    [("solarize", 0.2, 4), ("rotate", 0.8, 9)],
    [("rotate", 1.0, 7), ("translate_y", 0.8, 9)],
    [("solarize", 0.8, 4)],
    [("shear_y", 0.8, 0), ("color", 0.6, 4)],
    [("color", 1.0, 0), ("rotate", 0.6, 2)],
    [("equalize", 0.8, None)],
    [("equalize", 1.0, None), ("auto_contrast", 0.6, None)],
    [("shear_y", 0.4, 7), ("solarize_add", 0.6, 7)],
    [("posterize", 0.8, 2), ("solarize", 0.6, 10)],
    [("solarize", 0.6, 8), ("equalize", 0.6, None)],
    [("color", 0.8, 6), ("rotate", 0.4, 5)],
]

_REDUCED_CIFAR10 = [
    [("invert", 0.1, None), ("contrast", 0.2, 6)],
    [("rotate", 0.7, 2), ("translate_x", 0.3, 9)],
    [("sharpness", 0.8, 1), ("sharpness", 0.9, 3)],
    [("shear_y", 0.5, 8), ("translate_y", 0.7, 9)],
    [("auto_contrast", 0.5, None), ("equalize", 0.9, None)],
    [("shear_y", 0.2, 7), ("posterize", 0.3, 7)],
    [("color", 0.4, 3), ("brightness", 0.6, 7)],
    [("sharpness", 0.3, 9), ("brightness", 0.7, 9)],
    [("equalize", 0.6, None), ("equalize", 0.5, None)],
    [("contrast", 0.6, 7), ("sharpness", 0.6, 5)],
    [("color", 0.7, 7), ("translate_x", 0.5, 8)],
    [("equalize", 0.3, None), ("auto_contrast", 0.4, None)],
    [("translate_y", 0.4, 3), ("sharpness", 0.2, 6)],
    [("brightness", 0.9, 6), ("color", 0.2, 8)],
    [("solarize", 0.5, 2)],
    [("equalize", 0.2, None), ("auto_contrast", 0.6, None)],
    [("equalize", 0.2, None), ("equalize", 0.6, None)],
    [("color", 0.9, 9), ("equalize", 0.6, None)],
    [("auto_contrast", 0.8, None), ("solarize", 0.2, 8)],
    [("brightness", 0.1, 3), ("color", 0.7, 0)],
    [("solarize", 0.4, 5), ("auto_contrast", 0.9, None)],
    [("translate_y", 0.9, 9), ("translate_y", 0.7, 9)],
    [("auto_contrast", 0.9, None), ("solarize", 0.8, 3)],
    [("equalize", 0.8, None), ("invert", 0.1, None)],
    [("translate_y", 0.7, 9), ("auto_contrast", 0.9, None)],
]

_SVHN = [
    [("shear_x", 0.9, 4), ("invert", 0.2, None)],
    [("shear_y", 0.9, 8), ("invert", 0.7, None)],
    [("equalize", 0.6, None), ("solarize", 0.6, 6)],
    [("invert", 0.9, None), ("equalize", 0.6, None)],
    [("equalize", 0.6, None), ("rotate", 0.9, 3)],
    [("shear_x", 0.9, 4), ("auto_contrast", 0.8, None)],
    [("shear_y", 0.9, 8), ("invert", 0.4, None)],
    [("shear_y", 0.9, 5), ("solarize", 0.2, 6)],
    [("invert", 0.9, None), ("auto_contrast", 0.8, None)],
    [("equalize", 0.6, None), ("rotate", 0.9, 3)],
    [("shear_x", 0.9, 4), ("solarize", 0.3, 3)],
    [("shear_y", 0.8, 8), ("invert", 0.7, None)],
    [("equalize", 0.9, None), ("translate_y", 0.6, 6)],
    [("invert", 0.9, None), ("equalize", 0.6, None)],
    [("contrast", 0.3, 3), ("rotate", 0.8, 4)],
    [("invert", 0.8, None)],
    [("shear_y", 0.7, 6), ("solarize", 0.4, 8)],
    [("invert", 0.6, None), ("rotate", 0.8, 4)],
    [("shear_y", 0.3, 7), ("translate_x", 0.9, 3)],
    [("shear_x", 0.1, 6), ("invert", 0.6, None)],
    [("solarize", 0.7, 2), ("translate_y", 0.6, 7)],
    [("shear_y", 0.8, 4), ("invert", 0.8, None)],
    [("shear_x", 0.7, 9), ("translate_y", 0.8, 3)],
    [("shear_y", 0.8, 5), ("auto_contrast", 0.7, None)],
    [("shear_x", 0.7, 2), ("invert", 0.1, None)],
]

_REDUCED_IMAGE_NET = [
    [("posterize", 0.4, 8), ("rotate", 0.6, 9)],
    [("solarize", 0.6, 5), ("auto_contrast", 0.6, None)],
    [("equalize", 0.8, None), ("equalize", 0.6, None)],
    [("posterize", 0.6, 7), ("posterize", 0.6, 6)],
    [("equalize", 0.4, None), ("solarize", 0.2, 4)],
    [("equalize", 0.4, None), ("rotate", 0.8, 8)],
    [("solarize", 0.6, 3), ("equalize", 0.6, None)],
    [("posterize", 0.8, 5), ("equalize", 1.0, None)],
    [("rotate", 0.2, 3), ("solarize", 0.6, 8)],
    [("equalize", 0.6, None), ("posterize", 0.4, 6)],
    [("rotate", 0.8, 8), ("color", 0.4, 0)],
    [("rotate", 0.4, 9), ("equalize", 0.6, None)],
    [("equalize", 0.8, None)],
    [("invert", 0.6, None), ("equalize", 1.0, None)],
    [("color", 0.6, 4), ("contrast", 1.0, 8)],
    [("rotate", 0.8, 8), ("color", 1.0, 2)],
    [("color", 0.8, 8), ("solarize", 0.8, 7)],
    [("sharpness", 0.4, 7), ("invert", 0.6, None)],
    [("shear_x", 0.6, 5), ("equalize", 1.0, None)],
    [("color", 0.4, 0), ("equalize", 0.6, None)],
    [("equalize", 0.4, None), ("solarize", 0.2, 4)],
    [("solarize", 0.6, 5), ("auto_contrast", 0.6, None)],
    [("invert", 0.6, None), ("equalize", 1.0, None)],
    [("color", 0.6, 4), ("contrast", 1.0, 8)],
    [("equalize", 0.8, None), ("equalize", 0.6, None)],
]


def get_image_net_policy(use_shape: bool = False, max_translate_abs: int | None = None,
                         max_translate_rel: float | None = None) -> Policy:
    """The policy AutoAugment found for ImageNet (25 sub-policies of 2 steps, 11 magnitude bins).

    ``use_shape``: translations relative to the image shape (up to ``max_translate_rel``, default 1) instead of
    in pixels (up to ``max_translate_abs``, default 250); the call then needs ``shape``.
    """
    translations = _get_translations(use_shape, 250, 1.0, max_translate_abs, max_translate_rel)
    return _policy("ImageNetPolicy", _IMAGE_NET, translations)


def get_reduced_cifar10_policy(use_shape: bool = False, max_translate_abs: int | None = None,
                               max_translate_rel: float | None = None) -> Policy:
    """The policy AutoAugment found on reduced CIFAR-10 (translations as in :func:`get_image_net_policy`)."""
    translations = _get_translations(use_shape, 250, 1.0, max_translate_abs, max_translate_rel)
    return _policy("ReducedCifar10Policy", _REDUCED_CIFAR10, translations)


def get_svhn_policy(use_shape: bool = False, max_translate_abs: int | None = None,
                    max_translate_rel: float | None = None) -> Policy:
    """The policy AutoAugment found on SVHN (translations as in :func:`get_image_net_policy`)."""
    translations = _get_translations(use_shape, 250, 1.0, max_translate_abs, max_translate_rel)
    return _policy("SvhnPolicy", _SVHN, translations)


def get_reduced_image_net_policy() -> Policy:
    """The policy AutoAugment found on reduced ImageNet (no translations)."""
    return _policy("ReducedImageNetPolicy", _REDUCED_IMAGE_NET)
