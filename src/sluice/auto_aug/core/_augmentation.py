"""The :class:`Augmentation` wrapper (what ``@augmentation`` makes) and signed magnitude bins.

An augmentation is a function ``op(samples, parameter, **extra)`` of DataNodes plus the rule that turns a
magnitude bin into its parameter: ``magnitudes = linspace(mag_range[0], mag_range[1], num_magnitude_bins)``
(float32; or ``mag_range`` itself when it is an array), the bin's magnitude, negated for the samples whose random
sign is 1 when ``randomly_negate``, then ``mag_to_param``. The parameters of every bin (and sign) are computed
once, when the pipeline is defined, into a constant batch; each sample's parameter is then the row its bin picks
(``params[bin]``), so nothing is computed per iteration but one look-up.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from sluice import fn
from sluice import types
from sluice.auto_aug.core._args import MissingArgException, accepted_kwargs, missing_kwargs, num_positional_args
from sluice.pipeline.graph import DataNode, constant_array
from sluice.pipeline.graph import make_node
from sluice.schema import get_schema

__all__ = ["Augmentation", "signed_bin", "constant", "table_row"]


class _Unset:
    """Marks an argument of :meth:`Augmentation.augmentation` that was not given (None is a valid value)."""


def constant(value: Any, device: str = "cpu") -> DataNode:
    """A constant batch of ``value`` (64-bit types made 32-bit, as DALI's ``types.Constant``) on ``device``."""
    return fn.constant(value=constant_array(value), device=device)


def table_row(table: Any, index: int | DataNode, device: str = "cpu") -> DataNode:
    """``constant(table, device)[index]``: row ``index[i]`` of ``table`` for sample ``i`` (``index`` a CPU batch of
    integers, or one integer), made by one operator whose only input is the index."""
    if isinstance(index, int):
        return constant(np.asarray(table)[index], device)
    return make_node(get_schema("_table_row"), [], {"table": constant_array(table), "index": index, "device": device})


class _SignedMagnitudeBin:
    """A magnitude bin together with a random sign per sample (0: keep the magnitude, 1: negate it), and the index
    ``2 * bin + sign`` into the table of signed magnitudes ``[m0, -m0, m1, -m1, ...]``."""

    def __init__(self, magnitude_bin: int | DataNode, random_sign: DataNode, signed_magnitude_idx: Any):
        self._magnitude_bin = magnitude_bin
        self._random_sign = random_sign
        self._signed_magnitude_idx = signed_magnitude_idx

    def __getitem__(self, idx: int) -> _SignedMagnitudeBin:
        """The bins of one position of a sequence of augmentations (bins and signs drawn with ``shape=(n,)``)."""
        bin_ = self._magnitude_bin if isinstance(self._magnitude_bin, int) else self._magnitude_bin[idx]
        return type(self)(bin_, self._random_sign[idx], self._signed_magnitude_idx[idx])

    @classmethod
    def create_from_bin(cls, magnitude_bin: int | DataNode, random_sign: DataNode | None = None,
                        seed: int | None = None, shape: tuple[int, ...] | None = None) -> _SignedMagnitudeBin:
        if isinstance(magnitude_bin, bool) or not isinstance(magnitude_bin, (int, DataNode)):
            raise TypeError(f"The magnitude_bin must be an int or a DataNode of ints from [0, num_magnitude_bins - 1], "
                            f"got {magnitude_bin!r}.")
        if random_sign is not None and (seed is not None or shape is not None):
            raise ValueError("Give random_sign, or seed and shape to draw it, not both.")
        if random_sign is None:
            random_sign = fn.random.uniform(values=[0, 1], dtype=types.INT32, seed=seed, shape=shape)
        # made here, where the bins are made: used inside branches, it is split there, not computed per branch
        return cls(magnitude_bin, random_sign, 2 * magnitude_bin + random_sign)

    @staticmethod
    def _remap_to_signed_magnitudes(magnitudes: Any) -> np.ndarray:
        """``[m0, -m0, m1, -m1, ...]``: the magnitude of signed index ``k`` is ``magnitudes[k // 2]``, negated for odd
        ``k``."""
        mags = np.asarray(magnitudes)
        return np.stack([mags, -mags], axis=1).reshape(-1, *mags.shape[1:])

    @property
    def bin(self) -> int | DataNode:
        return self._magnitude_bin

    @property
    def random_sign(self) -> DataNode:
        return self._random_sign

    @property
    def signed_magnitude_idx(self) -> Any:
        return self._signed_magnitude_idx


def signed_bin(magnitude_bin: int | DataNode, random_sign: DataNode | None = None, seed: int | None = None,
               shape: tuple[int, ...] | None = None) -> _SignedMagnitudeBin:
    """The magnitude bin with a random sign per sample, for augmentations declared ``randomly_negate=True``.

    Drawing the signs once, before the batch is split among augmentations, costs one random operator for the
    whole batch instead of one per augmentation. ``random_sign``: a batch of 0/1 (1 negates the magnitude);
    without it, it is drawn with ``seed`` (and ``shape``, for a sequence of augmentations per sample).

    Example::

        bins = signed_bin(fn.random.uniform(values=list(range(31)), dtype=types.INT32))
        images = select(augments, op_idx, images, magnitude_bin=bins, num_magnitude_bins=31)
    """
    return _SignedMagnitudeBin.create_from_bin(magnitude_bin, random_sign, seed, shape)


class Augmentation:
    """An operation usable by the automatic augmentations; made with :func:`~sluice.auto_aug.core.augmentation`.

    Calling it, ``aug(samples, magnitude_bin=bin, num_magnitude_bins=n, **kwargs)``, runs ``op(samples, param,
    **extra)`` with the parameter of the bin and the keyword arguments ``op`` names.
    """

    def __init__(self, op: Callable[..., DataNode], mag_range: tuple[float, float] | np.ndarray | None = None,
                 randomly_negate: bool | None = None, mag_to_param: Callable[[float], Any] | None = None,
                 param_device: str | None = None, name: str | None = None):
        self._op = op
        self._mag_range = mag_range
        self._randomly_negate = randomly_negate
        self._mag_to_param = mag_to_param
        self._param_device = param_device
        self._name = name
        if num_positional_args(op) < 2:
            raise TypeError(f"{op} takes {num_positional_args(op)} positional argument(s); a function decorated with "
                            "@augmentation takes at least two: the samples and the parameter. Error in: "
                            f"{self!r}.")

    def __repr__(self) -> str:
        params = [f"{k}={v!r}" for k, v in self._get_config().items() if v is not None]
        return f"Augmentation({', '.join([repr(self._op)] + params)})"

    # ---- the configuration ----------------------------------------------------------------------------------
    @property
    def op(self) -> Callable[..., DataNode]:
        return self._op

    @property
    def mag_range(self) -> tuple[float, float] | np.ndarray | None:
        return self._mag_range

    @property
    def mag_to_param(self) -> Callable[[float], Any]:
        return self._mag_to_param or np.array

    @property
    def randomly_negate(self) -> bool:
        return bool(self._randomly_negate)

    @property
    def param_device(self) -> str:
        return self._param_device or "cpu"

    @property
    def name(self) -> str:
        return self._name or self._op.__name__

    def _get_config(self) -> dict[str, Any]:
        return {"mag_range": self._mag_range, "mag_to_param": self._mag_to_param,
                "randomly_negate": self._randomly_negate, "param_device": self._param_device, "name": self._name}

    def augmentation(self, mag_range: Any = _Unset, randomly_negate: Any = _Unset, mag_to_param: Any = _Unset,
                     param_device: Any = _Unset, name: Any = _Unset,
                     augmentation_cls: type[Augmentation] | None = None) -> Augmentation:
        """A copy of this augmentation (the same function) with the settings given changed.

        Example::

            strong_shear_x = augmentations.shear_x.augmentation(mag_range=(0, 0.5))
        """
        config = self._get_config()
        changes = {"mag_range": mag_range, "randomly_negate": randomly_negate, "mag_to_param": mag_to_param,
                   "param_device": param_device, "name": name}
        config.update({k: v for k, v in changes.items() if v is not _Unset})
        return (augmentation_cls or type(self))(self._op, **config)

    # ---- the call -------------------------------------------------------------------------------------------
    def __call__(self, data: DataNode, *, magnitude_bin: int | DataNode | _SignedMagnitudeBin | None = None,
                 num_magnitude_bins: int | None = None, **kwargs: Any) -> DataNode:
        """``op(data, param, **kwargs that op names)``, with ``param`` the parameter of ``magnitude_bin`` (one of
        ``num_magnitude_bins``); None for augmentations without ``mag_range``."""
        device = self._param_device_for(data)
        param = self._get_param(magnitude_bin, num_magnitude_bins, device)
        missing = missing_kwargs(self._op, kwargs, 2)
        if missing:
            raise MissingArgException(f"The augmentation `{self.name}` needs the keyword argument(s) "
                                      f"{', '.join(missing)}, which the call does not give.", augmentation=self,
                                      missing_args=missing)
        return self._op(data, param, **accepted_kwargs(self._op, kwargs, 2))

    def _param_device_for(self, data: DataNode) -> str:
        if self.param_device == "auto":
            return getattr(data, "device", None) or "cpu"
        if self.param_device not in ("cpu", "gpu"):
            raise ValueError(f"Invalid param_device ({self.param_device!r}) of augmentation `{self.name}`. Supported "
                             "values are 'cpu', 'gpu', 'auto'.")
        return self.param_device

    def _magnitudes(self, num_magnitude_bins: int | None) -> np.ndarray | None:
        mag_range = self.mag_range
        if mag_range is None:
            return None
        if isinstance(mag_range, np.ndarray):
            if num_magnitude_bins is not None and len(mag_range) != num_magnitude_bins:
                raise ValueError(f"The augmentation `{self.name}` has {len(mag_range)} magnitudes (mag_range), but the "
                                 f"call gives num_magnitude_bins={num_magnitude_bins}.")
            return mag_range
        if num_magnitude_bins is None:
            raise ValueError(f"The augmentation `{self.name}` needs num_magnitude_bins (with the samples and the "
                             f"magnitude_bin) to compute its magnitudes. Error in augmentation: {self!r}.")
        if not hasattr(mag_range, "__len__") or len(mag_range) != 2:
            raise ValueError(f"The mag_range of augmentation `{self.name}` must be a (low, high) pair or an array of "
                             f"magnitudes, got {mag_range!r}.")
        return np.linspace(mag_range[0], mag_range[1], num_magnitude_bins, dtype=np.float32)

    def _param_of(self, magnitude: Any) -> np.ndarray:
        param = self.mag_to_param(magnitude)
        if _has_node(param):
            raise TypeError(f"The mag_to_param callback of augmentation `{self.name}` returned a DataNode; it must "
                            "return NumPy arrays (or values NumPy converts), computed once for every magnitude when "
                            f"the pipeline is defined. Move pipeline operators into the augmentation itself. Error in "
                            f"augmentation: {self!r}.")
        return np.array(param)

    def _params_of(self, magnitudes: Any) -> np.ndarray:
        params = [self._param_of(m) for m in magnitudes]
        for p, m in zip(params[1:], magnitudes[1:]):
            if p.shape != params[0].shape or p.dtype != params[0].dtype:
                raise ValueError(f"The mag_to_param callback of augmentation `{self.name}` must return arrays of one "
                                 f"shape and type for every magnitude: {params[0].shape} {params[0].dtype} for "
                                 f"{magnitudes[0]}, {p.shape} {p.dtype} for {m}. Error in augmentation: {self!r}.")
        return np.array(params)

    def _get_param(self, magnitude_bin: Any, num_magnitude_bins: int | None, device: str) -> DataNode | None:
        magnitudes = self._magnitudes(num_magnitude_bins)
        if magnitudes is None:
            return None
        if magnitude_bin is None:
            raise ValueError(f"The augmentation `{self.name}` has a mag_range, so its call needs magnitude_bin to pick "
                             f"the magnitude. Error in augmentation: {self!r}.")
        if self.randomly_negate:
            if not isinstance(magnitude_bin, _SignedMagnitudeBin):
                warnings.warn(f"The augmentation `{self.name}` is declared with randomly_negate=True but was given an "
                              "unsigned magnitude_bin; it draws the random signs itself. Where the batch is split "
                              "among augmentations, draw them once before the split: pass signed_bin(magnitude_bin).",
                              Warning, stacklevel=2)
                magnitude_bin = signed_bin(magnitude_bin)
            if isinstance(magnitude_bin.bin, int):  # one magnitude, two signs: the random sign picks
                table, index = _SignedMagnitudeBin._remap_to_signed_magnitudes(magnitudes[[magnitude_bin.bin]]), \
                    magnitude_bin.random_sign
            else:
                table, index = _SignedMagnitudeBin._remap_to_signed_magnitudes(magnitudes), \
                    magnitude_bin.signed_magnitude_idx
            return table_row(self._params_of(table), index, device)
        index = magnitude_bin.bin if isinstance(magnitude_bin, _SignedMagnitudeBin) else magnitude_bin
        if isinstance(index, int):
            return constant(self._param_of(magnitudes[index]), device)
        return table_row(self._params_of(magnitudes), index, device)


def _has_node(obj: Any) -> bool:
    if isinstance(obj, (tuple, list)):
        return any(_has_node(x) for x in obj)
    return isinstance(obj, DataNode)
