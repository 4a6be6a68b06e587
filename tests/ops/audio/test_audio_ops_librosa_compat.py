"""The audio operators through real pipelines (external_source -> op), on cpu and gpu, against librosa.

Chain under test: spectrogram -> mel_filter_bank -> to_decibels -> mfcc, each compared with the librosa
function of the same step (float32 pipelines: relative error <= 1e-3, dB absolute error <= 1e-2 dB where the
reference is above -100 dB). The spectrograms take librosa's periodic Hann window as ``window_fn`` (sluice's
default is DALI's Hann window).
"""

from __future__ import annotations

import numpy as np
import pytest

from sluice import fn, pipeline_def
from sluice.testing import run_op

from _audio_signals import rel_err, sweep

librosa = pytest.importorskip("librosa")

RATE = 16000


def signals():
    return [sweep(4000, seed=1).astype(np.float32), sweep(2500, f1=6000, seed=2).astype(np.float32),
            sweep(4000, f0=300, seed=3).astype(np.float32)]


def hann(n):
    """librosa's own (periodic) Hann window, for window_fn."""
    return librosa.filters.get_window("hann", n, fftbins=True).tolist()


def run_spectrogram(xs, device, **args):
    """fn.spectrogram in a pipeline (run_op's own ``layout`` argument would shadow the operator's)."""
    @pipeline_def(batch_size=len(xs), num_threads=1, device_id=0 if device == "gpu" else None, seed=1)
    def pipe():
        x = fn.external_source(source=lambda: xs, layout="t" if xs[0].ndim == 1 else "tc")
        return fn.spectrogram(x.gpu() if device == "gpu" else x, device=device, **args)

    p = pipe()
    (out,) = p.run()
    return out


def host(batch):
    return [batch[i].cpu().numpy() for i in range(len(batch))]


def test_spectrogram_op(device):
    xs = signals()
    out = run_op("spectrogram", xs, device=device, nfft=512, window_length=400, window_step=160,
                 window_fn=hann(400))
    assert out.layout() == "ft"
    for x, s in zip(xs, host(out)):
        ref = np.abs(librosa.stft(x.astype(np.float64), n_fft=512, hop_length=160, win_length=400,
                                  pad_mode="reflect")) ** 2
        assert s.shape == ref.shape and s.dtype == np.float32
        assert rel_err(s, ref) <= 1e-3


def test_spectrogram_op_defaults_and_time_major(device):
    xs = [x[:, None] for x in signals()]               # (n, 1) inputs are accepted
    out = run_spectrogram(xs, device, window_length=256, window_step=128, power=1, reflect_padding=False,
                          center_windows=False, window_fn=hann(256))
    tf = run_spectrogram(xs, device, window_length=256, window_step=128, power=1, reflect_padding=False,
                         center_windows=False, layout="tf", window_fn=hann(256))
    assert out.layout() == "ft" and tf.layout() == "tf"
    for x, s, t in zip(xs, host(out), host(tf)):
        ref = np.abs(librosa.stft(x[:, 0].astype(np.float64), n_fft=256, hop_length=128, center=False))
        assert rel_err(s, ref) <= 1e-3
        np.testing.assert_allclose(t, s.T, rtol=1e-6)


def test_mel_db_mfcc_chain(device):
    xs = signals()
    spec = run_op("spectrogram", xs, device=device, nfft=512, window_length=400, window_step=160,
                  window_fn=hann(400))
    specs = host(spec)
    mel = run_op("mel_filter_bank", specs, layout="ft", device=device, sample_rate=RATE, nfilter=40)
    mels = host(mel)
    db = host(run_op("to_decibels", mels, layout="ft", device=device, multiplier=10.0, cutoff_db=-120.0))
    mf = host(run_op("mfcc", db, layout="ft", device=device, n_mfcc=13, normalize=True, lifter=22.0))
    for x, s, m, d, c in zip(xs, specs, mels, db, mf):
        ref_mel = librosa.feature.melspectrogram(y=x.astype(np.float64), sr=RATE, n_fft=512, hop_length=160,
                                                 win_length=400, n_mels=40, pad_mode="reflect")
        assert rel_err(m, ref_mel) <= 1e-3
        ref_db = librosa.power_to_db(ref_mel, ref=np.max, amin=1e-12, top_db=None)
        keep = ref_db > -100
        assert np.abs(d[keep] - ref_db[keep]).max() <= 1e-2
        ref_mfcc = librosa.feature.mfcc(S=d.astype(np.float64), n_mfcc=13, norm="ortho", lifter=22.0)
        assert rel_err(c, ref_mfcc) <= 1e-3


