"""``fn.mfcc``: mel-frequency cepstral coefficients from a (log) mel spectrogram."""

from __future__ import annotations

import torch

from sluice.kernels.audio.batching import contract_batch
from sluice.kernels.audio.spectral import apply_matrix, dct_matrix, lifter_weights
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema, SampleContext

__all__ = ["SCHEMA"]

SCHEMA = OpSchema(
    "mfcc",
    doc="""Computes Mel Frequency Cepstral Coefficients (MFCC) from a mel spectrogram.

    A discrete cosine transform (types 1-4, scaled as SciPy's ``dct``; ``normalize`` selects the orthonormal
    basis, not available for type 1) along ``axis`` keeps the first ``n_mfcc`` coefficients; with ``lifter > 0``
    coefficient ``i`` is multiplied by ``1 + sin(pi * (i + 1) / lifter) * lifter / 2``. This equals
    ``librosa.feature.mfcc(S=log_mel, n_mfcc, dct_type, norm="ortho" if normalize else None, lifter)``.
    On the GPU the DCT is one matrix product over the padded batch. Example::

        coeffs = fn.mfcc(fn.to_decibels(mel), n_mfcc=13, normalize=True)
    """,
    inputs=1,
    outputs=1,
    devices=("cpu", "gpu"),
    graph_safe=lambda args: not args.get("lifter"),  # the lifter's weights are copied over each batch
    args=[
        Arg("axis", int, 0, "Axis over which the DCT runs (the mel axis)."),
        Arg("dct_type", int, 2, "DCT type: 1, 2, 3 or 4.", choices=(1, 2, 3, 4)),
        Arg("lifter", float, 0.0, "Cepstral liftering coefficient; 0 disables liftering."),
        Arg("n_mfcc", int, 20, "Number of coefficients.", min=1),
        Arg("normalize", bool, False, "Orthonormal DCT basis (not with dct_type=1)."),
    ],
)


def _matrix(n_in: int, x: torch.Tensor, a: dict) -> torch.Tensor:
    """The liftered DCT rows, ``(n_mfcc, n_in)``."""
    if a["n_mfcc"] > n_in:
        raise ValueError(f"mfcc: n_mfcc ({a['n_mfcc']}) is larger than the {n_in} values along axis {a['axis']}")
    m = dct_matrix(a["n_mfcc"], n_in, a["dct_type"], a["normalize"], dtype=x.dtype, device=x.device)
    if a["lifter"]:
        m = m * lifter_weights(a["n_mfcc"], a["lifter"], x.dtype, x.device)[:, None]
    return m


def _mfcc(x: torch.Tensor, axis: int, a: dict) -> torch.Tensor:
    x = x if x.dtype == torch.float64 else x.float()
    return apply_matrix(x, _matrix(x.shape[axis], x, a), axis)


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"mfcc: axis {axis} is out of range for a {ndim}-D input")
    return axis % ndim


_ARGS = ("axis", "dct_type", "lifter", "n_mfcc", "normalize")


@SCHEMA.sample_kernel("cpu")
def mfcc_cpu(ctx: SampleContext, x: torch.Tensor, **args) -> torch.Tensor:
    a = {k: args[k] for k in _ARGS}
    return _mfcc(x, _axis(a["axis"], x.dim()), a).contiguous()


@SCHEMA.batch_kernel("gpu")
def mfcc_gpu(ctx: BatchContext, x: Batch, *, args: BatchArgs) -> Batch:
    a = {k: args.const(k) for k in _ARGS}
    return contract_batch(x, lambda ndim: _axis(a["axis"], ndim), lambda n, t: _matrix(n, t, a), "mfcc")
