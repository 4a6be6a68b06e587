"""The operators behind conditional execution (``pipeline_def(enable_conditionals=True)``, see
:mod:`sluice.pipeline.conditionals`): ``_conditional.split``, ``_conditional.merge``, ``_conditional.not_`` and
``_conditional.validate_logical``, as DALI names them.

``split(data, predicate)`` puts the samples whose predicate is true in its first output and the others in its
second, each in their original order; ``merge(true_part, false_part, predicate)`` puts them back where they came
from. The predicate is a CPU batch of one boolean (or integer) per sample. Unlike DALI, where the predicate is an
argument input, here it is the last positional input: ``merge`` gives a batch of ``len(predicate)`` samples made
of two smaller ones, and the executor checks argument inputs against the size of the first input.

On the GPU a dense batch is split with one gather per part and merged with one ``cat`` and one gather, the indices
crossing once through page-locked memory; a batch of samples of different shapes is split and merged as views,
with no copy at all (as DALI shares the samples).
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.pipeline.batch import Batch, host_empty
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SPLIT", "MERGE", "SPLIT_N", "MERGE_N", "NOT", "VALIDATE_LOGICAL", "predicate_mask", "part_index",
           "restriction_message"]

SPLIT = OpSchema(
    "_conditional.split",
    doc="""Splits a batch in two by a per-sample predicate: the samples whose predicate is true (first output)
    and the others (second output), each in their original order. Made by ``if`` statements on DataNodes.""",
    inputs=2,
    outputs=2,
    devices=("cpu", "gpu"),
    input_names=["input", "predicate"],
    args=[Arg("expression_name", str, "if", "The statement whose condition this is (for the error messages).",
              choices=("if", "and", "or", "not"))],
)

MERGE = OpSchema(
    "_conditional.merge",
    doc="""Merges the two parts made by ``_conditional.split`` back into one batch in the original order: sample
    ``i`` comes from the first input if ``predicate[i]`` is true, else from the second.""",
    inputs=3,
    devices=("cpu", "gpu"),
    input_names=["true_input", "false_input", "predicate"],
)

_NUM_PARTS = Arg("num_parts", int, 2, "How many parts (the branches of the choice).", min=1)

SPLIT_N = OpSchema(
    "_conditional.split_n",
    doc="""Splits a batch in ``num_parts`` by a per-sample index: output ``k`` holds the samples whose index is
    ``k``, in their original order (an index below 0 counts as 0, one above ``num_parts - 1`` as the last, as the
    tree of ``if`` statements it replaces would choose). Made by ``auto_aug``'s ``select``.""",
    inputs=2,
    outputs=lambda args: args["num_parts"],
    devices=("cpu", "gpu"),
    input_names=["input", "index"],
    args=[_NUM_PARTS],
)

MERGE_N = OpSchema(
    "_conditional.merge_n",
    doc="""Merges the ``num_parts`` parts made by ``_conditional.split_n`` back into one batch in the original
    order: sample ``i`` comes from part ``index[i]`` (the last input is the index).""",
    inputs=(2, 257),
    devices=("cpu", "gpu"),
    args=[_NUM_PARTS],
)

NOT = OpSchema(
    "_conditional.not_",
    doc="""Logical ``not`` of a batch of scalar booleans (Python ``not`` on a DataNode in a pipeline with
    ``enable_conditionals=True``).""",
    devices=("cpu",),
    output_layout="",
)

VALIDATE_LOGICAL = OpSchema(
    "_conditional.validate_logical",
    doc="""Passes a batch through as booleans, checking that it holds one boolean (or integer) per sample on the
    CPU, as the operands of ``and`` and ``or`` on DataNodes must.""",
    devices=("cpu",),
    args=[Arg("expression_name", str, "and", "The expression (for the error messages).", choices=("and", "or")),
          Arg("expression_side", str, "left", "Which operand (for the error messages).",
              choices=("left", "right"))],
)

_SUGGESTION = ("Compute a boolean per sample, e.g. with a comparison (`brightness > 0.5`) or "
               "fn.random.coin_flip(dtype=types.BOOL); for element-wise logic on other data use `&`, `|` and "
               "`== 0`, which are evaluated for every sample.")


