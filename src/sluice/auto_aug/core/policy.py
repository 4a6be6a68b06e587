"""An AutoAugment policy: sub-policies of (augmentation, probability, magnitude bin) steps."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from sluice.auto_aug.core._augmentation import Augmentation

__all__ = ["Policy"]

_Step = tuple[Augmentation, float, "int | None"]


class Policy:
    """An augmentation policy as in AutoAugment (https://arxiv.org/abs/1805.09501), for
    :func:`~sluice.auto_aug.auto_augment.apply_auto_augment`.

    Each sample gets one of the ``sub_policies``, picked uniformly at random; its steps then run in order, each
    ``(augmentation, probability, magnitude_bin)`` applying ``augmentation`` at ``magnitude_bin`` (one of
    ``num_magnitude_bins``; None for augmentations without magnitudes) with ``probability``.

    Example::

        policy = Policy("mine", num_magnitude_bins=11, sub_policies=[
            [(augmentations.rotate, 0.8, 7), (augmentations.equalize, 0.5, None)],
            [(augmentations.solarize, 0.6, 4)],
        ])
        images = auto_augment.apply_auto_augment(policy, images)
    """

    def __init__(self, name: str, num_magnitude_bins: int, sub_policies: Sequence[Sequence[_Step]]):
        self.name = name
        self.num_magnitude_bins = num_magnitude_bins
        if isinstance(num_magnitude_bins, bool) or not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 1:
            raise ValueError(f"num_magnitude_bins must be a positive integer, got {num_magnitude_bins!r}.")
        if not isinstance(sub_policies, (list, tuple)):
            raise TypeError(f"sub_policies must be a list or tuple of sub-policies, got {type(sub_policies).__name__}.")
        for sub_policy in sub_policies:
            if not isinstance(sub_policy, (list, tuple)):
                raise TypeError(f"Each sub-policy must be a list or tuple of steps, got {sub_policy!r}.")
            for step in sub_policy:
                self._check_step(step)
        self.sub_policies = _with_unique_names(sub_policies)

    def _check_step(self, step: object) -> None:
        if not isinstance(step, (list, tuple)) or len(step) != 3:
            raise TypeError(f"Each step of a sub-policy is an (augmentation, probability, magnitude_bin) triple, got "
                            f"{step!r}.")
        aug, p, mag = step
        if not isinstance(aug, Augmentation):
            raise TypeError(f"Each step's augmentation must be an Augmentation, got {aug!r}. Was @augmentation "
                            "forgotten?")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise ValueError(f"The probability of a step must be a number in [0, 1], got {p!r} for `{aug.name}`.")
        if p == 0:
            warnings.warn(f"The augmentation `{aug.name}` has probability 0 in a sub-policy of policy "
                          f"`{self.name}`.", stacklevel=3)
        if mag is None:
            if aug.mag_range is not None:
                raise ValueError(f"The augmentation `{aug.name}` has a mag_range, so its step in policy `{self.name}` "
                                 "needs a magnitude bin, not None.")
            return
        if aug.mag_range is None:
            warnings.warn(f"The magnitude bin {mag} of `{aug.name}` in policy `{self.name}` is ignored: the "
                          "augmentation takes no magnitude (it has no mag_range). Give None instead.", stacklevel=3)
        if isinstance(mag, bool) or not isinstance(mag, int) or not 0 <= mag < self.num_magnitude_bins:
            raise ValueError(f"The magnitude bin of a step must be an integer in [0, {self.num_magnitude_bins - 1}], "
                             f"got {mag!r} for `{aug.name}`.")

    @property
    def augmentations(self) -> dict[str, Augmentation]:
        """The augmentations the policy uses, by name (sorted)."""
        augs = {aug for sub_policy in self.sub_policies for aug, _, _ in sub_policy}
        return {aug.name: aug for aug in sorted(augs, key=lambda a: a.name)}

    def __repr__(self) -> str:
        sep = ",\n\t"
        subs = sep.join(repr([(aug.name, p, mag) for aug, p, mag in sub]) for sub in self.sub_policies)
        augs = sep.join(f"'{name}': {aug!r}" for name, aug in self.augmentations.items())
        subs, augs = ("\n\t" + subs if subs else ""), ("\n\t" + augs if augs else "")
        return (f"Policy(name={self.name!r}, num_magnitude_bins={self.num_magnitude_bins!r}, "
                f"sub_policies=[{subs}], augmentations={{{augs}}})")


def _with_unique_names(sub_policies: Sequence[Sequence[_Step]]) -> tuple[tuple[_Step, ...], ...]:
    """The sub-policies as tuples; where two different augmentations share a name, every augmentation is renamed
    ``<k>__<name>`` (k: the order of first use) so that the policy reads unambiguously."""
    order: list[Augmentation] = []
    for sub_policy in sub_policies:
        for aug, _, _ in sub_policy:
            if aug not in order:
                order.append(aug)
    if len({aug.name for aug in order}) == len(order):
        return tuple(tuple(sub) for sub in sub_policies)
    width = len(str(len(order) - 1))
    renamed = {aug: aug.augmentation(name=f"{str(k).zfill(width)}__{aug.name}") for k, aug in enumerate(order)}
    return tuple(tuple((renamed[aug], p, mag) for aug, p, mag in sub) for sub in sub_policies)
