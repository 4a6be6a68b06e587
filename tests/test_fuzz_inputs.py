"""Fuzzed inputs: corrupt files made here from valid seeds (images written by PIL, audio by ``wave`` and
soundfile) go through the pipelines users write (``readers.file`` or ``external_source`` -> CPU decoder ->
``resize`` / ``spectrogram``). Each case either decodes (damage the codec conceals) into sane data, or raises
``sluice.PipelineError`` naming the operator, the sample and, when a reader gave it, the file; never a crash or a
hang. Damage no codec would write (a WAV at 2 GHz, float samples of 1e37 or inf, an empty file) must be an
error. The cases are drawn from a fixed seed, so a regression fails the same way every time.

Video families are fuzzed with the video readers' tests.
"""

from __future__ import annotations

import io
import signal
import struct
import wave

import numpy as np
import pytest

import sluice
from sluice import fn
from sluice.errors import PipelineError

SEED = 20  # issue 20
BATCH = 3  # [valid seed, corrupt file, valid seed]: the corrupt one is sample 1
TIME_LIMIT_S = 20  # per case; a hang fails the case instead of the whole run

sf = pytest.importorskip("soundfile")
Image = pytest.importorskip("PIL.Image")


# ---- seeds -------------------------------------------------------------------------------------------------------
def _picture() -> "Image.Image":
    y, x = np.mgrid[0:24, 0:32]
    rgb = np.stack([x * 8, y * 10, (x + y) * 4], axis=-1).astype(np.uint8)
    return Image.fromarray(rgb)


IMAGE_FORMATS = {"jpg": "JPEG", "png": "PNG", "webp": "WEBP", "tif": "TIFF", "bmp": "BMP", "gif": "GIF"}


def image_seed(ext: str) -> bytes:
    buf = io.BytesIO()
    _picture().save(buf, IMAGE_FORMATS[ext])
    return buf.getvalue()


def _tone(n: int = 4000, rate: int = 8000) -> np.ndarray:
    t = np.arange(n) / rate
    return (0.5 * np.sin(2 * np.pi * 440 * t * (1 + t))).astype(np.float32)


