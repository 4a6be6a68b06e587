"""sluice's own FLAC decoder (the compiled core's flac.cpp) gives exactly soundfile's samples (libsndfile's
conversions for each bit depth) as float32, int16 and int32, interleaved and downmixed, whole and in windows: on
FLACs encoded by soundfile (8/16/24-bit, 1-6 channels, several rates, lengths and compression levels) and on
streams written by tests/native/_flac_writer.py with every coding choice (subframe kinds, LPC orders 1-32 and wide
sums, Rice2, escapes, wasted bits, stereo modes, variable block sizes). The pure-Python twin (soundfile) agrees.
Corrupt, truncated and empty files fail naming the file (and the operator); what the decoder refuses goes to
libsndfile, which still serves the other formats."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from sluice import fn, native, pipeline_def, types
from sluice.errors import PipelineError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _flac_writer import Sub, flac_stream  # noqa: E402
from _twins import core_and_twin, reference, run  # noqa: E402

DTYPES = ["float32", "int16", "int32"]
CORE = native.available()


def flac(x: np.ndarray, rate: int, subtype: str, level: float | None = None) -> bytes:
    buf = io.BytesIO()
    kw = {} if level is None else {"compression_level": level}
    soundfile.write(buf, x, rate, format="FLAC", subtype=subtype, **kw)
    return buf.getvalue()


def signal(n: int, channels: int, rate: int, kind: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / rate
    cols = []
    for c in range(channels):
        if kind == "silence":
            x = np.zeros(n)
        elif kind == "noise":                                 # full scale: barely compressible, escapes, verbatim
            x = rng.uniform(-1.0, 1.0, n)
        else:                                                 # a chirp plus a little noise
            x = 0.6 * np.sin(2 * np.pi * (110 * (c + 1) * t + 900 * t * t)) + 0.02 * rng.normal(size=n)
        cols.append(x)
    x = np.clip(np.stack(cols, axis=1), -1.0, 1.0)
    return x if channels > 1 else x[:, 0]


def decode(files: list[bytes], dtype="float32", downmix=False, start=0.0, duration=0.0, policy="error"):
    """The CPU decoder's calls (open, plan, one decode) on FLAC files: each file's samples (None where it failed)
    and the error message of each failed file."""
    return run(files, dtype=dtype, downmix=downmix, start=start, duration=duration, policy=policy, suffix=".flac")


@contextlib.contextmanager
def counted(decoded: int | None = None, refused: int = 0):
    """Checks how many windows flac.cpp decoded and how many files it refused inside the block (with the core)."""
    if not CORE:
        yield
        return
    before = native.core().flac_counts()
    yield
    after = native.core().flac_counts()
    if decoded is not None:
        assert after[0] - before[0] == decoded
    assert after[1] - before[1] == refused


def both(files: list[bytes], **kw):
    """decode with the core and with the twin: identical samples and errors."""
    return core_and_twin(decode, files, **kw)


@pytest.mark.parametrize("subtype", ["PCM_S8", "PCM_16", "PCM_24"])
@pytest.mark.parametrize("channels", [1, 2, 3, 6])
def test_soundfile_flacs_equal_soundfile(subtype, channels):
    cases = [(8000, 1, "chirp", None), (44100, 4096, "chirp", 0.0), (16000, 4097, "noise", 1.0),
             (22050, 12345, "chirp", 0.5), (48000, 9000, "silence", None), (44100, 30001, "chirp", 1.0)]
    files = [flac(signal(n, channels, rate, kind, seed=n), rate, subtype, level) for rate, n, kind, level in cases]
    for dtype in DTYPES:
        for downmix in (False, True):
            with counted(decoded=len(files)):
                out = decode(files, dtype=dtype, downmix=downmix)[0]
            for f, got in zip(files, out):
                np.testing.assert_array_equal(got, reference(f, dtype, downmix))


def test_twin_and_libsndfile_path_agree_with_the_decoder():
    files = [flac(signal(20000, ch, 16000, "chirp", seed=ch), 16000, sub) for ch, sub in
             ((1, "PCM_16"), (2, "PCM_24"), (3, "PCM_S8"))]
    for dtype in DTYPES:
        out, errors = both(files, dtype=dtype, downmix=True, start=0.3, duration=0.6)
        assert not errors
        if CORE:
            before = native.core().native_flac(False)             # the old path: libsndfile decodes
            try:
                with counted(decoded=0):
                    old, _ = decode(files, dtype=dtype, downmix=True, start=0.3, duration=0.6)
            finally:
                native.core().native_flac(before)
            for a, b in zip(out, old):
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("policy", ["error", "pad", "trim_to_shape"])
def test_windows_equal_slices_of_soundfiles_decode(policy):
    rate = 8000
    files = [flac(signal(3 * 4096 + 77, ch, rate, "chirp", seed=ch), rate, sub) for ch, sub in
             ((1, "PCM_16"), (2, "PCM_24"))]
    full = [reference(f, "int32", False) for f in files]
    # inside the first frame, on frame boundaries (4096 samples), across them, in the last frame, to the end
    for s, d in ((0, 100), (4096, 4096), (4095, 2), (4097, 5000), (3 * 4096 + 10, 50), (9000, 0), (1, 0)):
        with counted(decoded=len(files)):
            out, errors = both(files, dtype="int32", start=s / rate, duration=d / rate, policy=policy)
        assert not errors
        for o, f in zip(out, full):
            np.testing.assert_array_equal(o, f[s: s + d] if d else f[s:])
    n = len(full[0])
    out, errors = both(files, dtype="int32", start=(n - 100) / rate, duration=300 / rate, policy=policy)
    if policy == "error":
        assert sorted(errors) == [0, 1] and "f1.flac" in errors[1] and "reaches past its end" in errors[1]
    else:
        for o, f in zip(out, full):
            np.testing.assert_array_equal(o[:100], f[n - 100:])
            assert len(o) == (300 if policy == "pad" else 100) and not o[100:].any()


def _ints(n: int, bits: int, seed: int, kind: str = "chirp") -> list[int]:
    """n samples of `bits` bits: a chirp with noise, or full-scale noise."""
    rng = np.random.default_rng(seed)
    top = (1 << (bits - 1)) - 1
    if kind == "noise":
        x = rng.integers(-top - 1, top + 1, n)
    else:
        t = np.arange(n)
        x = np.rint(0.7 * top * np.sin(2 * np.pi * (0.01 * t + 1e-5 * t * t)) + rng.normal(0, top / 300 + 1, n))
    return [int(v) for v in np.clip(x, -top - 1, top)]


def _lpc(order: int, precision: int = 14, shift: int = 12) -> list[int]:
    """Coefficients of a predictor that extrapolates (a damped second difference spread over `order` taps)."""
    base = [2.0, -1.0] if order >= 2 else [0.9]
    coefs = [0.0] * order
    for j, b in enumerate(base):
        coefs[j] += b * 0.95
    if order > 2:
        coefs[-1] += 0.01
    top = (1 << (precision - 1)) - 1
    return [max(-top - 1, min(top, int(round(c * (1 << shift))))) for c in coefs]


WRITTEN = {  # name: (bits, channels, blocks, subs(f, c), assignment, variable)
    "constant_and_verbatim": (16, 2, [1024, 1024], lambda f, c: Sub("verbatim") if f else Sub("constant"), 0,
                              False),
    "fixed_orders_wasted_bits": (16, 1, [512] * 5, lambda f, c: Sub("fixed", order=f, porder=f % 3, wasted=3), 0,
                                 False),
    "lpc_orders_1_to_32": (24, 1, [256] * 32, lambda f, c: Sub("lpc", coefs=_lpc(f + 1), precision=14, porder=2), 0, False),
    "lpc_wide_sums": (24, 1, [384, 384], lambda f, c: Sub("lpc", coefs=_lpc(32, 15, 14), precision=15, shift=14),
                      0, False),
    "rice2_and_escapes": (24, 1, [1024, 1024], lambda f, c: Sub("fixed", order=2, method=f, porder=3,
                                                                   escape=(0, 5)), 0, False),
    "left_side": (16, 2, [700, 700, 100], lambda f, c: Sub("lpc", coefs=_lpc(8), precision=14, porder=2), 8, False),
    "right_side": (24, 2, [1000, 500], lambda f, c: Sub("fixed", order=3), 9, False),
    "mid_side": (16, 2, [4608, 100], lambda f, c: Sub("lpc", coefs=_lpc(12), precision=14, porder=1), 10, False),
    "variable_blocks": (8, 3, [100, 300, 17, 1000], lambda f, c: Sub("fixed", order=1), 0, True),
}


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_written_streams_equal_soundfile_and_their_samples(name):
    bits, channels, blocks, subs, assignment, variable = WRITTEN[name]
    n = sum(blocks)
    chans = [_ints(n, bits, seed=c, kind="noise" if name == "rice2_and_escapes" and c else "chirp")
             for c in range(channels)]
    if name == "constant_and_verbatim":
        chans = [[chans[c][0]] * 1024 + chans[c][1024:] for c in range(channels)]
    if name == "fixed_orders_wasted_bits":                    # the low 3 bits are zero
        chans = [[v & ~7 for v in chans[0]]]
    data = flac_stream(chans, 16000, bits, blocks, subs, assignment=assignment, variable=variable)
    expected = np.array(chans, dtype=np.int64).T << (32 - bits)
    for dtype in DTYPES:
        for downmix in (False, True):
            with counted(decoded=1):
                out, errors = both([data], dtype=dtype, downmix=downmix)
            assert not errors
            np.testing.assert_array_equal(out[0], reference(data, dtype, downmix))
    np.testing.assert_array_equal(reference(data, "int32", False), expected)
    out, _ = both([data], dtype="int32", start=(n // 2) / 16000, duration=(n // 4) / 16000)
    np.testing.assert_array_equal(out[0], expected[n // 2: n // 2 + n // 4])


def test_an_id3v2_tag_before_the_stream_is_skipped():
    data = flac(signal(5000, 2, 8000, "chirp"), 8000, "PCM_16")
    tag = b"ID3\x03\x00\x00" + bytes([0, 0, 0, 20]) + bytes(20)
    with counted(decoded=1):
        out, errors = both([tag + data], dtype="int16")
    assert not errors
    np.testing.assert_array_equal(out[0], reference(data, "int16", False))


def corrupt_files() -> dict[str, bytes]:
    good = flac(signal(30000, 1, 16000, "chirp"), 16000, "PCM_16")
    middle = len(good) // 2
    flipped = bytearray(good)
    flipped[middle] ^= 0x10                                    # a bit flip inside a frame
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF                                        # the last frame's CRC-16
    return {"flip": bytes(flipped), "crc": bytes(bad_crc), "cut": good[:middle], "cut_end": good[:-3]}


def test_corrupt_and_truncated_files_fail_naming_the_file_as_libsndfile_says():
    files = list(corrupt_files().values())
    with counted(refused=len(files)):                         # refused by flac.cpp, judged by libsndfile
        out, errors = both(files)
    assert sorted(errors) == list(range(len(files)))
    for i, e in errors.items():
        assert f"f{i}.flac" in e and "cannot decode audio" in e, e
    # a window before the damage decodes: only what a window needs is read
    out, errors = both(files[:3], dtype="int16", duration=0.1)
    assert not errors and all(o.shape == (1600, 1) for o in out)
    _, errors = both([b""])
    assert "empty" in errors[0] and "f0.flac" in errors[0]


def test_the_operator_names_itself_and_the_file(tmp_path):
    good = flac(signal(4000, 1, 8000, "chirp"), 8000, "PCM_16")
    for name, data in {**corrupt_files(), "empty": b""}.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "a.flac").write_bytes(good)
        (folder / f"{name}.flac").write_bytes(data)

        @pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=1)
        def pipe():
            encoded, _ = fn.readers.file(file_root=str(folder))
            return fn.decoders.audio(encoded, dtype=types.FLOAT, downmix=True)

        p = pipe()
        with pytest.raises(PipelineError, match=rf"{name}\.flac") as info:
            p.run()
        p.close()
        assert "decoders.audio" in str(info.value)


def test_the_operator_equals_soundfile(tmp_path):
    files = {f"{i}.flac": flac(signal(3000 + 1000 * i, 1 + i, 16000, "chirp", seed=i), 16000, sub)
             for i, sub in enumerate(["PCM_16", "PCM_24", "PCM_S8"])}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)

    # exec_async=False: one batch decoded in the caller's thread, none prefetched meanwhile (the count is exact)
    @pipeline_def(batch_size=3, num_threads=2, device_id=None, seed=1, exec_async=False)
    def pipe():
        encoded, _ = fn.readers.file(file_root=str(tmp_path))
        return fn.decoders.audio(encoded, dtype=types.FLOAT, downmix=True, start_time=0.05, duration=0.1)

    p = pipe()
    with counted(decoded=3):
        audio, rate = p.run()
    p.close()
    for i, data in enumerate(files.values()):
        np.testing.assert_array_equal(audio[i].numpy(), reference(data, "float32", True)[800:2400])


def test_libsndfile_still_serves_ogg_vorbis():
    x = signal(8000, 2, 8000, "chirp")
    buf = io.BytesIO()
    soundfile.write(buf, x, 8000, format="OGG", subtype="VORBIS")
    ogg = buf.getvalue()
    with counted(decoded=0):
        out, errors = both([ogg], dtype="float32")
    assert not errors
    np.testing.assert_array_equal(out[0], reference(ogg, "float32", False))