def restriction_message(expression: str, side: str = "") -> str:
    """What the condition of ``expression`` (``if``, ``and``, ``or``, ``not``) must be, as DALI words it."""
    if expression == "if":
        what, where = "Conditions inside `if` statements are", " as a condition of the `if` statement"
    else:
        what = f"Logical expression `{expression}` is"
        where = f" as the {side} argument of the logical expression" if side else " in the logical expression"
    return f"{what} restricted to scalar (0-d) inputs of `bool` type, placed on the CPU.", where


def predicate_mask(pred: Batch, expression: str = "if", side: str = "") -> np.ndarray:
    """The predicate as a NumPy bool array of one value per sample; raises ValueError, in DALI's words, when a
    sample is not a single boolean (or integer), or the batch is on the GPU."""
    rule, where = restriction_message(expression, side)
    if pred.device != "cpu":
        raise ValueError(f"{rule} Got a GPU input{where}. {_SUGGESTION}")
    n = len(pred)
    if n == 0:
        return np.zeros(0, bool)
    dtype = pred.dtype
    if dtype is not None and (dtype.is_floating_point or dtype.is_complex):
        raise ValueError(f"{rule} Got an input of type {str(dtype).replace('torch.', '')}{where}. {_SUGGESTION}")
    dense = pred.dense
    if dense is not None:
        if dense[0].numel() != 1:
            raise ValueError(f"{rule} Got samples of shape {tuple(dense.shape[1:])}{where}. {_SUGGESTION}")
        flat = dense.reshape(n)
    else:
        samples = pred.samples
        bad = next((s for s in samples if s.numel() != 1), None)
        if bad is not None:
            raise ValueError(f"{rule} Got a sample of shape {tuple(bad.shape)}{where}. {_SUGGESTION}")
        if any(s.dtype.is_floating_point or s.dtype.is_complex for s in samples):
            raise ValueError(f"{rule} Got a floating-point sample{where}. {_SUGGESTION}")
        flat = torch.stack([s.reshape(()) for s in samples])
    return flat.numpy().astype(bool, copy=False)


def part_index(index: Batch, num_parts: int) -> np.ndarray:
    """The part of each sample (int64), from a CPU batch of one integer per sample, clipped to
    ``[0, num_parts - 1]``."""
    if index.device != "cpu":
        raise ValueError("the index of a many-way split must be a CPU batch of one integer per sample")
    n = len(index)
    if n == 0:
        return np.zeros(0, np.int64)
    dense = index.dense
    if dense is not None and dense[0].numel() == 1:
        flat = dense.reshape(n)
    else:
        bad = next((s for s in index.samples if s.numel() != 1), None)
        if bad is not None:
            raise ValueError(f"the index of a many-way split must be one integer per sample, got a sample of shape "
                             f"{tuple(bad.shape)}")
        flat = torch.stack([s.reshape(()) for s in index.samples])
    if flat.dtype.is_floating_point or flat.dtype.is_complex:
        raise ValueError(f"the index of a many-way split must hold integers, got {flat.dtype}")
    return np.clip(flat.numpy().astype(np.int64), 0, num_parts - 1)


def _indices(positions: np.ndarray, device: torch.device) -> torch.Tensor:
    """``positions`` (int64) as a tensor on ``device``: on a GPU through a page-locked buffer, so the copy is
    asynchronous (from ordinary memory CUDA waits for the stream first)."""
    host = host_empty((len(positions),), torch.int64, pin=device.type == "cuda",
                      device=device if device.type == "cuda" else None)
    host.numpy()[:] = positions
    return host.to(device, non_blocking=True) if device.type == "cuda" else host


