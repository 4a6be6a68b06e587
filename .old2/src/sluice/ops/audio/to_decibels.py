"""``fn.to_decibels``: converts magnitudes or powers to decibels."""

from __future__ import annotations

import torch

from sluice.kernels.audio.spectral import to_decibels
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema, SampleContext

__all__ = ["SCHEMA"]

SCHEMA = OpSchema(
    "to_decibels",
    doc="""Converts a magnitude (real, positive) to the decibel scale::

        min_ratio = 10 ** (cutoff_db / multiplier)
        out = multiplier * log10(max(min_ratio, input / reference))

    ``reference`` 0 uses each sample's maximum (an all-zero sample then gives ``cutoff_db`` everywhere). Use
    ``multiplier=10`` for powers, 20 for amplitudes. On the GPU the whole batch is converted at once, with the
    per-sample maxima taken from the padded batch. Example::

        log_mel = fn.to_decibels(mel, multiplier=10.0, cutoff_db=-80.0)
    """,
    inputs=1,
    outputs=1,
    devices=("cpu", "gpu"),
    graph_safe=True,
    args=[
        Arg("multiplier", float, 10.0, "Factor of the logarithm (10 for power, 20 for amplitude)."),
        Arg("reference", float, 0.0, "Reference magnitude; 0 uses the maximum of each sample."),
        Arg("cutoff_db", float, -200.0, "Lowest output in dB (values below saturate)."),
    ],
)


def _float(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


@SCHEMA.sample_kernel("cpu")
def to_decibels_cpu(ctx: SampleContext, x: torch.Tensor, *, multiplier, reference, cutoff_db, **_) -> torch.Tensor:
    return to_decibels(_float(x), multiplier=multiplier, reference=reference or None, cutoff_db=cutoff_db)


@SCHEMA.batch_kernel("gpu")
def to_decibels_gpu(ctx: BatchContext, x: Batch, *, args: BatchArgs) -> Batch:
    """The whole batch at once over its padded form, each sample's maximum taken with its padding at 0 (magnitudes
    are >= 0, so a zero never wins)."""
    if not len(x):
        return Batch([], x.layout())
    multiplier, reference, cutoff = (args.const(k) for k in ("multiplier", "reference", "cutoff_db"))
    dense, shapes = x.padded(fill=None if reference else 0.0)
    dense = _float(dense)
    if reference:
        ref: torch.Tensor | float = reference
    else:
        flat = dense.reshape(dense.shape[0], -1)
        ref = (flat.amax(dim=1) if flat.shape[1] else flat.new_ones(dense.shape[0]))
        ref = ref.view((-1,) + (1,) * (dense.dim() - 1))
    out = to_decibels(dense, multiplier=multiplier, reference=ref, cutoff_db=cutoff)
    return Batch.from_padded(out, shapes, x.layout())
