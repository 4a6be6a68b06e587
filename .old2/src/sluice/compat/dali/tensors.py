"""``nvidia.dali.tensors`` on sluice: a pipeline's outputs are :class:`sluice.Batch` objects, which have
DALI's TensorList methods (``at``, ``as_tensor``, ``as_cpu``, ``as_array``, ``layout()``, ``shape()``,
``is_dense_tensor()``); samples are torch tensors.

``TensorListCPU`` / ``TensorListGPU`` are checks and constructors, not classes of their own:
``isinstance(out, TensorListGPU)`` is true for a Batch on the GPU, and ``TensorListCPU(array, "HWC")`` makes a
Batch. Likewise ``TensorCPU`` / ``TensorGPU`` for single samples (torch tensors).

Example::

    images, labels = pipe.run()
    assert isinstance(images, TensorListGPU)
    first = images.as_cpu().at(0)          # numpy array, HWC
"""

from __future__ import annotations

import sys as _sys
from typing import Any

import torch

from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.pipeline.batch import Batch, to_tensor

__all__ = ["TensorCPU", "TensorGPU", "TensorListCPU", "TensorListGPU"]


class _DeviceKind(type):
    """isinstance() by what an object is (a Batch or a torch tensor) and where it lives."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if cls._sample:
            return isinstance(obj, torch.Tensor) and obj.is_cuda == (cls._device == "gpu")
        return isinstance(obj, Batch) and obj.device == cls._device

    def __subclasscheck__(cls, sub: type) -> bool:
        return isinstance(sub, _DeviceKind) and sub._device == cls._device and sub._sample == cls._sample


def _samples(data: Any) -> Batch:
    if isinstance(data, Batch):
        return data
    if isinstance(data, (list, tuple)):
        return Batch([to_tensor(x) for x in data])
    return Batch.from_dense(to_tensor(data))


class TensorListCPU(metaclass=_DeviceKind):
    """A batch in host memory: ``TensorListCPU(data, layout="")`` makes a :class:`sluice.Batch` of a list of
    samples or of one array whose first dimension is the batch."""

    _device, _sample = "cpu", False

    def __new__(cls, data: Any, layout: str | None = None) -> Batch:  # type: ignore[misc]
        batch = _samples(data).as_cpu()
        return batch.with_layout(layout or batch.layout())


class TensorListGPU(metaclass=_DeviceKind):
    """A batch in GPU memory: ``TensorListGPU(data, layout="")`` makes a :class:`sluice.Batch` on the current
    CUDA device."""

    _device, _sample = "gpu", False

    def __new__(cls, data: Any, layout: str | None = None) -> Batch:  # type: ignore[misc]
        batch = _samples(data).to("cuda")
        return batch.with_layout(layout or batch.layout())


class TensorCPU(metaclass=_DeviceKind):
    """One sample in host memory: a torch tensor (``TensorCPU(array)`` makes one)."""

    _device, _sample = "cpu", True

    def __new__(cls, data: Any, layout: str | None = None) -> torch.Tensor:  # type: ignore[misc]
        return to_tensor(data).cpu()


class TensorGPU(metaclass=_DeviceKind):
    """One sample in GPU memory: a CUDA torch tensor (``TensorGPU(array)`` makes one)."""

    _device, _sample = "gpu", True

    def __new__(cls, data: Any, layout: str | None = None) -> torch.Tensor:  # type: ignore[misc]
        return to_tensor(data).cuda()


__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
