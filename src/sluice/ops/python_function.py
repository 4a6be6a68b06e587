"""Python operators: ``fn.python_function``, ``fn.dl_tensor_python_function`` and ``fn.torch_python_function``
(DALI's ``nvidia.dali.plugin.pytorch.fn.torch_python_function``, also ``sluice.torch.fn``).

The user's function runs in the pipeline's own stage thread (the CPU stage for ``device='cpu'``, the device
stage, with the pipeline's CUDA stream current, for ``device='gpu'``), once per sample in order, or once per
batch with ``batch_processing=True``. What it gets:

=============================  =====================================  ==========================================
operator                       CPU                                    GPU
=============================  =====================================  ==========================================
``python_function``            NumPy arrays (views, no copy)          torch CUDA tensors (DALI gives CuPy arrays;
                                                                      ``cupy.asarray(t)`` wraps one without copy)
``torch_python_function``      torch tensors                          torch CUDA tensors
``dl_tensor_python_function``  DLPack capsules                        DLPack capsules
=============================  =====================================  ==========================================

With ``batch_processing=True`` each input comes as a list of its samples (views of the batch, no copy) and the
function returns, per output, a list of samples or one array/tensor whose first dimension is the batch (kept as
it is, no copy). It may return NumPy arrays, torch tensors, DLPack capsules, or anything with
``__cuda_array_interface__`` / ``__dlpack__`` / ``__array__``; results on the wrong device are moved. GPU work
goes on the pipeline's stream (for CuPy, when it is imported, that stream is made CuPy's current one during the
call), so no synchronisation is needed; ``dl_tensor_python_function(synchronize_stream=True)`` (its default, as
in DALI) waits for the stream before the call, for libraries that use streams of their own.

These operators are never pruned (DALI's ``preserve``), keep their call order (the function may keep state), and
need none of DALI's ``exec_async=False, exec_pipelined=False``. An exception raised by the function reaches the
caller naming the operator and, per sample, the sample and its file.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.utils.dlpack

from sluice.pipeline.batch import Batch, to_tensor
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema
from sluice.errors import SampleError

__all__ = ["PYTHON_FUNCTION", "DL_TENSOR_PYTHON_FUNCTION", "TORCH_PYTHON_FUNCTION"]


def _args(batch_processing: bool, extra: tuple[Arg, ...] = ()) -> list[Arg]:
    return [
        Arg("function", object, REQUIRED, "The Python callable: it takes one value per input and returns one per "
            "output (a tuple for several)."),
        Arg("num_outputs", int, 1, "How many outputs the function returns (0: none; it runs for its effects).",
            min=0),
        Arg("batch_processing", bool, batch_processing, "Call the function once per batch, with a list of "
            "samples per input, instead of once per sample."),
        Arg("output_layouts", "str_list", None, "Layout of each output (a shorter list leaves the rest without "
            "a layout)."),
        Arg("preserve", bool, True, "Run the operator even if its outputs are unused (always, as in DALI)."),
        Arg("seed", int, -1, "Accepted for compatibility with DALI (the function draws its own randomness)."),
        *extra,
    ]


def _layouts(args: dict[str, Any], layouts: list[str]) -> list[str]:
    return list(args["output_layouts"] or [])


def _common(name: str, doc: str, batch_processing: bool, extra: tuple[Arg, ...] = ()) -> OpSchema:
    return OpSchema(name, doc=doc, inputs=(0, 256), outputs=lambda args: args["num_outputs"],
                    devices=("cpu", "gpu"), args=_args(batch_processing, extra), output_layout=_layouts)


PYTHON_FUNCTION = _common(
    "python_function",
    doc="""Runs a Python function on the data: NumPy arrays on the CPU, torch CUDA tensors on the GPU.

    Per sample by default; with ``batch_processing=True`` once per batch, each input a list of samples. The
    function must not modify its inputs. What it gets and may return: the docstring of sluice.ops.python_function.

    Example::

        def brightness(image):
            return np.float32(image.mean())

        level = fn.python_function(images, function=brightness)
        flipped, mask = fn.python_function(images, function=lambda x: (x[:, ::-1], x > 128), num_outputs=2)
    """,
    batch_processing=False,
)

DL_TENSOR_PYTHON_FUNCTION = _common(
    "dl_tensor_python_function",
    doc="""Runs a Python function on DLPack capsules (one per sample), for any library that reads DLPack.

    Once per batch by default (``batch_processing=True``), each input a list of capsules; the function returns
    capsules or anything with ``__dlpack__`` (or arrays and tensors). ``synchronize_stream=True`` waits for the
    pipeline's CUDA stream before the call (libraries that use their own streams need the data ready).

    Example::

        def double(samples):
            return [torch.from_dlpack(s) * 2 for s in samples]

        doubled = fn.dl_tensor_python_function(data, function=double)
    """,
    batch_processing=True,
    extra=(Arg("synchronize_stream", bool, True, "Wait for the pipeline's CUDA stream before calling the function "
               "(GPU)."),),
)

TORCH_PYTHON_FUNCTION = _common(
    "torch_python_function",
    doc="""Runs a function on torch tensors, on the CPU or on the pipeline's CUDA stream (DALI's
    ``nvidia.dali.plugin.pytorch.fn.torch_python_function``; in sluice also ``sluice.torch.fn``).

    Per sample by default; with ``batch_processing=True`` once per batch, each input a list of tensors (views of
    the batch, no copy). Returning one tensor whose first dimension is the batch keeps it as the batch, with no
    copy: a torchvision v2 transform on a stacked batch runs as it would outside the pipeline.

    Example::

        from torchvision.transforms import v2

        flip = v2.RandomHorizontalFlip(p=1.0)
        images = torch_fn.torch_python_function(images, function=lambda xs: flip(torch.stack(xs)),
                                                batch_processing=True, device="gpu")
    """,
    batch_processing=False,
)


# ------------------------------------------------------------------------------------------------------------
# Conversions between batches and what the function sees
# ------------------------------------------------------------------------------------------------------------
def _numpy_view(sample: torch.Tensor) -> Any:
    return sample if sample.is_cuda else sample.numpy()


def _same(sample: torch.Tensor) -> Any:
    return sample


def _capsule(sample: torch.Tensor) -> Any:
    return torch.utils.dlpack.to_dlpack(sample)


_TO_FUNCTION: dict[str, Callable[[torch.Tensor], Any]] = {
    "python_function": _numpy_view, "torch_python_function": _same, "dl_tensor_python_function": _capsule}


def _tensor(value: Any) -> torch.Tensor:
    """A torch tensor of what the function returned (a DLPack capsule, an array, a tensor, ...)."""
    if type(value).__name__ == "PyCapsule":
        return torch.utils.dlpack.from_dlpack(value)
    return to_tensor(value)


def _on(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    if tensor.device == device:
        return tensor
    return tensor.to(device, non_blocking=device.type == "cuda")


def _batch(value: Any, device: torch.device, what: str) -> Batch:
    """One output of a batch call: a list of samples, or one array whose first dimension is the batch."""
    if isinstance(value, (list, tuple)):
        return _samples_batch([_on(_tensor(v), device) for v in value], what)
    whole = _on(_tensor(value), device)
    if whole.dim() == 0:
        raise ValueError(f"{what} is a scalar; return a list of samples, or an array whose first dimension is the "
                         "batch")
    return Batch.from_dense(whole)


def _samples_batch(samples: list[torch.Tensor], what: str) -> Batch:
    """A list of samples as a batch: dense (no copy) where they are the rows of one contiguous tensor, as
    ``list(batch_tensor)`` returns them (DALI's documented batch function ends so), else a list batch."""
    if not samples:
        return Batch(samples)
    first = samples[0]
    ptr, offset, size = first.untyped_storage().data_ptr(), first.storage_offset(), first.numel()
    rows = first.is_contiguous()
    for i, s in enumerate(samples):
        if s.dtype != first.dtype or s.dim() != first.dim():
            raise ValueError(f"{what}: sample {i} is {s.dtype} with {s.dim()} dimensions, sample 0 "
                             f"{first.dtype} with {first.dim()}; the samples of an output must share their "
                             "type and number of dimensions")
        rows = rows and (s.shape == first.shape and s.storage_offset() == offset + i * size and s.is_contiguous()
                         and s.untyped_storage().data_ptr() == ptr)
    if rows and first.device == samples[-1].device:
        return Batch.from_dense(first.as_strided((len(samples), *first.shape), (size, *first.stride()), offset))
    return Batch(samples)


def _split_outputs(result: Any, num_outputs: int) -> tuple[Any, ...]:
    """The function's result as a tuple of ``num_outputs`` values, checked as DALI checks it."""
    if num_outputs == 0:
        return ()
    if num_outputs == 1:
        if isinstance(result, tuple):
            if len(result) != 1:
                raise ValueError(f"the function returned a tuple of {len(result)} values, but num_outputs=1")
            return result
        return (result,)
    if not isinstance(result, tuple):
        raise TypeError(f"the function of an operator with num_outputs={num_outputs} must return a tuple, got "
                        f"{type(result).__name__}")
    if len(result) != num_outputs:
        raise ValueError(f"the function returned {len(result)} outputs, but num_outputs={num_outputs}")
    return result


@contextlib.contextmanager
def _gpu_call(ctx: BatchContext, synchronize: bool):
    """Around a GPU call: the pipeline's stream is torch's current one already (the device stage); CuPy, when the
    program imported it, gets it as its current stream too; ``synchronize`` waits for it first."""
    stream = torch.cuda.current_stream(ctx.device)
    if synchronize:
        stream.synchronize()
    cupy = sys.modules.get("cupy")
    if cupy is None:
        yield
        return
    with cupy.cuda.ExternalStream(stream.cuda_stream):
        yield


def _run(ctx: BatchContext, inputs: tuple[Batch, ...], args: BatchArgs) -> tuple[Batch, ...]:
    function = args.const("function")
    if not callable(function):
        raise TypeError(f"function must be callable, got {type(function).__name__}")
    num_outputs = args.const("num_outputs")
    to_function = _TO_FUNCTION[ctx.op_name]
    device = ctx.device
    on_gpu = device.type == "cuda"
    guard = _gpu_call(ctx, bool(args.const("synchronize_stream")) if "synchronize_stream" in args else False) \
        if on_gpu else contextlib.nullcontext()
    n = len(inputs[0]) if inputs else ctx.batch_size
    if inputs and n == 0:  # a branch of an `if` that got no samples: nothing to call the function on
        return tuple(Batch([]) for _ in range(num_outputs))
    if args.const("batch_processing"):
        columns = [[to_function(s) for s in batch.samples] for batch in inputs]
        with guard:
            outputs = _split_outputs(function(*columns), num_outputs)
        out = tuple(_batch(v, device, f"output {k}") for k, v in enumerate(outputs))
        for k, batch in enumerate(out):
            if inputs and len(batch) != n:
                raise ValueError(f"output {k} has {len(batch)} samples for a batch of {n}")
        return out
    per_output: list[list[torch.Tensor]] = [[] for _ in range(num_outputs)]
    with guard:
        for i in range(n):
            try:
                values = _split_outputs(function(*(to_function(batch[i]) for batch in inputs)), num_outputs)
                for k, v in enumerate(values):
                    per_output[k].append(_on(_tensor(v), device))
            except Exception as e:  # noqa: BLE001 - re-raised naming the sample
                raise SampleError(i, ctx.source_info[i] if i < len(ctx.source_info) else "", e) from e
    return tuple(_samples_batch(samples, f"output {k}") for k, samples in enumerate(per_output))


for _schema in (PYTHON_FUNCTION, DL_TENSOR_PYTHON_FUNCTION, TORCH_PYTHON_FUNCTION):
    @_schema.batch_kernel("cpu")
    @_schema.batch_kernel("gpu")
    def _python_kernel(ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> tuple[Batch, ...]:
        return _run(ctx, inputs, args)
