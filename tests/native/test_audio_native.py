"""sluice.native.audio: the compiled core and its pure-Python twin (soundfile) give the same samples and the same
errors, and both equal soundfile.read, on every WAV subtype, channel count, dtype, downmix and window, on the
formats libsndfile decodes, and on bad files. Without the core only the twin runs (against soundfile)."""

from __future__ import annotations

import io
import re
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from sluice import native
from sluice.backends.audio import plan_windows
from sluice.native.audio import OK, host_tensor, open_files

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops" / "audio"))
from _audio_signals import encode, sweep  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _twins import core_and_twin, reference, run  # noqa: E402

RATE = 8000
SUBTYPES = ["PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE"]
DTYPES = ["int16", "int32", "float32"]


def signal(n: int, channels: int, seed: int = 0) -> np.ndarray:
    x = sweep(n, rate=RATE, amp=0.9, seed=seed)
    x[::37] = 1.0                     # full scale both ways: the conversions' edges
    x[1::37] = -1.0
    cols = [x * (1 - 0.1 * c) * (-1) ** c for c in range(channels)]
    return np.stack(cols, axis=1) if channels > 1 else x


def both(files: list[bytes], **kw):
    """``run`` with the core and with the twin: identical samples and errors (the twin alone without the core)."""
    return core_and_twin(run, files, **kw)


@pytest.mark.parametrize("fmt", ["WAV", "WAVEX"])
@pytest.mark.parametrize("subtype", SUBTYPES)
def test_every_wav_subtype_equals_soundfile(fmt, subtype):
    files = [encode(signal(257, ch, seed=ch), RATE, fmt, subtype) for ch in (1, 2, 3, 9)]  # 9: pairwise sums
    if native.available():
        with open_files([np.frombuffer(f, np.uint8) for f in files], ["x"] * 4) as fl:
            assert (fl.payloads()[0] >= 0).all()            # converted by the core, not decoded by libsndfile
    for dtype in DTYPES:
        for downmix in (False, True):
            out, errors = both(files, dtype=dtype, downmix=downmix)
            assert not errors
            for f, got in zip(files, out):
                np.testing.assert_array_equal(got, reference(f, dtype, downmix))


@pytest.mark.parametrize("fmt,sub", [("FLAC", "PCM_16"), ("FLAC", "PCM_24"), ("AIFF", "PCM_16"), ("AIFF", "FLOAT"),
                                     ("W64", "PCM_24"), ("RF64", "DOUBLE"), ("WAV", "ULAW"), ("OGG", "VORBIS"),
                                     ("MP3", "MPEG_LAYER_III")])