@SPLIT.batch_kernel("cpu")
@SPLIT.batch_kernel("gpu")
def split(ctx: BatchContext, data: Batch, pred: Batch, *, args: BatchArgs) -> tuple[Batch, Batch]:
    """Gathers the true and the false samples: a dense batch with one index_select per part (indices copied
    once), other batches as views of their samples."""
    mask = predicate_mask(pred, args.const("expression_name"))
    n = len(data)
    if len(mask) != n:
        raise ValueError(f"the predicate has {len(mask)} samples for a batch of {n}")
    where_true = np.flatnonzero(mask)
    where_false = np.flatnonzero(~mask)
    layout = data.layout()
    info = data.source_info
    infos = ([info[i] for i in where_true], [info[i] for i in where_false])
    dense = data.dense
    if dense is not None:
        if len(where_false) == 0 or len(where_true) == 0:  # all on one side: the batch itself, no copy
            empty = dense[:0]
            parts = (dense, empty) if len(where_false) == 0 else (empty, dense)
        else:
            index = _indices(np.concatenate([where_true, where_false]), dense.device)
            gathered = dense.index_select(0, index)
            parts = (gathered[:len(where_true)], gathered[len(where_true):])
        return tuple(Batch.from_dense(p, layout, infos[k]) for k, p in enumerate(parts))  # type: ignore[return-value]
    samples = data.samples
    return (Batch([samples[i] for i in where_true], layout, infos[0]),
            Batch([samples[i] for i in where_false], layout, infos[1]))


def _check_same_kind(true_part: Batch, false_part: Batch, names: tuple[str, str] = ("if", "else")) -> None:
    """DALI's rule: both branches give the same type, number of dimensions and layout (where both have samples);
    ``names``: the two branches, as the message names them."""
    if not len(true_part) or not len(false_part):
        return
    base = ("Divergent data found in different branches of an `if` on a DataNode: both branches are merged into "
            "one batch, which must have one type, number of dimensions and layout. ")
    if true_part.dtype != false_part.dtype:
        raise ValueError(f"{base}Found distinct types: {true_part.dtype} ({names[0]}) and {false_part.dtype} "
                         f"({names[1]}).")
    nd_t, nd_f = len(true_part.shape()[0]), len(false_part.shape()[0])
    if nd_t != nd_f:
        raise ValueError(f"{base}Found distinct sample dimensions: {nd_t} ({names[0]}) and {nd_f} ({names[1]}).")
    lt, lf = true_part.layout(), false_part.layout()
    if lt and lf and lt != lf:
        raise ValueError(f"{base}Found distinct layouts: \"{lt}\" ({names[0]}) and \"{lf}\" ({names[1]}).")
    if true_part.torch_device != false_part.torch_device:
        raise ValueError(f"{base}Found distinct devices: {true_part.torch_device} ({names[0]}) and "
                         f"{false_part.torch_device} ({names[1]}).")


@MERGE.batch_kernel("cpu")
@MERGE.batch_kernel("gpu")
def merge(ctx: BatchContext, true_part: Batch, false_part: Batch, pred: Batch, *, args: BatchArgs) -> Batch:
    """Scatters the two parts back in the original order: dense parts of one shape with one cat and one gather
    (indices copied once), others as views of their samples."""
    mask = predicate_mask(pred)
    n = len(mask)
    n_true = int(mask.sum())
    if len(true_part) != n_true or len(false_part) != n - n_true:
        raise ValueError(f"the parts have {len(true_part)} and {len(false_part)} samples, but the predicate puts "
                         f"{n_true} and {n - n_true} of its {n} samples in them")
    _check_same_kind(true_part, false_part)
    layout = true_part.layout() if len(true_part) else false_part.layout()
    layout = layout or true_part.layout() or false_part.layout()
    if n_true == n or n_true == 0:  # one side holds the whole batch: it is the result
        whole = true_part if n_true == n else false_part
        return whole if whole.layout() == layout else whole.with_layout(layout)
    info_t, info_f = iter(true_part.source_info), iter(false_part.source_info)
    info = [next(info_t) if m else next(info_f) for m in mask]
    dt, df = true_part.dense, false_part.dense
    if dt is not None and df is not None and dt.shape[1:] == df.shape[1:]:
        # position of output sample i in cat([true, false])
        order = np.empty(n, np.int64)
        order[mask] = np.arange(n_true)
        order[~mask] = n_true + np.arange(n - n_true)
        both = torch.cat([dt, df])
        return Batch.from_dense(both.index_select(0, _indices(order, both.device)), layout, info)
    st, sf = iter(true_part.samples), iter(false_part.samples)
    return Batch([next(st) if m else next(sf) for m in mask], layout, info)