def test_mel_filter_bank_time_major_and_htk(device):
    spec = np.random.default_rng(0).gamma(1.0, 1.0, (7, 129)).astype(np.float32)     # (t, f)
    out = run_op("mel_filter_bank", [spec], layout="tf", device=device, sample_rate=8000, nfilter=20,
                 mel_formula="htk", normalize=False, freq_low=100.0, freq_high=3500.0)
    fb = librosa.filters.mel(sr=8000, n_fft=256, n_mels=20, fmin=100, fmax=3500, htk=True, norm=None)
    assert out.layout() == "tf"
    assert rel_err(host(out)[0], spec.astype(np.float64) @ fb.T) <= 1e-3


def test_to_decibels_fixed_reference(device):
    x = np.abs(np.random.default_rng(1).normal(0, 1, (5, 9))).astype(np.float32)
    out = host(run_op("to_decibels", [x], device=device, multiplier=20.0, reference=1.0, cutoff_db=-60.0))[0]
    ref = librosa.amplitude_to_db(x.astype(np.float64), ref=1.0, amin=1e-3, top_db=None)
    assert np.abs(out - ref).max() <= 1e-3


def test_power_spectrum(device):
    x = np.random.default_rng(2).normal(0, 1, (3, 100)).astype(np.float32)
    out = host(run_op("power_spectrum", [x], device=device, nfft=128, axis=1))[0]
    ref = np.abs(np.fft.rfft(x.astype(np.float64), n=128, axis=1)) ** 2
    assert out.shape == (3, 65) and rel_err(out, ref) <= 1e-4
    mag = host(run_op("power_spectrum", [x], device=device, power=1))[0]
    assert rel_err(mag, np.abs(np.fft.rfft(x.astype(np.float64), axis=-1))) <= 1e-4


@pytest.mark.parametrize("border", ["zero", "clamp", "reflect"])
def test_preemphasis(device, border):
    xs = [sweep(50).astype(np.float32), sweep(30, seed=4).astype(np.float32)]
    out = host(run_op("preemphasis_filter", xs, device=device, border=border, preemph_coeff=0.9))
    for x, y in zip(xs, out):
        xb = {"zero": 0.0, "clamp": x[0], "reflect": x[1]}[border]
        ref = librosa.effects.preemphasis(x.astype(np.float64), coef=0.9, zi=np.array(-0.9 * xb))  # lfilter state: -coef * x_border
        np.testing.assert_allclose(y, ref, atol=1e-6)
    ints = host(run_op("preemphasis_filter", [np.array([1000, -32768, 32767], np.int16)], device=device,
                       dtype="INT16", preemph_coeff=0.5))[0]
    assert ints.dtype == np.int16 and ints.tolist() == [500, -32768, 32767]


def test_nonsilent_region(device):
    x = np.zeros(10000, np.float32)
    x[3000:6000] = sweep(3000).astype(np.float32)
    begin, length = run_op("nonsilent_region", [x, np.zeros(100, np.float32)], device=device, cutoff_db=-40,
                           window_length=256)
    b, n = int(begin[0].cpu()), int(length[0].cpu())
    assert 3000 - 256 < b <= 3000 and 6000 <= b + n < 6000 + 256
    assert int(length[1].cpu()) == 0
    # librosa.effects.trim finds the same region within one frame.
    _, (lb, le) = librosa.effects.trim(x, top_db=40, frame_length=256, hop_length=64)
    assert abs(b - lb) <= 256 and abs(b + n - le) <= 256


def test_ragged_batches_on_every_op(device):
    xs = [sweep(n, seed=n).astype(np.float32) for n in (900, 1700, 0)]
    spec = run_op("spectrogram", xs, device=device, nfft=256, window_length=200, window_step=100)
    assert spec.shape() == [(129, 10), (129, 18), (129, 0)]   # an empty signal has no windows
    specs = host(spec)
    for op, args, shape in [("mel_filter_bank", {"nfilter": 10, "sample_rate": RATE}, (10,)),
                            ("to_decibels", {}, (129,)), ("mfcc", {"n_mfcc": 5}, (5,))]:
        out = run_op(op, specs, layout="ft", device=device, **args)
        assert out.shape() == [shape + (s.shape[1],) for s in specs]
        one = [host(run_op(op, [s], layout="ft", device=device, **args))[0] for s in specs]
        for a, b in zip(host(out), one):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)