def test_libsndfile_formats_equal_soundfile(fmt, sub):
    files = [encode(signal(RATE // 2, ch, seed=ch), RATE, fmt, sub) for ch in (1, 2)]
    if native.available():
        with open_files([np.frombuffer(f, np.uint8) for f in files], ["x"] * 2) as fl:
            assert (fl.payloads()[0] == -1).all()           # decoded by libsndfile
    for dtype in DTYPES:
        for downmix in (False, True):
            out, errors = both(files, dtype=dtype, downmix=downmix)
            assert not errors
            for f, got in zip(files, out):
                if fmt == "MP3":  # soundfile.read's io.BytesIO feeds mpg123 otherwise: 1 LSB apart at times
                    scale = 1.0 if dtype == "float32" else float(np.iinfo(dtype).max)
                    np.testing.assert_allclose(got / scale, reference(f, dtype, downmix) / scale, rtol=0,
                                               atol=max(2e-6, 1.5 / scale))
                else:
                    np.testing.assert_array_equal(got, reference(f, dtype, downmix))


@pytest.mark.parametrize("sub", ["PCM_16", "FLOAT"])
def test_windows_with_each_policy(sub):
    files = [encode(signal(RATE, 2, seed=s), RATE, fmt, sub) for s, fmt in ((0, "WAV"), (1, "FLAC" if sub ==
                                                                                           "PCM_16" else "AIFF"))]
    full = [reference(f, "int32", False) for f in files]
    for start, duration in ((0.25, 0.5), (0.013, 0.2), (0.999, 0.001), (0.75, 0.0)):
        out, errors = both(files, dtype="int32", start=start, duration=duration)
        s = int(round(start * RATE))
        e = s + int(round(duration * RATE)) if duration else RATE
        assert not errors and all(np.array_equal(o, f[s:e]) for o, f in zip(out, full))
    for start in (0.9, 1.5):                                  # past the end: silence, cut, or an error
        padded, _ = both(files, dtype="int32", start=start, duration=0.5, policy="pad")
        trimmed, _ = both(files, dtype="int32", start=start, duration=0.5, policy="trim_to_shape")
        s = min(int(round(start * RATE)), RATE)
        for p, t, f in zip(padded, trimmed, full):
            assert p.shape == (4000, 2) and not p[RATE - s:].any()
            np.testing.assert_array_equal(p[: RATE - s], f[s:])
            np.testing.assert_array_equal(t, f[s:])
        _, errors = both(files, dtype="int32", start=start, duration=0.5)
        assert sorted(errors) == [0, 1] and "f1.bin" in errors[1] and "reaches past its end" in errors[1]


def float_wav(values: np.ndarray, subtype: str, fmt: str = "WAV") -> bytes:
    buf = io.BytesIO()
    with np.errstate(over="ignore"):                          # 1e300 is inf in float32
        soundfile.write(buf, values if subtype == "DOUBLE" else values.astype(np.float32), RATE, format=fmt,
                        subtype=subtype)
    return buf.getvalue()


EXTREMES = np.array([0.0, 0.5, -1.5, 2.5, 32766.5, 32767.6, -32768.4, -32767.5, 40000.5, 2147483646.6, 2.2e9,
                     -2147483647.4, -3e9, 1e10, np.inf, -np.inf, np.nan, 7.0, 1e300, -0.0])


@pytest.mark.parametrize("fmt,subtype", [("WAV", "FLOAT"), ("WAV", "DOUBLE"), ("AIFF", "FLOAT")])
def test_float_files_keep_libsndfiles_clipping_and_finite_refuses_them(fmt, subtype):
    x = np.stack([EXTREMES, np.full_like(EXTREMES, 0.25)], axis=1)
    files = [float_wav(x, subtype, fmt), float_wav(0.5 * signal(300, 2), subtype, fmt)]
    for dtype in DTYPES:
        for downmix in (False, True):
            out, errors = both(files, dtype=dtype, downmix=downmix, finite=False)
            assert not errors
            with np.errstate(invalid="ignore", over="ignore"):
                for f, got in zip(files, out):
                    np.testing.assert_array_equal(got, reference(f, dtype, downmix))
    _, errors = both(files, finite=True)
    assert list(errors) == [0] and "f0.bin" in errors[0] and "frame 9 " in errors[0]   # 2147483646.6 > 1e6
    _, errors = both(files, start=14 / RATE, duration=3 / RATE)                       # inf, -inf, nan
    assert "frame 14 " in errors[0]
    _, errors = both(files, start=1 / RATE, duration=8 / RATE, downmix=True)         # up to 40000.5: kept
    assert not errors


def with_header(data: bytes, **fields) -> bytes:
    """A WAV whose fmt chunk (at byte 20) says otherwise: ``rate`` or ``code``."""
    b = bytearray(data)
    if "rate" in fields:
        struct.pack_into("<I", b, 24, fields["rate"])
    if "code" in fields:
        struct.pack_into("<H", b, 20, fields["code"])
    return bytes(b)


def test_bad_files_fail_alike_naming_the_file():
    good = encode(signal(RATE, 1), RATE, "WAV", "PCM_16")
    ogg = encode(signal(RATE, 1), RATE, "OGG", "VORBIS")
    flac = encode(signal(RATE, 1), RATE, "FLAC", "PCM_16")
    files = [good, b"", b"not audio at all" * 40, good[: len(good) // 2], ogg[: ogg.rfind(b"OggS") + 3],
             flac[: len(flac) // 2], with_header(good, rate=2_000_000_000), with_header(good, rate=0),
             with_header(good, code=0x2000), good[:40]]
    out, errors = both(files)
    assert out[0] is not None and sorted(errors) == list(range(1, len(files)))
    for i, e in errors.items():
        assert f"f{i}.bin" in e, e
    assert "empty" in errors[1] and "Supported formats" in errors[2]
    assert "data chunk announces" in errors[3] and "Ogg stream is truncated" in errors[4]
    assert "flac decoder lost sync" in errors[5]                  # libsndfile's own words, while reading
    assert "2000000000 Hz" in errors[6] and "1 Hz..1000000 Hz" in errors[6]


def _flipped(data: bytes, count: int, seed: int) -> bytes:
    """``data`` with ``count`` random bits flipped in its second half (the audio pages, past the headers)."""
    rng = np.random.default_rng(seed)
    b = bytearray(data)
    for pos in rng.integers(len(b) // 2, len(b), count):
        b[pos] ^= 1 << int(rng.integers(0, 8))
    return bytes(b)


def test_damaged_ogg_fails_alike_naming_the_file_and_page():
    """An Ogg/Vorbis file cut at 99 % or 90 % (inside its last page, whose header still says end-of-stream) or
    with 1 or 64 flipped bits: soundfile decodes it silently short (or to nothing); core and twin refuse it,
    naming the file, the page and the file's end, identically."""
    rng = np.random.default_rng(3)
    ogg = encode(0.3 * rng.standard_normal(3 * RATE), RATE, "OGG", "VORBIS")
    files = [ogg, ogg[: len(ogg) * 99 // 100], ogg[: len(ogg) * 9 // 10], _flipped(ogg, 1, 0), _flipped(ogg, 64, 1)]
    for bad in files[1:]:                                      # the premise: libsndfile alone says nothing
        assert soundfile.read(io.BytesIO(bad))[0].shape[0] < 3 * RATE
    out, errors = both(files)
    assert out[0] is not None and out[0].shape[0] == 3 * RATE and sorted(errors) == [1, 2, 3, 4]
    last = ogg.rfind(b"OggS")
    for i in (1, 2):
        assert errors[i] == (f"cannot decode audio in file 'f{i}.bin': the Ogg stream is truncated (the file ends "
                             f"at byte {len(files[i])}, inside the page that starts at byte {last})")
    for i in (3, 4):
        assert re.fullmatch(rf"cannot decode audio in file 'f{i}\.bin': the Ogg page at byte \d+ is damaged \(its "
                            r"checksum or its capture pattern is wrong\): the file is corrupt", errors[i]), errors[i]
        page = int(re.search(r"byte (\d+)", errors[i]).group(1))
        assert files[i][page:page + 4] == b"OggS" and page >= len(ogg) // 2 - 8192


def test_region_and_threads_give_the_same_as_one_call():
    files = [encode(signal(700 + 50 * s, 1 + s % 3, seed=s), RATE, fmt, sub)
             for s, (fmt, sub) in enumerate([("WAV", "PCM_16"), ("FLAC", "PCM_24"), ("WAV", "FLOAT"),
                                             ("WAV", "PCM_U8"), ("OGG", "VORBIS"), ("WAV", "PCM_32")])]
    files.insert(3, b"")                                      # a failure among them, in its chunk
    one, errors = both(files, dtype="int16", downmix=True)
    for kw in ({"region": True}, {"parts": 3}, {"region": True, "parts": 4}):
        out, errs = both(files, dtype="int16", downmix=True, **kw)
        assert errs == errors and list(errs) == [3]
        for a, b in zip(out, one):
            assert (a is None and b is None) or np.array_equal(a, b)


@pytest.mark.skipif(not native.available(), reason="the compiled core is not built")
def test_output_blocks_are_recycled_once_every_view_is_gone():
    a = host_tensor((1000, 500), torch.float32)
    where = a.data_ptr()
    view = a[10:]
    del a
    b = host_tensor((1000, 500), torch.float32)
    assert b.data_ptr() != where                              # the view still holds the first block
    del view
    c = host_tensor((999, 500), torch.float32)                # a little smaller: the same block again
    assert c.data_ptr() == where and c.shape == (999, 500)
    c.fill_(1.0)
    assert float(c.sum()) == 999 * 500


@pytest.mark.skipif(not native.available(), reason="the compiled core is not built")
@pytest.mark.parametrize("subtype", SUBTYPES)
def test_outputs_written_with_streaming_stores_equal_soundfile(subtype):
    # An output buffer of 32 MiB or more (a batch of long clips) is written with streaming stores, chunk by chunk:
    # windows of several chunks and a partial one, at offsets of every alignment, and nothing outside them touched.
    files = [encode(signal(5003, ch, seed=ch), RATE, "WAV", subtype) for ch in (1, 2, 3, 9)]
    n = len(files)
    for dtype in DTYPES:
        width = np.dtype(dtype).itemsize
        out = np.full((32 << 20) // width, 7, dtype)
        for downmix in (False, True):
            with open_files([np.frombuffer(f, np.uint8) for f in files], [f"f{i}" for i in range(n)]) as fl:
                start, n_read, n_out, _ = plan_windows(fl.rate, fl.frames, [0.01] * n, [0.5] * n, "error",
                                                      ["x"] * n, valid=fl.status == OK)
                at = np.array([1, 4099, 123457, out.size - int(n_out[-1]) * (1 if downmix else 9) - 3])
                assert not fl.decode(0, n, out, at * width, start, n_read, n_out, dtype, downmix)
                for i, f in enumerate(files):
                    count = int(n_out[i]) * (1 if downmix else int(fl.channels[i]))
                    got = out[at[i]: at[i] + count]
                    s = int(start[i])
                    np.testing.assert_array_equal(got.reshape(reference(f, dtype, downmix)[s: s + 4000].shape),
                                                  reference(f, dtype, downmix)[s: s + 4000])
                    assert out[at[i] - 1] == 7 and out[at[i] + count] == 7
                    out[at[i]: at[i] + count] = 7
    assert (out == 7).all()
