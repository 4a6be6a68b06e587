"""``nvidia.dali.backend`` on sluice: the tensor types (see :mod:`sluice.compat.dali.tensors`) and the memory
calls that only tune DALI's allocators (accepted: sluice allocates through PyTorch's caching allocator).
DALI's other backend functions raise NotImplementedError.

Example::

    from nvidia.dali.backend import TensorListCPU, ReleaseUnusedMemory   # after sluice.compat.install()
"""

from __future__ import annotations

import sys as _sys

import torch

from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.compat.dali.tensors import TensorCPU, TensorGPU, TensorListCPU, TensorListGPU

__all__ = [
    "PreallocateDeviceMemory",
    "PreallocatePinnedMemory",
    "ReleaseUnusedMemory",
    "TensorCPU",
    "TensorGPU",
    "TensorListCPU",
    "TensorListGPU",
]


def ReleaseUnusedMemory() -> None:
    """Return cached, unused GPU memory to the driver (``torch.cuda.empty_cache()``)."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def PreallocateDeviceMemory(bytes: int, device_id: int) -> None:
    """Accepted without effect: PyTorch's caching allocator grows as needed."""


def PreallocatePinnedMemory(bytes: int) -> None:
    """Accepted without effect: pinned buffers are allocated as needed."""


__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
