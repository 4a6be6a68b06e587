"""``fn.spectrogram``: short-time Fourier power (or magnitude) spectra of 1-D signals."""

from __future__ import annotations

import numpy as np
import torch

from sluice.kernels.audio.batching import as_signal
from sluice.kernels.audio.spectral import given_window, pad_batch, stft_power
from sluice.pipeline import ragged
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema, SampleContext

__all__ = ["SCHEMA"]

SCHEMA = OpSchema(
    "spectrogram",
    doc="""Produces a spectrogram from a 1-D signal: ``(nfft // 2 + 1, windows)`` for layout ``"ft"``.

    Input: one channel, shape ``(n,)``, ``(n, 1)`` or ``(1, n)``. Windows of ``window_length`` samples every
    ``window_step`` samples are multiplied by ``window_fn`` (default: DALI's Hann window,
    ``0.5 - 0.5 cos(2 pi (n + 0.5) / window_length)``; librosa and ``torch.stft`` use the periodic Hann window,
    ``0.5 - 0.5 cos(2 pi n / window_length)``: pass it as ``window_fn`` to match them) and transformed with an
    ``nfft``-point real FFT (``nfft`` defaults to ``window_length``; a shorter window is centred in the FFT
    frame). With ``center_windows`` window ``t`` is centred on sample
    ``t * window_step`` and there are ``n // window_step + 1`` windows; the signal is extended by reflection
    (``reflect_padding``) or with zeros. Without it only whole windows inside the signal are taken. An empty
    signal gives no windows. ``power`` 2 gives power, 1 magnitude. On the GPU the whole batch (padded to its
    longest signal) is framed with one gather and transformed with one batched cuFFT call. Example::

        spec = fn.spectrogram(audio, nfft=512, window_length=400, window_step=160, power=2)
    """,
    inputs=1,
    outputs=1,
    devices=("cpu", "gpu"),
    output_layout=lambda args, _: args["layout"],
    graph_safe=True,
    args=[
        Arg("nfft", int, None, "FFT size; the output has nfft // 2 + 1 bins. Defaults to window_length.", min=1),
        Arg("window_length", int, 512, "Window size in samples.", min=1),
        Arg("window_step", int, 256, "Step between windows in samples.", min=1),
        Arg("window_fn", "float_list", None, "Window samples (window_length values); default DALI's Hann window "
            "(0.5 - 0.5 cos(2 pi (n + 0.5) / window_length))."),
        Arg("power", int, 2, "Exponent of the magnitude: 1 (amplitude) or 2 (power).", choices=(1, 2)),
        Arg("center_windows", bool, True, "Centre windows on multiples of window_step (padding the signal)."),
        Arg("reflect_padding", bool, True, "Pad by reflecting the signal (True) or with zeros (False)."),
        Arg("layout", str, "ft", "Output layout: 'ft' (frequency-major) or 'tf' (time-major).",
            choices=("ft", "tf")),
    ],
)


def _run(signals: list[torch.Tensor] | torch.Tensor, nfft, window_length, window_step, window_fn, power, center_windows,
         reflect_padding, layout, lengths: torch.Tensor | None = None,
         zero_padding: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    if window_length <= 0 or window_step <= 0:
        raise ValueError(f"spectrogram: window_length and window_step must be > 0, got {window_length} and "
                         f"{window_step}")
    nfft = nfft or window_length
    if isinstance(signals, torch.Tensor):           # a padded (B, N) batch: no per-sample views, no stacking copy
        padded = signals if signals.is_floating_point() else signals.float()
        if lengths is None:
            lengths = torch.full((signals.shape[0],), signals.shape[1], dtype=torch.int64)
    else:
        padded, lengths = pad_batch([s.float() if not s.is_floating_point() else s for s in signals])
    window = given_window(window_fn, padded.dtype, padded.device) if window_fn else None
    spec, frames = stft_power(padded, lengths, nfft=nfft, window_length=window_length, window_step=window_step,
                              window=window, power=power, center_windows=center_windows,
                              reflect_padding=reflect_padding, zero_padding=zero_padding)
    if layout == "ft":
        spec = spec.transpose(1, 2)
    return spec, frames


@SCHEMA.sample_kernel("cpu")
def spectrogram_cpu(ctx: SampleContext, audio: torch.Tensor, **args) -> torch.Tensor:
    spec, _ = _run([as_signal(audio, "spectrogram")], **_own(args))
    return spec[0].contiguous()


@SCHEMA.batch_kernel("gpu")
def spectrogram_gpu(ctx: BatchContext, audio: Batch, *, args: BatchArgs) -> Batch:
    """The whole batch over its padded form: framed with one gather, one batched FFT; a padded output."""
    own = {k: args.const(k) for k in _ARGS}
    layout = own["layout"]
    if not len(audio):
        return Batch([], layout)
    shapes = audio.shapes_array()
    if shapes.shape[1] > 2 or (shapes.shape[1] == 2 and not ((shapes == 1).any(axis=1)).all()):
        bad = int(np.flatnonzero((shapes != 1).all(axis=1))[0]) if shapes.shape[1] == 2 else 0
        raise ValueError(f"spectrogram: expected a one-channel signal of shape (n,), (n, 1) or (1, n), got "
                         f"{tuple(shapes[bad].tolist())} (sample {bad}); downmix it first")
    padded, _ = audio.padded(fill=None)
    signals = padded.reshape(len(audio), -1)
    if not signals.is_floating_point():
        signals = signals.float()
    lengths = torch.from_numpy(ragged.sample_sizes(shapes))
    spec, frames = _run(signals, lengths=lengths, zero_padding=False, **own)
    nbins = spec.shape[1] if layout == "ft" else spec.shape[2]
    counts = frames.numpy().astype(np.int64)
    out_shapes = np.stack([np.full_like(counts, nbins), counts], 1) if layout == "ft" else \
        np.stack([counts, np.full_like(counts, nbins)], 1)
    # "ft" is a transposed view of the time-major spectra: the mel product reads them time-major again
    return Batch.from_padded(spec, out_shapes, layout)


_ARGS = ("nfft", "window_length", "window_step", "window_fn", "power", "center_windows", "reflect_padding",
         "layout")


def _own(args: dict) -> dict:
    return {k: args[k] for k in _ARGS}
