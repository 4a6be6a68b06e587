"""Per-sample choice among augmentations: ``select(augmentations, idx, ...)`` runs ``augmentations[idx[i]]`` on
sample ``i``.

The batch is split by ``if`` statements on DataNodes (conditional execution, as in DALI): a binary search over
the index, so that each augmentation runs once, on the samples that chose it, and the results are merged back
in order. This needs a pipeline defined with ``enable_conditionals=True``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice.pipeline import conditionals
from sluice.pipeline.graph import DataNode

__all__ = ["select", "split_samples_among_ops"]


def split_samples_among_ops(op_range_lo: int, op_range_hi: int, ops: Sequence[Any], selected_op_idx: DataNode,
                            op_args: tuple, op_kwargs: dict) -> Any:
    """``ops[selected_op_idx](*op_args, **op_kwargs)`` for the indices in ``[op_range_lo, op_range_hi]``."""
    if op_range_lo == op_range_hi:
        return ops[op_range_lo](*op_args, **op_kwargs)
    mid = (op_range_lo + op_range_hi) // 2
    if selected_op_idx <= mid:
        out = split_samples_among_ops(op_range_lo, mid, ops, selected_op_idx, op_args, op_kwargs)
    else:
        out = split_samples_among_ops(mid + 1, op_range_hi, ops, selected_op_idx, op_args, op_kwargs)
    return out


def select(ops: Sequence[Any], selected_op_idx: DataNode, *op_args: Any, **op_kwargs: Any) -> Any:
    """Apply ``ops[selected_op_idx[i]]`` to sample ``i``, as if by calling ``ops[idx](*op_args, **op_kwargs)``;
    DataNodes among the arguments are split with the samples. ``selected_op_idx`` is a CPU batch of integers in
    ``[0, len(ops) - 1]``.

    Example::

        @pipeline_def(enable_conditionals=True)
        def pipe():
            ...
            idx = fn.random.uniform(values=[0, 1, 2], dtype=types.INT32)
            images = select([augmentations.rotate, augmentations.equalize, augmentations.identity], idx, images,
                            magnitude_bin=5, num_magnitude_bins=11)
    """
    if not ops:
        raise ValueError("select needs at least one operation")
    # through conditionals.call: the `if` above is rewritten even where select's caller was not
    return conditionals.call(split_samples_among_ops, 0, len(ops) - 1, ops, selected_op_idx, op_args, op_kwargs)
