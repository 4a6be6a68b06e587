"""fn.decoders.audio and fn.audio_resample in pipelines, against soundfile and soxr; bad files name the file."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile
import soxr
import torch

from sluice import fn, pipeline_def, types
from sluice.errors import PipelineError
from sluice.testing import run_op

from _audio_signals import encode, sweep, tones

RATE = 16000


def u8(data: bytes) -> np.ndarray:
    return np.frombuffer(data, np.uint8)


def test_decoder_outputs_match_soundfile():
    stereo = np.stack([sweep(RATE), -0.5 * sweep(RATE)], axis=1)
    files = [encode(stereo, RATE, "WAV", "PCM_16"), encode(stereo[:8000], RATE, "FLAC", "PCM_24")]
    audio, rate = run_op("decoders.audio", [u8(f) for f in files], dtype=types.INT16)
    assert audio.layout() == "tc"
    for i, f in enumerate(files):
        ref, r = soundfile.read(io.BytesIO(f), dtype="int16", always_2d=True)
        np.testing.assert_array_equal(audio[i].numpy(), ref)
        assert rate[i].item() == r and rate[i].dtype.is_floating_point
    mono, _ = run_op("decoders.audio", [u8(f) for f in files], downmix=True)
    assert mono.layout() == "t" and mono[0].shape == (RATE,) and mono[0].dtype.is_floating_point


def test_decoder_window_and_resample():
    x = tones(2 * RATE, RATE)
    data = u8(encode(x, RATE, "WAV", "FLOAT"))
    audio, rate = run_op("decoders.audio", [data, data], downmix=True, start_time=0.5, duration=1.0)
    np.testing.assert_array_equal(audio[0].numpy(), x[8000:24000].astype(np.float32))
    padded, _ = run_op("decoders.audio", [data], downmix=True, start_time=1.5, duration=1.0,
                       out_of_bounds_policy="pad")
    assert padded[0].shape == (RATE,) and not padded[0][8000:].any()
    res, rate = run_op("decoders.audio", [data], downmix=True, sample_rate=8000.0)
    ref = soxr.resample(x.astype(np.float32), RATE, 8000, quality="HQ")
    assert rate[0].item() == 8000.0 and res[0].shape == ref.shape
    np.testing.assert_allclose(res[0].numpy(), ref, atol=1e-6)


def test_decoder_errors_name_the_file(tmp_path):
    good = encode(sweep(RATE), RATE, "WAV", "PCM_16")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "ok.wav").write_bytes(good)
    (tmp_path / "a" / "truncated.wav").write_bytes(good[: len(good) // 2])

    @pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=1)
    def pipe():
        data, _ = fn.readers.file(file_root=str(tmp_path))
        return fn.decoders.audio(data)

    p = pipe()
    with pytest.raises(PipelineError, match="truncated.wav"):
        p.run()
    with pytest.raises(Exception, match="past its end"):
        run_op("decoders.audio", [u8(good)], start_time=0.5, duration=1.0)
    with pytest.raises(Exception, match="empty"):
        run_op("decoders.audio", [np.zeros(0, np.uint8)])


@pytest.mark.parametrize("dtype", [None, types.INT16, types.FLOAT])
def test_resample_op_matches_soxr(device, dtype):
    xs = [tones(4410, 44100).astype(np.float32), tones(3000, 44100, freqs=(700.0,), amps=(0.5,)).astype(np.float32)]
    out = run_op("audio_resample", xs, device=device, in_rate=44100.0, out_rate=16000.0, dtype=dtype)
    # DALI's length is ceil(n * 16000 / 44100): 1600 and 1089, where soxr stops at round(): 1600 and 1088
    assert [len(y) for y in out] == [1600, 1089]
    for x, y in zip(xs, out):
        ref = soxr.resample(x, 44100, 16000, quality="HQ")
        y = y.cpu().numpy()[: ref.size]
        if dtype is types.INT16:
            assert y.dtype == np.int16
            y = y / 32767.0
        m = ref.size // 10
        tol = 1e-6 if device == "cpu" and dtype is not types.INT16 else 1e-3
        assert np.abs(y[m:-m] - ref[m:-m]).max() <= tol


def test_resample_op_scale_out_length_and_int_input(device):
    x = (tones(1000, 8000) * 32767).astype(np.int16)
    by_scale = run_op("audio_resample", [x], device=device, scale=2.0)
    by_len = run_op("audio_resample", [x], device=device, out_length=2000)
    assert by_scale[0].shape == (2000,) and by_scale[0].dtype == torch.int16
    np.testing.assert_array_equal(by_scale[0].cpu().numpy(), by_len[0].cpu().numpy())
    with pytest.raises(Exception, match="exactly one"):
        run_op("audio_resample", [x], device=device, scale=2.0, in_rate=1.0, out_rate=2.0)


def test_uniform_batch_is_decoded_into_one_buffer():
    stereo = np.stack([sweep(RATE), -0.5 * sweep(RATE, seed=3)], axis=1)
    files = [u8(encode(stereo, RATE, "WAV", "PCM_16")), u8(encode(stereo[::-1].copy(), RATE, "FLAC", "PCM_16"))]
    for downmix in (False, True):
        audio, rate = run_op("decoders.audio", files, dtype=types.INT16, downmix=downmix, start_time=0.1,
                             duration=0.5)
        assert audio.is_dense_tensor() and rate.as_tensor().tolist() == [RATE, RATE]
        for i, f in enumerate(files):
            ref, _ = soundfile.read(io.BytesIO(f.tobytes()), dtype="int16", always_2d=True)
            ref = ref[1600:9600]
            if downmix:
                ref = np.rint(ref.astype(np.float64).mean(axis=1)).astype(np.int16)
            np.testing.assert_array_equal(audio[i].numpy(), ref)


def test_variable_length_batch_lengths_and_padding(tmp_path):
    """Ragged audio batches: lengths come from fn.shapes, fn.pad makes them one tensor, spectra follow."""
    (tmp_path / "c").mkdir()
    lengths = [16000, 12000, 4000]
    for i, n in enumerate(lengths):
        (tmp_path / "c" / f"{i}.wav").write_bytes(encode(sweep(n, seed=i), RATE, "WAV", "PCM_16"))

    @pipeline_def(batch_size=3, num_threads=2, device_id=None, seed=1)
    def pipe():
        data, _ = fn.readers.file(file_root=str(tmp_path))
        audio, _ = fn.decoders.audio(data, downmix=True)
        spec = fn.spectrogram(audio, nfft=256, window_length=256, window_step=128)
        return fn.shapes(audio), fn.pad(audio, axes=[0]), fn.shapes(spec)

    shapes, padded, spec_shapes = pipe().run()
    assert [int(s[0]) for s in shapes] == lengths
    assert padded.is_dense_tensor() and padded.as_tensor().shape == (3, 16000)
    assert [tuple(int(v) for v in s) for s in spec_shapes] == [(129, n // 128 + 1) for n in lengths]


def test_per_sample_windows_from_datanodes():
    """The audio-visual case: each sample's window (start, duration in seconds) comes from another node."""
    x = tones(3 * RATE, RATE)
    data = u8(encode(x, RATE, "WAV", "FLOAT"))
    starts = [np.float32(0.0), np.float32(1.25), np.float32(2.5)]

    @pipeline_def(batch_size=3, num_threads=2, device_id=None, seed=1)
    def pipe():
        enc = fn.external_source(source=lambda: [data] * 3)
        t0 = fn.external_source(source=lambda: starts)
        audio, _ = fn.decoders.audio(enc, downmix=True, start_time=t0, duration=1.0, out_of_bounds_policy="pad")
        return audio

    (audio,) = pipe().run()
    assert audio.is_dense_tensor()
    for i, s in enumerate(starts):
        a = int(round(float(s) * RATE))
        want = np.zeros(RATE, np.float32)
        got = x[a: a + RATE].astype(np.float32)
        want[: got.size] = got
        np.testing.assert_array_equal(audio[i].numpy(), want)