def audio_seed(kind: str) -> bytes:
    signal_ = _tone()
    buf = io.BytesIO()
    if kind == "wav16":
        with wave.open(buf, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(8000)
            w.writeframes((signal_ * 32767).astype("<i2").tobytes())
        return buf.getvalue()
    fmt, subtype, ext = {"wavf32": ("WAV", "FLOAT", "wav"), "flac": ("FLAC", "PCM_16", "flac"),
                         "ogg": ("OGG", "VORBIS", "ogg")}[kind]
    sf.write(buf, signal_, 8000, format=fmt, subtype=subtype)
    return buf.getvalue()


AUDIO_KINDS = {"wav16": "wav", "wavf32": "wav", "flac": "flac", "ogg": "ogg"}


# ---- damage ------------------------------------------------------------------------------------------------------
def damage(data: bytes, how: str, rng: np.random.Generator) -> bytes:
    n = len(data)
    if how == "truncated_10":
        return data[:max(1, n // 10)]
    if how == "truncated_50":
        return data[:n // 2]
    if how == "empty":
        return b""
    if how == "zeroed":
        out = bytearray(data)
        out[n // 3:n // 3 + n // 4] = bytes(n // 4)
        return bytes(out)
    if how == "random_after_magic":
        return data[:8] + rng.integers(0, 256, n - 8, dtype=np.uint8).tobytes()
    if how == "bit_flipped":
        out = bytearray(data)
        for pos in rng.integers(4, n, 12):
            out[pos] ^= 1 << int(rng.integers(0, 8))
        return bytes(out)
    raise ValueError(how)


DAMAGE = ["truncated_10", "truncated_50", "empty", "zeroed", "random_after_magic", "bit_flipped"]


def lie(data: bytes, how: str) -> bytes:
    """Header fields that lie about the data that follows."""
    out = bytearray(data)
    if how == "png_huge_width":  # IHDR width (the CRC is left stale, as a flipped bit would)
        out[16:20] = struct.pack(">I", 0x7FFFFFFF)
    elif how == "bmp_huge_size":
        out[18:26] = struct.pack("<ii", 100_000, -100_000)
    elif how == "gif_huge_screen":
        out[6:10] = struct.pack("<HH", 65535, 65535)
    elif how == "jpeg_sof_dims":  # a 3000x4000 image in a 32x24 one's bytes
        sof = next(i for i in range(2, len(out) - 9) if out[i] == 0xFF and out[i + 1] in (0xC0, 0xC1, 0xC2))
        out[sof + 5:sof + 9] = struct.pack(">HH", 3000, 4000)
    elif how == "wav_rate_2ghz":
        out[24:28] = struct.pack("<I", 2_000_000_000)
    elif how == "wav_data_size_huge":
        out[40:44] = struct.pack("<I", 0x7FFFFFF0)
    elif how == "wav_no_channels":
        out[22:24] = struct.pack("<H", 0)
    elif how == "wavf32_inf_samples":  # float WAV: the data chunk of soundfile's header starts after 'data'+size
        at = bytes(out).index(b"data") + 8
        out[at + 400:at + 408] = struct.pack("<ff", np.inf, 4.5e37)
    else:
        raise ValueError(how)
    return bytes(out)


IMAGE_LIES = {"png": ["png_huge_width"], "bmp": ["bmp_huge_size"], "gif": ["gif_huge_screen"],
              "jpg": ["jpeg_sof_dims"]}
AUDIO_LIES = {"wav16": ["wav_rate_2ghz", "wav_data_size_huge", "wav_no_channels"],
              "wavf32": ["wav_rate_2ghz", "wavf32_inf_samples"]}
#: Damage no codec would write: these must be errors, and the message must say why.
MUST_FAIL = {"empty": "", "wav_rate_2ghz": "2000000000 Hz", "wavf32_inf_samples": "NaN, an infinity",
             "wav_no_channels": ""}


def _cases(seeds: dict, lies: dict) -> list:
    cases = [(kind, how) for kind in seeds for how in DAMAGE]
    cases += [(kind, how) for kind, hows in lies.items() for how in hows]
    return cases


IMAGE_CASES = _cases(IMAGE_FORMATS, IMAGE_LIES)
AUDIO_CASES = _cases(AUDIO_KINDS, AUDIO_LIES)


def corrupt(seed: bytes, how: str, case_id: str) -> bytes:
    if how in DAMAGE:
        rng = np.random.default_rng([SEED, sum(case_id.encode())])
        return damage(seed, how, rng)
    return lie(seed, how)


# ---- running -----------------------------------------------------------------------------------------------------
class _Hang(Exception):
    pass


def _run_with_time_limit(pipe):
    def on_alarm(*_):
        raise _Hang(f"no answer in {TIME_LIMIT_S} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TIME_LIMIT_S)
    try:
        return pipe.run()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _files(tmp_path, ext: str, seed: bytes, bad: bytes) -> list[str]:
    paths = []
    for i, data in enumerate([seed, bad, seed]):
        path = tmp_path / f"{i}_{'corrupt' if i == 1 else 'seed'}.{ext}"
        path.write_bytes(data)
        paths.append(str(path))
    return paths


def _source(files, route: str, seed: bytes, bad: bytes):
    if route == "reader":
        encoded, _ = fn.readers.file(files=files, name="Reader")
        return encoded
    batch = [np.frombuffer(d, np.uint8) for d in (seed, bad, seed)]
    return fn.external_source(source=lambda: batch, cycle=True)


def _check_outcome(pipe, how: str, route: str, files: list[str], op: str, check_output) -> None:
    try:
        outputs = _run_with_time_limit(pipe)
    except PipelineError as e:
        assert type(e) is PipelineError, f"{type(e).__name__}: {e}"
        text = str(e)
        assert f"fn.{op} (device 'cpu')" in text, text
        assert "on sample 1" in text and e.sample == 1, text
        if route == "reader":
            assert files[1] in text and "_seed." not in text, text
        assert MUST_FAIL.get(how, "") in text, text
        return
    finally:
        pipe.close()
    assert how not in MUST_FAIL, f"{how} decoded without an error"
    check_output(outputs)


@pytest.mark.parametrize("ext,how", IMAGE_CASES, ids=[f"{e}-{h}" for e, h in IMAGE_CASES])
def test_damaged_image_decodes_or_names_the_sample(tmp_path, ext, how):
    seed = image_seed(ext)
    bad = corrupt(seed, how, f"{ext}-{how}")
    files = _files(tmp_path, ext, seed, bad)
    route = "external_source" if how in ("truncated_10", "zeroed") else "reader"
    pipe = sluice.Pipeline(batch_size=BATCH, num_threads=2, device_id=None, seed=SEED)
    with pipe:
        images = fn.decoders.image(_source(files, route, seed, bad), device="cpu")
        pipe.set_outputs(fn.resize(images, resize_x=16, resize_y=12))

    def check(outputs):
        (out,) = outputs
        assert [tuple(s) for s in out.shape()] == [(12, 16, 3)] * BATCH

    _check_outcome(pipe, how, route, files, "decoders.image", check)


@pytest.mark.parametrize("kind,how", AUDIO_CASES, ids=[f"{k}-{h}" for k, h in AUDIO_CASES])
def test_damaged_audio_decodes_or_names_the_sample(tmp_path, kind, how):
    seed = audio_seed(kind)
    bad = corrupt(seed, how, f"{kind}-{how}")
    files = _files(tmp_path, AUDIO_KINDS[kind], seed, bad)
    route = "external_source" if how in ("truncated_10", "zeroed") else "reader"
    pipe = sluice.Pipeline(batch_size=BATCH, num_threads=2, device_id=None, seed=SEED)
    with pipe:
        audio, rate = fn.decoders.audio(_source(files, route, seed, bad), downmix=True, device="cpu")
        pipe.set_outputs(fn.spectrogram(audio, nfft=256, window_length=256, window_step=128), rate)

    def check(outputs):
        spec, rate = outputs
        rates = [float(r) for r in rate.as_cpu().samples]
        assert all(1 <= r <= 1_000_000 for r in rates), rates
        for s in spec.as_cpu().samples:
            assert bool(np.isfinite(s.numpy()).all()), "a decoded file gave a non-finite spectrogram"

    _check_outcome(pipe, how, route, files, "decoders.audio", check)
