"""Per-sample choice among augmentations: ``select(augmentations, idx, ...)`` runs ``augmentations[idx[i]]`` on
sample ``i``.

Each augmentation runs once, on the samples that chose it, and the results are merged back in order
(conditional execution, as in DALI). DALI writes the choice as a binary search over the index by ``if``
statements (:func:`split_samples_among_ops`), which splits every input and merges the results ``len(ops) - 1``
times, each copying the samples; here it is one :class:`~sluice.pipeline.conditionals.Switch`: one split of each
input into a part per augmentation, one merge. The samples each augmentation gets, and so the results, are the
same. This needs a pipeline defined with ``enable_conditionals=True``.
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
    if len(ops) == 1 or not isinstance(selected_op_idx, DataNode) or conditionals.condition_stack() is None:
        # a Python index picks one; without conditionals the `if` on a DataNode says what to do.
        # Through conditionals.call: the `if` above is rewritten even where select's caller was not.
        return conditionals.call(split_samples_among_ops, 0, len(ops) - 1, ops, selected_op_idx, op_args,
                                 op_kwargs)
    switch = conditionals.Switch(selected_op_idx, len(ops))
    try:
        for k, op in enumerate(ops):
            switch.enter(k)
            switch.keep(conditionals.call(op, *op_args, **op_kwargs))
    except BaseException:
        switch.close()
        raise
    return switch.finish()
