"""Decoding against soundfile's own full decode: every format, dtype, downmix, time windows and bad files."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

from sluice.backends.audio import AudioDecodeError, audio_info, decode_audio

from _audio_signals import encode, sweep

RATE = 16000
FORMATS = [("WAV", "PCM_U8"), ("WAV", "PCM_16"), ("WAV", "PCM_24"), ("WAV", "PCM_32"), ("WAV", "FLOAT"),
           ("FLAC", "PCM_16"), ("OGG", "VORBIS"), ("OGG", "OPUS"), ("MP3", "MPEG_LAYER_III")]


def stereo(n=RATE, rate=RATE):
    x = sweep(n, rate=rate)
    return np.stack([x, -0.5 * x], axis=1)


def file_for(fmt, sub):
    rate = 48000 if sub == "OPUS" else RATE
    return encode(stereo(rate, rate), rate, fmt, sub), rate


@pytest.mark.parametrize("fmt,sub", FORMATS)
@pytest.mark.parametrize("dtype", ["float32", "int16", "int32"])
def test_full_decode_matches_soundfile(fmt, sub, dtype):
    data, rate = file_for(fmt, sub)
    out, r = decode_audio(data, dtype=dtype)
    ref, rr = soundfile.read(io.BytesIO(data), dtype=dtype, always_2d=True)
    assert r == rr == rate and out.dtype == np.dtype(dtype)
    if fmt == "MP3":  # mpg123 output differs by an ulp / 1 LSB with the read size
        scale = 1.0 if dtype == "float32" else float(np.iinfo(dtype).max)
        np.testing.assert_allclose(out / scale, ref / scale, atol=max(2e-6, 1.5 / scale), rtol=0)  # 1 LSB
    else:
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("fmt,sub", FORMATS)
def test_window_equals_slice_of_full_decode(fmt, sub):
    data, rate = file_for(fmt, sub)
    full, _ = decode_audio(data)
    # mpg123's output may differ by an ulp with where decoding starts; everything else is bit-exact
    same = np.testing.assert_array_equal if fmt != "MP3" else lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6)
    for start, duration in ((0.25, 0.5), (0.013, 0.2), (0.6071, 0.3), (0.999, 0.001)):
        win, _ = decode_audio(data, start_time=start, duration=duration)
        s, n = int(round(start * rate)), int(round(duration * rate))
        assert win.shape == (n, 2)
        same(win, full[s: s + n])
    tail, _ = decode_audio(data, start_time=0.75)
    same(tail, full[int(0.75 * rate):])


def test_downmix_averages_channels():
    data = encode(stereo(), RATE, "WAV", "FLOAT")
    mono, _ = decode_audio(data, downmix=True)
    ref, _ = soundfile.read(io.BytesIO(data), dtype="float32")
    assert mono.shape == (RATE,)
    np.testing.assert_allclose(mono, ref.mean(axis=1), atol=1e-7)
    mono16, _ = decode_audio(data, downmix=True, dtype="int16")
    assert mono16.dtype == np.int16 and mono16.ndim == 1


def test_window_past_the_end_policies():
    data = encode(stereo(), RATE, "WAV", "PCM_16")        # 1 s
    full, _ = decode_audio(data)
    with pytest.raises(ValueError, match=r"clip\.wav.*past its end"):
        decode_audio(data, start_time=0.9, duration=0.5, source="clip.wav")
    padded, _ = decode_audio(data, start_time=0.9, duration=0.5, out_of_bounds_policy="pad")
    assert padded.shape == (8000, 2)
    np.testing.assert_array_equal(padded[:1600], full[14400:])
    assert not padded[1600:].any()
    trimmed, _ = decode_audio(data, start_time=0.9, duration=0.5, out_of_bounds_policy="trim_to_shape")
    np.testing.assert_array_equal(trimmed, full[14400:])
    after, _ = decode_audio(data, start_time=2.0, duration=0.5, out_of_bounds_policy="pad")
    assert after.shape == (8000, 2) and not after.any()
    with pytest.raises(ValueError, match="start_time"):
        decode_audio(data, start_time=-1.0)
    with pytest.raises(ValueError, match="out_of_bounds_policy"):
        decode_audio(data, start_time=0.5, out_of_bounds_policy="wrap")


def test_zero_length_audio_decodes_to_empty():
    data = encode(np.zeros((0, 1)), RATE, "WAV", "PCM_16")
    out, rate = decode_audio(data)
    assert out.shape == (0, 1) and rate == RATE
    assert decode_audio(data, downmix=True)[0].shape == (0,)


@pytest.mark.parametrize("fmt,sub", [("WAV", "PCM_16"), ("FLAC", "PCM_16"), ("OGG", "VORBIS"),
                                     ("MP3", "MPEG_LAYER_III")])
def test_truncated_files_raise_naming_the_file(fmt, sub):
    data, _ = file_for(fmt, sub)
    for cut in (len(data) // 2, 40):
        with pytest.raises(AudioDecodeError, match=r"bad\.bin"):
            decode_audio(data[:cut], source="bad.bin")


def test_empty_garbage_and_unsupported_files():
    with pytest.raises(AudioDecodeError, match=r"a\.wav.*empty"):
        decode_audio(b"", source="a.wav")
    with pytest.raises(AudioDecodeError, match=r"Supported formats"):
        decode_audio(np.random.default_rng(0).integers(0, 255, 5000, dtype=np.uint8), source="noise.bin")
    # A WAV header announcing a codec libsndfile does not decode (format tag 0x2000, Dolby AC-3).
    data = bytearray(encode(stereo(1000), RATE, "WAV", "PCM_16"))
    data[20:22] = (0x2000).to_bytes(2, "little")
    with pytest.raises(AudioDecodeError, match=r"ac3\.wav"):
        decode_audio(bytes(data), source="ac3.wav")
    with pytest.raises(ValueError, match="dtype"):
        decode_audio(bytes(data), dtype="float64")


def test_info_without_decoding():
    data = encode(stereo(), RATE, "FLAC", "PCM_24")
    info = audio_info(data)
    assert info == {"format": "FLAC", "subtype": "PCM_24", "sample_rate": RATE, "channels": 2, "frames": RATE}


def test_mp3_without_xing_header_seeks_exactly():
    """An MP3 without a Xing/LAME header (ffmpeg's write_xing=0): mpg123 still lands on the exact sample."""
    av = pytest.importorskip("av")
    rate, n = 44100, 44100 * 3
    x = sweep(n, rate=rate).astype(np.float32)
    buf = io.BytesIO()
    try:
        with av.open(buf, "w", format="mp3", options={"write_xing": "0"}) as c:
            stream = c.add_stream("libmp3lame", rate=rate, layout="mono")
            for i in range(0, n, 4410):
                frame = av.AudioFrame.from_ndarray(x[None, i:i + 4410].copy(), format="flt", layout="mono")
                frame.sample_rate = rate
                for packet in stream.encode(frame):
                    c.mux(packet)
            for packet in stream.encode(None):
                c.mux(packet)
    except Exception as exc:  # noqa: BLE001 - FFmpeg builds without libmp3lame
        pytest.skip(f"PyAV cannot encode MP3 here: {exc}")
    data = buf.getvalue()
    full, _ = decode_audio(data)
    for start in (0.1, 1.0, 2.2):
        win, _ = decode_audio(data, start_time=start, duration=0.3)
        s = int(round(start * rate))
        np.testing.assert_allclose(win, full[s: s + win.shape[0]], atol=1e-6)
        assert win.shape[0] == int(round(0.3 * rate))