@SPLIT_N.batch_kernel("cpu")
@SPLIT_N.batch_kernel("gpu")
def split_n(ctx: BatchContext, data: Batch, index: Batch, *, args: BatchArgs) -> tuple[Batch, ...]:
    """Gathers the samples of every part: a dense batch with one index_select (the parts are views of its
    result, indices copied once), other batches as views of their samples."""
    k = args.const("num_parts")
    part = part_index(index, k)
    n = len(data)
    if len(part) != n:
        raise ValueError(f"the index has {len(part)} samples for a batch of {n}")
    order = np.argsort(part, kind="stable")  # the samples of part 0, then of part 1, ... each in order
    counts = np.bincount(part, minlength=k)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    layout = data.layout()
    info = data.source_info
    infos = [[info[i] for i in order[bounds[j]:bounds[j + 1]]] for j in range(k)]
    dense = data.dense
    if dense is not None:
        if n and counts.max() == n:  # all in one part: the batch itself, no copy
            gathered = dense
        else:
            gathered = dense.index_select(0, _indices(order, dense.device)) if n else dense
        return tuple(Batch.from_dense(gathered[bounds[j]:bounds[j + 1]], layout, infos[j]) for j in range(k))
    samples = data.samples
    return tuple(Batch([samples[i] for i in order[bounds[j]:bounds[j + 1]]], layout, infos[j]) for j in range(k))


@MERGE_N.batch_kernel("cpu")
@MERGE_N.batch_kernel("gpu")
def merge_n(ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
    """Puts the parts back in the original order: dense parts of one shape with one cat and one gather (indices
    copied once), others as views of their samples."""
    k = args.const("num_parts")
    *parts, index = inputs
    if len(parts) != k:
        raise ValueError(f"{len(parts)} parts given to a merge of {k}")
    part = part_index(index, k)
    n = len(part)
    counts = np.bincount(part, minlength=k)
    if [len(p) for p in parts] != counts.tolist():
        raise ValueError(f"the parts have {[len(p) for p in parts]} samples, but the index puts {counts.tolist()} "
                         f"of its {n} samples in them")
    full = [p for p in parts if len(p)]
    first = next(j for j in range(k) if counts[j]) if n else 0
    for j in range(first + 1, k):
        if counts[j]:
            _check_same_kind(parts[first], parts[j], (f"branch {first}", f"branch {j}"))
    layout = next((p.layout() for p in full + parts if p.layout()), "")
    if len(full) <= 1:  # one part holds the whole batch: it is the result
        whole = full[0] if full else parts[0]
        return whole if whole.layout() == layout else whole.with_layout(layout)
    order = np.argsort(part, kind="stable")
    position = np.empty(n, np.int64)  # position of output sample i in cat(parts)
    position[order] = np.arange(n)
    infos = [info for p in parts for info in p.source_info]
    info = [infos[j] for j in position]
    denses = [p.dense for p in full]
    if all(d is not None and d.shape[1:] == denses[0].shape[1:] for d in denses):
        both = torch.cat(denses)
        return Batch.from_dense(both.index_select(0, _indices(position, both.device)), layout, info)
    samples = [s for p in parts for s in p.samples]
    return Batch([samples[j] for j in position], layout, info)


@NOT.batch_kernel("cpu")
def not_(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    mask = predicate_mask(data, "not")
    return Batch.from_dense(torch.from_numpy(~mask), "", data.source_info)


@VALIDATE_LOGICAL.batch_kernel("cpu")
def validate_logical(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    """The operand as booleans (integers are taken as DALI's C++ code would read them: non-zero is true)."""
    mask = predicate_mask(data, args.const("expression_name"), args.const("expression_side"))
    if data.dtype == torch.bool and data.dense is not None and data.dense.dim() == 1:
        return data
    return Batch.from_dense(torch.from_numpy(mask), "", data.source_info)
