"""The ``@augmentation`` decorator: a function of DataNodes becomes an :class:`Augmentation`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from sluice.auto_aug.core._augmentation import Augmentation
from sluice.pipeline.graph import DataNode

__all__ = ["augmentation"]


def augmentation(function: Callable[..., DataNode] | None = None, *,
                 mag_range: tuple[float, float] | np.ndarray | None = None, randomly_negate: bool | None = None,
                 mag_to_param: Callable[[float], Any] | None = None, param_device: str | None = None,
                 name: str | None = None, augmentation_cls: type[Augmentation] | None = None) -> Any:
    """Turn ``function(samples, parameter, **extra)``, written with pipeline operators, into an augmentation that
    the automatic augmentations (AutoAugment, RandAugment, TrivialAugment) can pick per sample.

    The augmentation is called with a magnitude bin instead of the parameter; the parameter is
    ``mag_to_param(magnitudes[bin] * (-1) ** sign)`` with ``magnitudes = linspace(*mag_range, num_magnitude_bins)``
    (or ``mag_range`` itself when it is an array) and ``sign`` a random 0/1 per sample when ``randomly_negate``.
    Without ``mag_range`` the parameter is None. ``mag_to_param`` must return NumPy data of one shape and type for
    every magnitude: the parameters of all bins are computed once and kept on ``param_device`` (``"cpu"``, the
    default, ``"gpu"``, or ``"auto"``: where the samples are). ``name`` defaults to the function's name.

    Example::

        @augmentation(mag_range=(0, 0.5), randomly_negate=True)
        def shift_hue(images, hue):
            return fn.hue(images, hue=hue * 180)

        images = trivial_augment.apply_trivial_augment([shift_hue, augmentations.equalize], images)
    """

    def decorate(fun: Callable[..., DataNode]) -> Augmentation:
        return (augmentation_cls or Augmentation)(fun, mag_range=mag_range, randomly_negate=randomly_negate,
                                                  mag_to_param=mag_to_param, param_device=param_device, name=name)

    if function is None:
        return decorate
    if isinstance(function, Augmentation):
        raise TypeError(f"@augmentation was applied to `{function.name}`, which is already an augmentation. Call "
                        f"`{function.name}.augmentation(...)` to change its settings, or decorate "
                        f"`{function.name}.op`. Error in augmentation: {function!r}.")
    if not callable(function):
        raise TypeError(f"@augmentation decorates functions; got {function!r}.")
    return decorate(function)
