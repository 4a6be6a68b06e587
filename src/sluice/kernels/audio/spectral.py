"""Spectral math shared by the audio operators, written once in torch so that it runs on CPU and CUDA tensors.

Everything works on a *padded batch*: a ``(B, N)`` tensor whose row ``b`` holds a signal of ``lengths[b]``
samples (the rest is ignored). The short-time Fourier transform gathers every window of every signal with one
index tensor, reflecting or zero-padding each signal at its own ends, and transforms them with one batched real
FFT (cuFFT on the GPU). Mel filter banks and DCTs are matrices built in float64 (and cached) and applied as
matrix products.

Example::

    x = torch.randn(4, 16000)
    spec, frames = stft_power(x, torch.full((4,), 16000), nfft=512, window_length=400, window_step=160)
    mel = apply_matrix(spec, mel_matrix(80, 16000, 512), axis=1)
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from sluice import env

__all__ = [
    "hann_window", "given_window", "num_windows", "stft_power", "mel_matrix", "hz_to_mel", "mel_to_hz", "dct_matrix",
    "lifter_weights", "apply_matrix", "to_decibels", "pad_batch",
]


#: Ragged batches are framed to a multiple of this many windows (see stft_power).
FRAME_BUCKET = 64


def hann_window(length: int, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.Tensor:
    """DALI's Hann window of ``length`` samples, ``w[n] = 0.5 - 0.5 cos(2 pi (n + 0.5) / length)``, computed in
    float64 (``HannWindow`` of DALI's ``dali/kernels/signal/window/window_functions.h``): sampled at the centres
    of the ``length`` cells of one period, so it is symmetric and never 0, unlike the periodic Hann window of
    librosa and ``torch.hann_window`` (``0.5 - 0.5 cos(2 pi n / length)``). The default window of
    ``fn.spectrogram``; pass ``window_fn`` for another."""
    return _on_device(_hann_np(int(length)), dtype, str(device))


@functools.lru_cache(maxsize=32)
def _hann_np(length: int, padded_to: int = 0) -> np.ndarray:
    n = np.arange(length, dtype=np.float64)
    w = 0.5 * (1.0 - np.cos((2 * math.pi / length) * (n + 0.5)))
    if padded_to > length:      # zeros on the right, for frames of an FFT's size
        w = np.concatenate([w, np.zeros(padded_to - length)])
    w.setflags(write=False)
    return w


def given_window(values, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.Tensor:
    """A window given as numbers (``window_fn``) on ``device``: made once per distinct window and kept, so that
    a batch neither copies it over nor waits for the copy."""
    return _on_device(_window_np(tuple(float(v) for v in values)), dtype, str(device))


@functools.lru_cache(maxsize=64)
def _window_np(values: tuple[float, ...]) -> np.ndarray:
    w = np.array(values, dtype=np.float64)
    w.setflags(write=False)
    return w


def num_windows(length, window_length: int, window_step: int, center_windows: bool):
    """How many windows a signal of ``length`` samples gives: ``length // step + 1`` when centred, else the
    number of whole windows inside the signal (``(length - window_length) // step + 1``, or 0). An empty signal
    has no windows. ``length``: a number (gives an int), a NumPy array (gives an int64 array) or a host tensor of
    lengths (gives an int64 tensor). Computed in NumPy: a torch call on these few numbers would give up the GIL
    and wait to take it back."""
    n = np.asarray(length.numpy() if isinstance(length, torch.Tensor) else length, dtype=np.int64)
    if center_windows:
        counts = np.where(n > 0, n // window_step + 1, 0)
    else:
        counts = np.where(n >= window_length, np.maximum(n - window_length, 0) // window_step + 1, 0)
    if isinstance(length, torch.Tensor):
        return torch.from_numpy(np.ascontiguousarray(counts, dtype=np.int64))
    return counts.astype(np.int64) if isinstance(length, np.ndarray) else int(counts)


def pad_batch(samples: list[torch.Tensor], fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack 1-D signals of different lengths into a ``(B, max_len)`` tensor and their lengths (int64)."""
    lengths = torch.tensor([s.shape[0] for s in samples], dtype=torch.int64)
    if not samples:
        return torch.zeros(0, 0), lengths
    n = int(lengths.max()) if len(lengths) else 0
    if all(s.shape[0] == n for s in samples):
        return torch.stack(samples), lengths
    out = samples[0].new_full((len(samples), n), fill)
    for i, s in enumerate(samples):
        out[i, : s.shape[0]] = s
    return out, lengths


def _reflect(idx: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Mirror indices into ``[0, n)`` as NumPy's ``pad(mode="reflect")`` does (edge not repeated), any distance."""
    period = torch.clamp(2 * (n - 1), min=1)
    m = torch.remainder(idx, period)
    m = torch.where(m >= n, period - m, m)
    return torch.where(n > 1, m, torch.zeros_like(m))


def stft_power(signals: torch.Tensor, lengths: torch.Tensor, *, nfft: int, window_length: int, window_step: int,
               window: torch.Tensor | None = None, power: int = 2, center_windows: bool = True,
               reflect_padding: bool = True, zero_padding: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Power (``power=2``) or magnitude (``power=1``) spectrogram of a padded batch of 1-D signals.

    Windows are centred on multiples of ``window_step`` when ``center_windows`` (the signal is extended by
    reflection, or with zeros when ``reflect_padding`` is False); otherwise they start at multiples of
    ``window_step`` and only whole windows are taken. A window shorter than ``nfft`` is centred in the FFT frame,
    as librosa does. Computation is in the signals' floating dtype (float32 unless float64 is passed).

    Returns:
        ``(spectra, frames)``: spectra ``(B, T, nfft // 2 + 1)`` time-major, where ``T`` is the largest window
        count, and ``frames`` the per-signal window counts (rows past a signal's count are zero, or, without
        ``zero_padding``, whatever the framing gave: a padded batch's padding).
    """
    if signals.dim() != 2:
        raise ValueError(f"expected a (batch, samples) tensor, got shape {tuple(signals.shape)}")
    if nfft < window_length:
        raise ValueError(f"nfft ({nfft}) must be >= window_length ({window_length})")
    if window_step <= 0 or window_length <= 0:
        raise ValueError(f"window_length and window_step must be > 0, got {window_length} and {window_step}")
    if power not in (1, 2):
        raise ValueError(f"Invalid power ({power}). Supported values are 1 (magnitude), 2 (power).")
    dev = signals.device
    dtype = signals.dtype if signals.dtype in (torch.float32, torch.float64) else torch.float32
    x = signals.to(dtype)
    default_window = window is None
    if default_window:
        window = hann_window(window_length, dtype, dev)
    window = window.to(device=dev, dtype=dtype)
    if window.numel() != window_length:
        raise ValueError(f"window_fn has {window.numel()} samples, window_length is {window_length}")
    n_np = lengths.cpu().numpy().astype(np.int64)
    frames_np = num_windows(n_np, window_length, window_step, center_windows)
    frames = torch.from_numpy(frames_np)
    batch = x.shape[0]
    t_max = int(frames_np.max()) if batch else 0
    nbins = nfft // 2 + 1
    if batch == 0 or t_max == 0:
        return x.new_zeros(batch, t_max, nbins), frames
    # First sample of every window; librosa centres a window_length window inside an nfft frame that is itself
    # centred on t * step, so the window starts nfft//2 - (nfft - window_length)//2 samples before t * step.
    offset = (nfft // 2 - (nfft - window_length) // 2) if center_windows else 0
    uniform = bool((n_np == x.shape[1]).all())
    if uniform and (center_windows and reflect_padding and x.shape[1] > nfft // 2 or
                    not center_windows and nfft == window_length and x.shape[1] >= nfft):
        # torch.stft frames by strides (no gather) and centres the window in the nfft frame exactly as above.
        spec = torch.stft(x, n_fft=nfft, hop_length=window_step, win_length=window_length, window=window,
                          center=center_windows, pad_mode="reflect", return_complex=True)     # (B, F, T)
        out = spec.real.square() + spec.imag.square()
        return (out.sqrt() if power == 1 else out).transpose(1, 2), frames
    # Ragged batches are framed to a multiple of FRAME_BUCKET windows: the FFT's plan (made per input shape, and
    # cached) and the buffers then repeat from batch to batch instead of being new for every longest signal.
    t_fft = t_max if uniform else -(-t_max // FRAME_BUCKET) * FRAME_BUCKET
    if _triton_frames_apply(x, nfft):
        return _stft_power_triton(x, torch.from_numpy(n_np), frames, t_max, t_fft, nfft, window_length, window_step,
                                  window, default_window, offset, power, reflect_padding), frames
    if x.shape[1] == 0:
        windows = x.new_zeros(batch, t_fft, window_length)
    else:
        # Each row extended at both of its own ends (reflected, or zeros) by one gather of (B, N + pads), then
        # framed as a strided view: no index per window element (2 W / step times the signal's size).
        n = torch.full((1, 1), x.shape[1], device=dev) if uniform else \
            to_device(torch.from_numpy(n_np), dev).view(batch, 1)
        width = (t_fft - 1) * window_step + nfft
        pos = torch.arange(width, device=dev)[None, :] - offset                               # (1, width)
        if reflect_padding:
            src = torch.minimum(_reflect(pos, n), (n - 1).clamp(min=0))                    # (B or 1, width)
            extended = torch.gather(x, 1, src.expand(batch, -1))
        else:
            inside = (pos >= 0) & (pos < n)
            extended = torch.where(inside, torch.gather(x, 1, pos.clamp(0, x.shape[1] - 1).expand(batch, -1)),
                                   torch.zeros((), dtype=x.dtype, device=dev))
        # frames of nfft samples, a view: the window padded with zeros on the right zeroes the rest, so the FFT
        # needs no padded copy of its input
        windows = extended.unfold(1, nfft, window_step)                                    # (B, T, nfft)
    if windows.shape[-1] != nfft:
        windows = torch.nn.functional.pad(windows, (0, nfft - windows.shape[-1]))
    if window_length < nfft:      # DALI's window, zero-padded, is made once; a given one is padded here
        window = _on_device(_hann_np(window_length, nfft), dtype, str(dev)) if default_window else \
            torch.nn.functional.pad(window, (0, nfft - window_length))
    windows = windows * window
    # The FFT of a frame zero-padded on the right has the magnitudes of the centred frame (a shift changes phases).
    spec = torch.fft.rfft(windows, dim=-1)[:, :t_max]
    out = torch.view_as_real(spec).square().sum(-1)             # re^2 + im^2 in two launches
    if power == 1:
        out = out.sqrt()
    if uniform or not zero_padding:
        return out, frames
    valid = torch.arange(t_max, device=dev)[None, :] < to_device(frames, dev)[:, None]
    return out * valid.unsqueeze(-1), frames


@functools.cache
def triton_audio():
    """:mod:`sluice.kernels.audio._triton_audio`, or None without Triton (the torch paths run then): the speech
    kernels of this module and of ``preemphasis_filter``."""
    try:
        # imported here, on the first GPU batch: Triton is optional, and importing it takes a second
        from sluice.kernels.audio import _triton_audio as kernels
    except ImportError:
        return None
    return kernels


def _triton_frames_apply(x: torch.Tensor, nfft: int) -> bool:
    """Whether a ragged batch is framed by :func:`_stft_power_triton`: float32 rows on a GPU, with Triton."""
    return x.is_cuda and x.dtype == torch.float32 and x.is_contiguous() and x.shape[1] > 0 and nfft <= 8192 \
        and not env.eager() and triton_audio() is not None


def _stft_power_triton(x: torch.Tensor, lengths: torch.Tensor, frames: torch.Tensor, t_max: int, t_fft: int,
                       nfft: int, window_length: int, window_step: int, window: torch.Tensor, default_window: bool,
                       offset: int, power: int, reflect_padding: bool) -> torch.Tensor:
    """:func:`stft_power` of a ragged padded batch (``lengths``: int64, on the host) in three launches: the windowed
    frames of every signal, each extended at its own ends (one Triton kernel), the batched FFT, and the power of its
    first ``t_max`` frames (one Triton kernel). The rows past a signal's frame count hold whatever its padding
    gave."""
    k = triton_audio()
    batch, dev = x.shape[0], x.device
    if window_length < nfft:      # DALI's window, zero-padded, is made once; a given one is padded here
        window = _on_device(_hann_np(window_length, nfft), x.dtype, str(dev)) if default_window else \
            torch.nn.functional.pad(window, (0, nfft - window_length))
    block = triton_block(nfft)
    framed = torch.empty((batch, t_fft, nfft), dtype=x.dtype, device=dev)
    k.frames_kernel[(t_fft, batch)](x, to_device(lengths, dev), window, framed, x.shape[1], t_fft,
                                    window_step, offset, NFFT=nfft, REFLECT=reflect_padding, BLOCK=block)
    spec = torch.view_as_real(torch.fft.rfft(framed, dim=-1))
    nbins = nfft // 2 + 1
    out = torch.empty((batch, t_max, nbins), dtype=x.dtype, device=dev)
    k.power_kernel[(t_max, batch)](spec, out, t_fft, t_max, NBINS=nbins, MAGNITUDE=power == 1,
                                   BLOCK=triton_block(nbins))
    return out


def triton_block(n: int) -> int:
    """The power of two a Triton program covering ``n`` elements works on."""
    return max(16, 1 << (int(n) - 1).bit_length())


def to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small host tensor on ``device`` without synchronising the stream (a plain ``.to("cuda")`` from pageable
    memory waits for all the work queued on it): staged through page-locked memory, copied asynchronously."""
    if device.type == "cpu" or x.device == device:
        return x
    return x.pin_memory().to(device, non_blocking=True)


_DEVICE_COPIES: dict[tuple[int, torch.dtype, str], tuple[np.ndarray, torch.Tensor]] = {}


def _on_device(m: np.ndarray, dtype: torch.dtype, device: str) -> torch.Tensor:
    """A cached device copy of a cached (read-only) matrix: no host-to-device copy per batch.

    Entries are never dropped: a CUDA graph the executor captured reads the copy by its address on every replay
    (:mod:`sluice.pipeline.cuda_graphs`). The entry holds ``m``, so its ``id`` names no other array meanwhile;
    there is one entry per filter bank, window and resampling ratio a process uses."""
    key = (id(m), dtype, device)
    hit = _DEVICE_COPIES.get(key)
    if hit is None:
        hit = _DEVICE_COPIES[key] = (m, torch.tensor(m, dtype=dtype, device=device))
    return hit[1]


# ---- mel scale ------------------------------------------------------------------------------------------------
_F_SP = 200.0 / 3          # Slaney: Hz per mel below 1 kHz
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = math.log(6.4) / 27.0


def hz_to_mel(f: np.ndarray, formula: str = "slaney") -> np.ndarray:
    """Hertz to mels: ``"htk"`` is ``2595 log10(1 + f/700)``; ``"slaney"`` is linear below 1 kHz, log above."""
    f = np.asarray(f, dtype=np.float64)
    if formula == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    mel = f / _F_SP
    return np.where(f >= _MIN_LOG_HZ, _MIN_LOG_MEL + np.log(np.maximum(f, 1e-300) / _MIN_LOG_HZ) / _LOGSTEP, mel)


def mel_to_hz(m: np.ndarray, formula: str = "slaney") -> np.ndarray:
    """Inverse of :func:`hz_to_mel`."""
    m = np.asarray(m, dtype=np.float64)
    if formula == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    return np.where(m >= _MIN_LOG_MEL, _MIN_LOG_HZ * np.exp(_LOGSTEP * (m - _MIN_LOG_MEL)), _F_SP * m)


@functools.lru_cache(maxsize=64)
def _mel_matrix_np(nfilter: int, sample_rate: float, nfft: int, freq_low: float, freq_high: float,
                   normalize: bool, formula: str) -> np.ndarray:
    nbins = nfft // 2 + 1
    fft_hz = np.linspace(0.0, sample_rate / 2.0, nbins)
    edges = mel_to_hz(np.linspace(hz_to_mel(freq_low, formula), hz_to_mel(freq_high, formula), nfilter + 2),
                      formula)
    widths = np.diff(edges)
    rise = (fft_hz[None, :] - edges[:-2, None]) / widths[:-1, None]
    fall = (edges[2:, None] - fft_hz[None, :]) / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rise, fall))
    if normalize:  # unit area: divide each triangle by half its width in Hz
        weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    weights.setflags(write=False)
    return weights


def mel_matrix(nfilter: int, sample_rate: float, nfft: int, freq_low: float = 0.0, freq_high: float = 0.0,
               normalize: bool = True, mel_formula: str = "slaney", dtype: torch.dtype = torch.float32,
               device: torch.device | str = "cpu") -> torch.Tensor:
    """The ``(nfilter, nfft // 2 + 1)`` triangular mel filter bank (librosa's ``filters.mel``).

    ``freq_high`` of 0 means ``sample_rate / 2``. ``normalize`` gives each filter unit area (librosa's
    ``norm="slaney"``); otherwise each triangle peaks at 1.
    """
    if mel_formula not in ("slaney", "htk"):
        raise ValueError(f"Invalid mel_formula ({mel_formula!r}). Supported values are 'slaney', 'htk'.")
    high = float(freq_high) if freq_high > 0 else float(sample_rate) / 2.0
    if not 0.0 <= freq_low < high:
        raise ValueError(f"need 0 <= freq_low < freq_high, got freq_low={freq_low}, freq_high={high}")
    if nfilter <= 0:
        raise ValueError(f"nfilter must be > 0, got {nfilter}")
    m = _mel_matrix_np(int(nfilter), float(sample_rate), int(nfft), float(freq_low), high, bool(normalize),
                       mel_formula)
    return _on_device(m, dtype, str(device))


# ---- DCT for MFCC ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _dct_matrix_np(n_out: int, n_in: int, dct_type: int, normalize: bool) -> np.ndarray:
    n = np.arange(n_in, dtype=np.float64)[None, :]
    k = np.arange(n_out, dtype=np.float64)[:, None]
    if dct_type == 1:
        if n_in < 2:
            raise ValueError("DCT type 1 needs at least 2 input coefficients")
        m = 2.0 * np.cos(np.pi * k * n / (n_in - 1))
        m[:, 0] = 1.0
        m[:, -1] = (-1.0) ** k[:, 0]
    elif dct_type == 2:
        m = 2.0 * np.cos(np.pi * k * (2 * n + 1) / (2 * n_in))
        if normalize:
            m *= np.sqrt(1.0 / (2 * n_in))
            m[0, :] *= np.sqrt(0.5)
    elif dct_type == 3:
        m = 2.0 * np.cos(np.pi * (2 * k + 1) * n / (2 * n_in))
        m[:, 0] = 1.0
        if normalize:
            m *= np.sqrt(1.0 / (2 * n_in))
            m[:, 0] = np.sqrt(1.0 / n_in)
    elif dct_type == 4:
        m = 2.0 * np.cos(np.pi * (2 * k + 1) * (2 * n + 1) / (4 * n_in))
        if normalize:
            m *= np.sqrt(1.0 / (2 * n_in))
    else:
        raise ValueError(f"Invalid dct_type ({dct_type}). Supported values are 1, 2, 3, 4.")
    m.setflags(write=False)
    return m


def dct_matrix(n_out: int, n_in: int, dct_type: int = 2, normalize: bool = False,
               dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.Tensor:
    """The first ``n_out`` rows of the DCT of the given type on ``n_in`` points, scaled as SciPy's ``dct``
    (``norm=None``, or ``norm="ortho"`` when ``normalize``). Type 1 cannot be normalised."""
    if normalize and dct_type == 1:
        raise ValueError("normalize=True is not supported with dct_type=1")
    if n_out <= 0:
        raise ValueError(f"n_mfcc must be > 0, got {n_out}")
    m = _dct_matrix_np(int(n_out), int(n_in), int(dct_type), bool(normalize))
    return _on_device(m, dtype, str(device))




def lifter_weights(n: int, lifter: float, dtype: torch.dtype = torch.float32,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """Cepstral lifter: ``1 + sin(pi (i + 1) / lifter) * lifter / 2`` for ``i < n`` (ones when ``lifter == 0``)."""
    if lifter == 0:
        return torch.ones(n, dtype=dtype, device=device)
    i = np.arange(1, n + 1, dtype=np.float64)
    return torch.from_numpy(1.0 + (lifter / 2.0) * np.sin(np.pi * i / lifter)).to(device=device, dtype=dtype)


def apply_matrix(x: torch.Tensor, matrix: torch.Tensor, axis: int) -> torch.Tensor:
    """Contract axis ``axis`` of ``x`` with the columns of ``matrix`` (``out[..., i, ...] = sum_j M[i, j] x[..., j,
    ...]``), as one matrix product."""
    axis = axis % x.dim()
    moved = x.movedim(axis, -1)
    out = torch.matmul(moved, matrix.to(dtype=x.dtype).T)
    return out.movedim(-1, axis)


def to_decibels(x: torch.Tensor, *, multiplier: float = 10.0, reference: torch.Tensor | float | None = None,
                cutoff_db: float = -200.0) -> torch.Tensor:
    """``multiplier * log10(max(10**(cutoff_db / multiplier), x / reference))``.

    ``reference`` may be a number, a tensor broadcastable to ``x`` (one per sample of a padded batch), or
    ``None`` for the maximum of ``x``. A reference of 0 (all-zero input) gives ``cutoff_db`` everywhere.
    """
    if multiplier == 0:
        raise ValueError("multiplier must not be 0")
    xf = x if x.is_floating_point() else x.float()
    if reference is None:
        reference = xf.amax() if xf.numel() else xf.new_ones(())
    min_ratio = 10.0 ** (cutoff_db / multiplier)
    if not isinstance(reference, torch.Tensor):     # a number: no host-to-device copy (it would sync the stream)
        ratio = xf / float(reference) if reference > 0 else torch.zeros_like(xf)
        return multiplier * torch.log10(torch.clamp(ratio, min=min_ratio))
    ref = reference.to(dtype=xf.dtype, device=xf.device)
    safe_ref = torch.where(ref > 0, ref, torch.ones_like(ref))
    ratio = torch.where(ref > 0, xf / safe_ref, torch.zeros_like(xf))
    return multiplier * torch.log10(torch.clamp(ratio, min=min_ratio))
