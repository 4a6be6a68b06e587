"""``fn.mel_filter_bank``: converts a spectrogram to a mel spectrogram with a bank of triangular filters."""

from __future__ import annotations

import torch

from sluice.kernels.audio.batching import contract_batch
from sluice.kernels.audio.spectral import apply_matrix, mel_matrix
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema, SampleContext

__all__ = ["SCHEMA", "frequency_axis"]

SCHEMA = OpSchema(
    "mel_filter_bank",
    doc="""Converts a spectrogram to a mel spectrogram by applying a bank of triangular filters.

    The frequency (``'f'``) dimension comes from the input layout; without a layout, ``"f"``, ``"ft"`` or
    ``"*ft"`` is assumed from the number of dimensions. The input has ``nfft // 2 + 1`` bins spanning 0 ..
    ``sample_rate / 2``. ``mel_formula="slaney"`` (linear below 1 kHz, logarithmic above) matches librosa's
    default; ``"htk"`` is ``2595 log10(1 + f / 700)``. ``normalize`` gives each filter unit area (librosa's
    ``norm="slaney"``); otherwise each peaks at 1. The filters are one matrix, applied to the whole (padded)
    batch as one matrix product on the GPU. Example::

        mel = fn.mel_filter_bank(spec, sample_rate=16000, nfilter=80)
    """,
    inputs=1,
    outputs=1,
    devices=("cpu", "gpu"),
    graph_safe=True,
    args=[
        Arg("nfilter", int, 128, "Number of mel filters.", min=1),
        Arg("sample_rate", float, 44100.0, "Sampling rate of the signal the spectrogram came from (Hz)."),
        Arg("freq_low", float, 0.0, "Lowest frequency (Hz)."),
        Arg("freq_high", float, 0.0, "Highest frequency (Hz); 0 means sample_rate / 2."),
        Arg("normalize", bool, True, "Unit-area filters (True) or unit-peak filters (False)."),
        Arg("mel_formula", str, "slaney", "Hz-to-mel formula: 'slaney' or 'htk'.", choices=("slaney", "htk")),
    ],
)

_ARGS = ("nfilter", "sample_rate", "freq_low", "freq_high", "normalize", "mel_formula")


def frequency_axis(layout: str, ndim: int, op: str) -> int:
    """The index of the ``'f'`` axis: from the layout, else ``"f"``/``"ft"``/``"*ft"`` by rank."""
    if layout:
        if "f" not in layout:
            raise ValueError(f"{op}: the input layout {layout!r} has no frequency axis 'f'")
        if len(layout) != ndim:
            raise ValueError(f"{op}: layout {layout!r} does not match a {ndim}-D input")
        return layout.index("f")
    if ndim == 0:
        raise ValueError(f"{op}: expected a spectrogram, got a scalar")
    return 0 if ndim == 1 else ndim - 2


def _filters(nbins: int, like: torch.Tensor, a: dict) -> torch.Tensor:
    dtype = like.dtype if like.dtype == torch.float64 else torch.float32
    return mel_matrix(a["nfilter"], a["sample_rate"], 2 * (nbins - 1), a["freq_low"], a["freq_high"],
                      a["normalize"], a["mel_formula"], dtype=dtype, device=like.device)


@SCHEMA.sample_kernel("cpu")
def mel_filter_bank_cpu(ctx: SampleContext, spec: torch.Tensor, **args) -> torch.Tensor:
    axis = frequency_axis(ctx.layout, spec.dim(), "mel_filter_bank")
    x = spec if spec.dtype == torch.float64 else spec.float()
    return apply_matrix(x, _filters(spec.shape[axis], x, args), axis).contiguous()


@SCHEMA.batch_kernel("gpu")
def mel_filter_bank_gpu(ctx: BatchContext, spec: Batch, *, args: BatchArgs) -> Batch:
    a = {k: args.const(k) for k in _ARGS}
    return contract_batch(spec, lambda ndim: frequency_axis(spec.layout(), ndim, "mel_filter_bank"),
                          lambda nbins, x: _filters(nbins, x, a), "mel_filter_bank")
