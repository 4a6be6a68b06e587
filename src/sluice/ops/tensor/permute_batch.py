"""``fn.batch_permutation`` and ``fn.permute_batch``: draw indices into the batch, and build a batch of the input's
samples in the order of such indices (``out[i] = in[indices[i]]``), as DALI's operators of those names."""

from __future__ import annotations

import numpy as np
import torch

from sluice.pipeline.batch import Batch
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["BATCH_PERMUTATION", "PERMUTE_BATCH", "draw_permutation"]


def draw_permutation(rng: np.random.Generator, n: int, allow_repetitions: bool, no_fixed_points: bool) -> np.ndarray:
    """``n`` indices into a batch of ``n``: a permutation, or with ``allow_repetitions`` independent draws; with
    ``no_fixed_points`` (ignored for ``n == 1``) never ``out[i] == i`` (a uniform derangement when no repetitions).

    Example::

        draw_permutation(np.random.default_rng(0), 4, False, True)    # e.g. array([2, 3, 1, 0])
    """
    if n == 0:
        return np.zeros(0, np.int64)
    avoid = no_fixed_points and n > 1
    if allow_repetitions:
        if not avoid:
            return rng.integers(0, n, size=n)
        draw = rng.integers(0, n - 1, size=n)
        return draw + (draw >= np.arange(n))  # skip i itself: uniform over the other n - 1
    while True:  # a derangement is 1/e of the permutations: a few draws on average
        perm = rng.permutation(n)
        if not avoid or not np.any(perm == np.arange(n)):
            return perm


BATCH_PERMUTATION = OpSchema(
    "batch_permutation",
    doc="""Random indices into the batch, one scalar (int32) per sample, for ``fn.permute_batch``: a permutation of
    the batch, or with ``allow_repetitions`` independent draws (some samples repeated, others left out).

    Example::

        perm = fn.batch_permutation(no_fixed_points=True)
        mixed = fn.permute_batch(images, indices=perm)
    """,
    inputs=0,
    devices=("cpu", "gpu"),
    random=True,
    args=[
        Arg("allow_repetitions", bool, False, "Draw each index independently (repetitions and omissions)."),
        Arg("no_fixed_points", bool, False, "Never map a sample to itself (out[i] != i); ignored for a batch of 1."),
    ],
    output_layout="",
)


@BATCH_PERMUTATION.batch_kernel("cpu")
@BATCH_PERMUTATION.batch_kernel("gpu")
def batch_permutation(ctx: BatchContext, *, args: BatchArgs) -> Batch:
    perm = draw_permutation(ctx.rng, ctx.batch_size, args.const("allow_repetitions"), args.const("no_fixed_points"))
    out = Batch.from_dense(torch.from_numpy(perm.astype(np.int32))) if len(perm) else Batch([])
    return out.to(ctx.device) if ctx.device.type == "cuda" else out


PERMUTE_BATCH = OpSchema(
    "permute_batch",
    doc="""A batch of the input's samples picked by ``indices``: ``out[i] = in[indices[i]]``; indices may repeat or
    leave samples out. ``indices`` is a list as long as the batch, or a batch of scalars (``fn.batch_permutation``).

    Example::

        mixed = fn.permute_batch(images, indices=fn.batch_permutation())
    """,
    devices=("cpu", "gpu"),
    args=[Arg("indices", "int_list", REQUIRED, "For each output sample, the index of the input sample it takes.",
              per_sample=True)],
)


def _indices(args: BatchArgs, n: int) -> list[int]:
    if args.is_const("indices"):
        indices = [int(i) for i in args.const("indices")]
    else:
        indices = []
        for v in args["indices"]:
            flat = np.asarray(v).reshape(-1)
            if flat.size != 1:
                raise ValueError(f"permute_batch: each sample of an indices input must be one scalar, got {flat.size} "
                                 "values")
            indices.append(int(flat[0]))
    if len(indices) != n:
        raise ValueError(f"permute_batch: {len(indices)} indices for a batch of {n}; give one index per sample")
    bad = [i for i in indices if not 0 <= i < n]
    if bad:
        raise ValueError(f"permute_batch: indices {bad} are out of range for a batch of {n} (valid: 0..{n - 1})")
    return indices


@PERMUTE_BATCH.batch_kernel("cpu")
@PERMUTE_BATCH.batch_kernel("gpu")
def permute_batch(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    n = len(data)
    indices = _indices(args, n)
    source = [data.source_info[i] for i in indices]
    if data.dense is not None and n:
        index = torch.tensor(indices, dtype=torch.long).to(data.dense.device, non_blocking=True)
        return Batch.from_dense(data.dense.index_select(0, index), data.layout(), source)
    samples = data.samples
    return Batch([samples[i] for i in indices], data.layout(), source)
