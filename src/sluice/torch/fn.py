"""Operators for PyTorch users (DALI's ``nvidia.dali.plugin.pytorch.fn``): ``torch_python_function``, a Python
function on torch tensors, on the CPU or on the pipeline's CUDA stream (:mod:`sluice.ops.python_function`).

Example::

    from sluice.torch import fn as torch_fn

    images = torch_fn.torch_python_function(images, function=lambda xs: torch.stack(xs).flip(-1),
                                            batch_processing=True, device="gpu")
"""

from sluice.fn import torch_python_function

__all__ = ["torch_python_function"]
