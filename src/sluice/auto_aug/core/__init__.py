"""The building blocks of automatic augmentations: the ``@augmentation`` decorator, :class:`Policy`, per-sample
:func:`select` and :func:`signed_bin` (as DALI's ``nvidia.dali.auto_aug.core``)."""

from sluice.auto_aug.core._augmentation import Augmentation as _Augmentation
from sluice.auto_aug.core._augmentation import signed_bin
from sluice.auto_aug.core._select import select
from sluice.auto_aug.core.decorator import augmentation
from sluice.auto_aug.core.policy import Policy

__all__ = ["signed_bin", "augmentation", "select", "Policy", "_Augmentation"]
