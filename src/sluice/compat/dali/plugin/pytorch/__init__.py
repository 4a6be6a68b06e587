"""``nvidia.dali.plugin.pytorch`` on sluice: ``DALIGenericIterator``, ``DALIClassificationIterator``,
``LastBatchPolicy``, ``feed_ndarray`` and ``to_torch_type``; ``experimental.proxy`` holds the DataLoader proxy.
``DALIRaggedIterator`` (dense and list outputs). ``fn.torch_python_function`` and the class ``TorchPythonFunction``
run a function on torch tensors (:mod:`sluice.ops.python_function`).

Example::

    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
    loader = DALIGenericIterator(pipe, ["data", "label"], reader_name="Reader",
                                 last_batch_policy=LastBatchPolicy.PARTIAL)
"""

from __future__ import annotations

import sys as _sys
from typing import Any

import torch

from sluice import types as _types
from sluice.compat._missing import missing as _missing
from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.compat._build import function_first as _function_first
from sluice.compat._legacy import make_class as _make_class
from sluice.compat.dali.plugin.pytorch import experimental, fn
from sluice.errors import ArgumentError
from sluice.pipeline.batch import Batch
from sluice.schema import get_schema as _get_schema
from sluice.torch.iterator import DALIClassificationIterator, DALIGenericIterator, LastBatchPolicy

__all__ = [
    "DALIClassificationIterator",
    "DALIGenericIterator",
    "LastBatchPolicy",
    "TorchPythonFunction",
    "experimental",
    "feed_ndarray",
    "fn",
    "to_torch_type",
]

to_torch_type: dict[Any, torch.dtype] = {t: _types.to_torch_dtype(t) for t in _types.DALIDataType
                                         if t not in (_types.NO_TYPE, _types.STRING)}
"""DALI data type -> torch dtype."""

TorchPythonFunction = _function_first(_make_class(_get_schema("torch_python_function"), "TorchPythonFunction"))
TorchPythonFunction.__module__ = __name__


class DALIRaggedIterator(DALIGenericIterator):
    """DALI's iterator for outputs whose samples differ in shape: ``output_types`` gives, per output,
    ``DENSE_TAG`` (one tensor, the default) or ``SPARSE_LIST_TAG`` (a list of per-sample tensors).
    ``SPARSE_COO_TAG`` (torch sparse COO tensors) is not supported.

    Example::

        it = DALIRaggedIterator(pipe, ["boxes", "labels"], reader_name="Reader",
                                output_types=[DALIRaggedIterator.SPARSE_LIST_TAG, DALIRaggedIterator.DENSE_TAG])
    """

    DENSE_TAG = "dense"
    SPARSE_LIST_TAG = "sparse_list"
    SPARSE_COO_TAG = "sparse_coo"

    def __init__(self, pipelines: Any, output_map: Any, size: int = -1, reader_name: str | None = None,
                 output_types: Any = None, auto_reset: Any = False, fill_last_batch: bool | None = None,
                 dynamic_shape: bool = False, last_batch_padded: bool = False,
                 last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL, prepare_first_batch: bool = True):
        output_map = list(output_map)
        tags = list(output_types) if output_types is not None else [self.DENSE_TAG] * len(output_map)
        if len(tags) != len(output_map):
            raise ArgumentError(f"DALIRaggedIterator: output_types has {len(tags)} entries for {len(output_map)} "
                                "outputs")
        if self.SPARSE_COO_TAG in tags:
            _missing("DALIRaggedIterator output type SPARSE_COO_TAG", hint="Use SPARSE_LIST_TAG.")
        bad = sorted({t for t in tags if t not in (self.DENSE_TAG, self.SPARSE_LIST_TAG)})
        if bad:
            raise ArgumentError(f"DALIRaggedIterator: invalid output_types {bad}. Supported values are "
                                "DENSE_TAG, SPARSE_LIST_TAG.")
        super().__init__(pipelines, output_map, size=size, reader_name=reader_name, auto_reset=auto_reset,
                         fill_last_batch=fill_last_batch, dynamic_shape=dynamic_shape,
                         last_batch_padded=last_batch_padded, last_batch_policy=last_batch_policy,
                         prepare_first_batch=prepare_first_batch,
                         ragged_outputs=[n for n, t in zip(output_map, tags) if t == self.SPARSE_LIST_TAG])



def _as_stream(cuda_stream: Any, device: torch.device) -> torch.cuda.Stream | None:
    if cuda_stream is None:
        return None
    if isinstance(cuda_stream, torch.cuda.Stream):
        return cuda_stream
    if isinstance(cuda_stream, int):
        return torch.cuda.ExternalStream(cuda_stream, device=device)
    pointer = getattr(cuda_stream, "cuda_stream", None) or getattr(cuda_stream, "ptr", None)
    if isinstance(pointer, int):
        return torch.cuda.ExternalStream(pointer, device=device)
    raise ArgumentError(f"feed_ndarray: cuda_stream must be a torch.cuda.Stream, a stream pointer (int) or None, "
                        f"got {type(cuda_stream).__name__}")


def feed_ndarray(dali_tensor: Batch | torch.Tensor, arr: torch.Tensor, cuda_stream: Any = None) -> torch.Tensor:
    """Copy a dense batch (or one sample) into the torch tensor ``arr``, which must have its shape and dtype;
    returns ``arr``. GPU copies are ordered on ``cuda_stream`` (a torch stream or a raw ``cudaStream_t``;
    default: the current stream) and do not block the host.

    Example::

        images, labels = pipe.run()
        out = torch.empty(images.as_tensor().shape, dtype=torch.uint8, device="cuda")
        feed_ndarray(images, out, cuda_stream=torch.cuda.current_stream())
    """
    if isinstance(dali_tensor, Batch):
        source = dali_tensor.as_tensor()
    elif isinstance(dali_tensor, torch.Tensor):
        source = dali_tensor
    else:
        raise ArgumentError(f"feed_ndarray: expected a pipeline output (Batch) or a tensor, got "
                            f"{type(dali_tensor).__name__}")
    if source.dtype != arr.dtype:
        raise ArgumentError(f"feed_ndarray: the element type of the pipeline output doesn't match the target "
                            f"tensor: {source.dtype} vs {arr.dtype}")
    if tuple(source.shape) != tuple(arr.shape):
        raise ArgumentError(f"feed_ndarray: shapes differ: pipeline output {tuple(source.shape)} vs target "
                            f"{tuple(arr.shape)}")
    device = arr.device if arr.is_cuda else source.device
    stream = _as_stream(cuda_stream, device) if (arr.is_cuda or source.is_cuda) else None
    if stream is None:
        arr.copy_(source, non_blocking=arr.is_cuda and source.is_cuda)
    else:
        with torch.cuda.stream(stream):
            arr.copy_(source, non_blocking=True)
    return arr


__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
