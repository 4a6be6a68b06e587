"""Thin wrappers of libsndfile (through ``soundfile``) and libsoxr (through ``soxr``) for the audio operators.

Decoding reads an encoded file held in memory (bytes, a NumPy ``uint8`` array or a 1-D ``uint8`` torch tensor)
and returns interleaved samples of shape ``(frames, channels)`` (or ``(frames,)`` when downmixed) with the
file's sample rate. A time window (``start_time``, ``duration`` in seconds) is decoded by seeking, so only the
requested frames (plus what the codec needs around them) are decoded:

* WAV, AIFF, FLAC: seeking is exact to the sample.
* OGG/Vorbis and Opus: libsndfile seeks through libvorbisfile / libopusfile, which are sample-accurate.
* MP3: libsndfile seeks through mpg123, which scans frame headers (no decoding) to the target frame and decodes
  from there: exact, with or without a Xing/LAME header, provided the stream reports its true length (the
  in-memory file below does; with ``io.BytesIO`` mpg123 fell back to approximate "fuzzy" seeks).

tests/ops/audio/test_decoder_soundfile_compat.py checks every format's window against a full decode.

Example::

    audio, rate = decode_audio(open("speech.flac", "rb").read(), dtype="float32", downmix=True)
    clip, rate = decode_audio(data, start_time=2.0, duration=1.5, out_of_bounds_policy="pad")
"""

from __future__ import annotations

import io
import logging
import math
import re
import struct
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = [
    "decode_audio", "open_audio", "plan_window", "plan_windows", "read_into", "WindowPlan", "audio_info",
    "resample_soxr", "soxr_quality", "resample_length", "SUPPORTED_FORMATS", "OUT_OF_BOUNDS_POLICIES",
    "AudioDecodeError", "decode_error", "WavPayload", "parse_wav", "PCM_FORMATS", "RATE_RANGE", "FINITE_LIMIT",
    "libsndfile_candidates",
]

logger = logging.getLogger(__name__)

#: Containers and codecs libsndfile decodes (MP3 needs libsndfile >= 1.1, which soundfile's wheels bundle).
SUPPORTED_FORMATS = ("WAV (8/16/24/32-bit integer, 32/64-bit float)", "FLAC", "OGG/Vorbis", "OGG/Opus", "MP3",
                     "AIFF")
#: What a window reaching past the end of the file does.
OUT_OF_BOUNDS_POLICIES = ("error", "pad", "trim_to_shape")

#: Sample rates (Hz) a file may declare; a header outside them is corrupt (a bit flip, say) and is refused.
RATE_RANGE = (1, 1_000_000)
#: With ``finite`` (the default), a file of float samples holding NaN, an infinity or a value of larger magnitude
#: (120 dB above full scale: a flipped exponent bit gives ~1e37) is refused as corrupt.
FINITE_LIMIT = 1e6
#: libsndfile's channel limit (SF_MAX_CHANNELS); parse_wav leaves WAVs with more for libsndfile to refuse.
MAX_CHANNELS = 1024

_DTYPES = {"int16": np.int16, "int32": np.int32, "float32": np.float32}
_DATA_CHUNK = re.compile(r"data\s*:\s*(\d+)\s*\(should be (\d+)\)")
_FLOAT_SUBTYPES = ("FLOAT", "DOUBLE")


class AudioDecodeError(ValueError):
    """A file libsndfile cannot decode (corrupt, truncated, empty or of an unsupported codec)."""


#: What can be wrong with a file, by the names the compiled core reports (``sluice._core.AUDIO_PROBLEMS``):
#: ``a``, ``b`` and ``text`` are the numbers and libsndfile's own message that go with each.
_PROBLEMS = {
    "empty": "the file is empty (0 bytes)",
    "unsupported": "{text}. Supported formats: " + ", ".join(SUPPORTED_FORMATS),
    "libsndfile": "{text}",
    "wav_truncated": "the file is truncated (its data chunk announces {a} bytes, {b} are present)",
    "ogg_truncated": "the Ogg stream is truncated (its last page is not marked end-of-stream)",
    "ogg_cut": "the Ogg stream is truncated (the file ends at byte {b}, inside the page that starts at byte {a})",
    "ogg_damaged": "the Ogg page at byte {a} is damaged (its checksum or its capture pattern is wrong): the file is "
                   "corrupt",
    "short": "the file is truncated or corrupt (header announces {a} frames, decoded {b})",
    "rate": f"its header declares a sample rate of {{a}} Hz, outside {RATE_RANGE[0]} Hz..{RATE_RANGE[1]} Hz: the "
            "header is corrupt",
    "not_finite": f"frame {{a}} holds a NaN, an infinity or a value beyond +-{FINITE_LIMIT:g}: the float samples "
                  "are corrupt (pass finite=False to keep such values)",
}


def decode_error(source: str, problem: str, a: int = 0, b: int = 0, text: str = "") -> AudioDecodeError:
    """The error for ``problem`` (a key of ``_PROBLEMS``) in the file ``source`` (``text``: libsndfile's message,
    whose final period the sentence supplies)."""
    detail = _PROBLEMS[problem].format(a=a, b=b, text=text.rstrip("."))
    return AudioDecodeError(f"cannot decode audio{_where(source)}: {detail}")


def _as_buffer(data: Any) -> bytes | memoryview:
    """The encoded bytes of ``data`` (bytes, bytearray, memoryview, NumPy array or CPU torch tensor)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return data
    if hasattr(data, "numpy") and hasattr(data, "device"):  # torch tensor
        if str(data.device) != "cpu":
            raise ValueError("encoded audio must be on the CPU; decoders.audio runs on the CPU")
        data = data.numpy()
    arr = np.asarray(data)
    if arr.dtype != np.uint8:
        raise ValueError(f"encoded audio must be bytes or a uint8 array, got dtype {arr.dtype}")
    return memoryview(np.ascontiguousarray(arr).reshape(-1))


class _MemoryFile:
    """A read-only file over encoded bytes, for libsndfile's virtual I/O.

    Unlike ``io.BytesIO`` it does not copy the bytes first, and ``readinto`` copies with NumPy, which releases
    the GIL for large copies: the pipeline's threads decode in parallel (the bulk of a WAV read is one such copy).
    """

    __slots__ = ("_data", "_view", "_size", "_pos")
    _BIG = 1 << 16  # reads at least this large copy through NumPy (GIL released); header reads stay cheap

    def __init__(self, buf: bytes | memoryview):
        self._view = memoryview(buf).cast("B")
        self._data = np.frombuffer(self._view, dtype=np.uint8)
        self._size = self._view.nbytes
        self._pos = 0

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, size: int = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._pos + size)
        out = self._view[self._pos:end].tobytes()
        self._pos = max(self._pos, end)
        return out

    def readinto(self, buffer) -> int:
        dst = memoryview(buffer).cast("B")
        end = min(self._size, self._pos + dst.nbytes)
        count = max(0, end - self._pos)
        if count >= self._BIG:
            np.frombuffer(dst, dtype=np.uint8)[:count] = self._data[self._pos:end]
        elif count:
            dst[:count] = self._view[self._pos:end]
        self._pos += count
        return count


def _where(source: str) -> str:
    return f" in file {source!r}" if source else ""


def _open(data: Any, source: str):
    import soundfile

    buf = _as_buffer(data)
    if len(buf) == 0:
        raise decode_error(source, "empty")
    try:
        f = soundfile.SoundFile(_MemoryFile(buf), mode="r")
    except soundfile.LibsndfileError as exc:
        # libsndfile's words only: soundfile's prefix names the in-memory file object, at a changing address
        raise decode_error(source, "unsupported", text=exc.error_string) from None
    except Exception as exc:  # noqa: BLE001 - TypeError for unknown formats
        raise decode_error(source, "unsupported", text=str(exc)) from None
    try:
        if f.format in ("WAV", "WAVEX", "RF64", "W64"):
            _check_wav_length(f, source)
        elif f.format == "OGG":
            _check_ogg_pages(buf, source)
        if not RATE_RANGE[0] <= f.samplerate <= RATE_RANGE[1]:
            raise decode_error(source, "rate", a=f.samplerate)
    except AudioDecodeError:
        f.close()
        raise
    return f


def _check_ogg_pages(buf, source: str) -> None:
    """Every page of an Ogg stream is whole, starts with ``OggS`` and carries its checksum, and the last one is
    flagged end-of-stream. libvorbisfile skips a damaged page without a word, and a file cut inside its last page
    leaves libsndfile without a length: it reports fewer frames, or none, and no error."""
    view = memoryview(buf).cast("B")
    size, pos, flags = len(view), 0, 0
    while pos < size:
        left = size - pos
        if left >= 4 and view[pos:pos + 4] != b"OggS":
            raise decode_error(source, "ogg_damaged", a=pos)
        if left < 27 or left < 27 + view[pos + 26]:
            raise decode_error(source, "ogg_cut", a=pos, b=size)
        nseg = view[pos + 26]
        length = 27 + nseg + sum(view[pos + 27:pos + 27 + nseg])
        if length > left:
            raise decode_error(source, "ogg_cut", a=pos, b=size)
        page = bytes(view[pos:pos + length])
        if _ogg_crc(page[:22] + b"\0\0\0\0" + page[26:]) != int.from_bytes(page[22:26], "little"):
            raise decode_error(source, "ogg_damaged", a=pos)
        flags = page[5]
        pos += length
    if not flags & 0x04:
        raise decode_error(source, "ogg_truncated")


_BIT_REVERSED = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


@lru_cache(maxsize=64)
def _zeros_crc(n: int) -> int:
    return zlib.crc32(bytes(n))


def _ogg_crc(page: bytes) -> int:
    """Ogg's CRC-32 (polynomial 0x04C11DB7 fed most significant bit first, initial 0, no final xor) with zlib's:
    zlib's reflected CRC of the bit-reversed bytes, its initial value and final xor cancelled by the CRC of as many
    zero bytes, bit-reversed back."""
    raw = zlib.crc32(page.translate(_BIT_REVERSED)) ^ _zeros_crc(len(page))
    return int(f"{raw:032b}"[::-1], 2)


def _check_wav_length(f, source: str) -> None:
    """libsndfile shortens a WAV whose data chunk is cut off without saying so; make that an error.

    Streaming writers that do not know the length (size 0 or 0xFFFFFFFF) are accepted."""
    match = _DATA_CHUNK.search(f.extra_info)
    if match:
        declared, actual = int(match.group(1)), int(match.group(2))
        if actual < declared < 0xFFFFFFF0:
            raise decode_error(source, "wav_truncated", a=declared, b=actual)


def audio_info(data: Any, source: str = "") -> dict:
    """Format, codec, sample rate, channel count and frame count of an encoded file, without decoding it."""
    with _open(data, source) as f:
        return {"format": f.format, "subtype": f.subtype, "sample_rate": f.samplerate, "channels": f.channels,
                "frames": f.frames}


def decode_audio(data: Any, *, dtype: str = "float32", downmix: bool = False, start_time: float = 0.0,
                 duration: float | None = None, out_of_bounds_policy: str = "error", finite: bool = True,
                 source: str = "") -> tuple[np.ndarray, int]:
    """Decode audio held in memory with libsndfile.

    Args:
        data: the encoded file (bytes, ``uint8`` NumPy array or CPU torch tensor).
        dtype: ``"int16"``, ``"int32"`` or ``"float32"`` (floats are in [-1, 1]; integers fill their range).
        downmix: average all channels into one; the result is then 1-D.
        start_time: first second to decode (>= 0).
        duration: seconds to decode from ``start_time``; ``None`` (or a value <= 0) decodes to the end.
        out_of_bounds_policy: what a window reaching past the end does: ``"error"`` raises, ``"pad"`` fills the
            missing frames with zeros (the output always has ``round(duration * rate)`` frames), and
            ``"trim_to_shape"`` returns the frames that exist (possibly none).
        finite: refuse a file of float samples whose window holds NaN, an infinity or a value beyond
            :data:`FINITE_LIMIT` (a corrupt file); False keeps such values.
        source: the file's name, used in error messages.

    Returns:
        ``(samples, sample_rate)``: samples of shape ``(frames, channels)``, or ``(frames,)`` when downmixed.

    Example::

        audio, rate = decode_audio(wav_bytes, dtype="int16")
    """
    np_dtype = _dtype(dtype)
    with open_audio(data, source) as f:
        plan = plan_window(f, start_time=start_time, duration=duration, out_of_bounds_policy=out_of_bounds_policy,
                           source=source)
        out = np.empty(plan.shape(downmix), np_dtype)
        read_into(f, plan, out, source=source, finite=finite)
    return out, plan.rate


@dataclass(frozen=True)
class WindowPlan:
    """What to read from an opened file: ``n_read`` frames from frame ``start``, then ``n_out - n_read`` zeros."""

    rate: int
    channels: int
    start: int
    n_read: int
    n_out: int

    def shape(self, downmix: bool) -> tuple[int, ...]:
        """The decoded array's shape."""
        return (self.n_out,) if downmix else (self.n_out, self.channels)


def _dtype(dtype: str) -> type:
    if dtype not in _DTYPES:
        raise ValueError(f"Invalid dtype ({dtype!r}). Supported values are {', '.join(map(repr, _DTYPES))}.")
    return _DTYPES[dtype]


def open_audio(data: Any, source: str = ""):
    """An open ``soundfile.SoundFile`` over encoded bytes (a context manager); raises :class:`AudioDecodeError`
    naming ``source`` for empty, corrupt, truncated or unsupported files and for sample rates outside
    :data:`RATE_RANGE`."""
    return _open(data, source)


def plan_window(f, *, start_time: float = 0.0, duration: float | None = None, out_of_bounds_policy: str = "error",
                source: str = "") -> WindowPlan:
    """Check a time window against an open file (or a :class:`WavPayload`) and say which frames to read (see
    :func:`decode_audio`)."""
    start, n_read, n_out, errors = plan_windows([f.samplerate], [f.frames], [start_time], [duration or 0.0],
                                                out_of_bounds_policy, [source])
    if errors:
        raise errors[0]
    return WindowPlan(f.samplerate, f.channels, int(start[0]), int(n_read[0]), int(n_out[0]))


_FRAMES_CAP = float(1 << 61)  # windows beyond any file: kept in int64 (they only ever pad or fail)


def plan_windows(rate, frames, start_time, duration, out_of_bounds_policy: str = "error",
                 sources: list[str] | None = None, valid=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """:func:`plan_window` for a batch at once: per file its sample rate and frame count, the window's start and
    duration in seconds (a duration <= 0 reads to the end). Returns int64 arrays ``(start, n_read, n_out)`` and
    ``{index: ValueError}`` for the files (among ``valid``, a mask; default all) whose window is invalid or, with
    ``out_of_bounds_policy="error"``, reaches past the end."""
    if out_of_bounds_policy not in OUT_OF_BOUNDS_POLICIES:
        raise ValueError(f"Invalid out_of_bounds_policy ({out_of_bounds_policy!r}). Supported values are "
                         f"{', '.join(map(repr, OUT_OF_BOUNDS_POLICIES))}.")
    rate = np.asarray(rate, dtype=np.int64).reshape(-1)
    total = np.asarray(frames, dtype=np.int64).reshape(-1)
    st = np.asarray(start_time, dtype=np.float64).reshape(-1)
    du = np.asarray(duration, dtype=np.float64).reshape(-1)
    bad_start = ~np.isfinite(st) | (st < 0)
    bad_duration = ~np.isfinite(du)
    has_want = ~bad_duration & (du > 0)
    with np.errstate(invalid="ignore", over="ignore"):  # products of invalid values are not used
        start = np.minimum(np.rint(np.where(bad_start, 0.0, st) * rate), _FRAMES_CAP).astype(np.int64)
        want = np.minimum(np.rint(np.where(has_want, du, 0.0) * rate), _FRAMES_CAP).astype(np.int64)
    end = np.where(has_want, start + want, total)
    past = (end > total) | (start > total)
    n_read = np.maximum(0, np.minimum(end, total) - start)
    n_out = np.where(has_want, want, n_read) if out_of_bounds_policy == "pad" else n_read
    wrong = bad_start | bad_duration | (past if out_of_bounds_policy == "error" else False)
    if valid is not None:
        wrong &= np.asarray(valid, dtype=bool)
    errors = {}
    for i in np.flatnonzero(wrong).tolist():
        errors[i] = _window_error(float(st[i]), float(du[i]), int(start[i]), int(end[i]), int(total[i]),
                                  int(rate[i]), sources[i] if sources else "")
    return np.minimum(start, total), n_read, n_out, errors


def _window_error(start_time: float, duration: float, start: int, end: int, total: int, rate: int,
                  source: str) -> ValueError:
    if not math.isfinite(start_time) or start_time < 0:
        return ValueError(f"start_time must be a finite number of seconds >= 0, got {start_time}")
    if not math.isfinite(duration):
        return ValueError(f"duration must be a finite number of seconds, got {duration}")
    return ValueError(
        f"the window [{start_time:g} s, {end / rate:g} s) of the audio{_where(source)} reaches past "
        f"its end ({total / rate:g} s, {total} frames at {rate} Hz); pass "
        "out_of_bounds_policy='pad' or 'trim_to_shape' to accept such windows")


def read_into(f, plan: WindowPlan, out: np.ndarray, source: str = "", finite: bool = True) -> None:
    """Decode the planned frames of the open file ``f`` into ``out`` (``plan.shape(downmix)``, any supported
    dtype; 1-D means downmix), zero-filling the padded tail. Files of float samples are read as float64 and
    converted here with libsndfile's arithmetic (:func:`_from_float`), so that ``finite`` can check the values
    libsndfile would otherwise clip or round."""
    downmix = out.ndim == 1
    name = out.dtype.name
    if name not in _DTYPES:
        raise ValueError(f"Invalid dtype ({name!r}). Supported values are {', '.join(map(repr, _DTYPES))}.")
    floats = f.subtype in _FLOAT_SUBTYPES
    head = out[: plan.n_read]
    try:
        if plan.n_read == 0:
            frames = None
        else:
            if plan.start > 0:
                f.seek(plan.start)
            if floats or (downmix and plan.channels > 1):
                frames = f.read(frames=plan.n_read, dtype="float64" if floats else name, always_2d=True)
            else:
                got = f.read(frames=plan.n_read, dtype=name, always_2d=not downmix,
                             out=head if downmix else head.reshape(plan.n_read, plan.channels))
                frames = None if got.shape[0] == plan.n_read else got.copy()
    except Exception as exc:  # noqa: BLE001 - libsndfile's errors, named with the file
        raise decode_error(source, "libsndfile", text=str(exc)) from None
    if frames is not None:
        short = plan.n_read - frames.shape[0]
        if short > 0 and not (f.format == "MP3" and short <= max(2 * 1152, f.frames // 50)):
            # libsndfile stops early on truncated files: say so rather than return silently short audio.
            raise decode_error(source, "short", a=f.frames, b=plan.start + frames.shape[0])
        # An MP3 without a length header (no Xing/LAME tag) announces a length estimated from its size: a
        # shortfall of up to 2% (or two MPEG frames) is the estimate's error, and is zero-filled.
        if floats:
            if finite:
                _check_finite(frames, plan.start, source)
            frames = _from_float(frames, out.dtype.type)
        head[: frames.shape[0]] = _downmix(frames, out.dtype.type) if downmix else frames
        head[frames.shape[0]:] = 0
    out[plan.n_read:] = 0


def _check_finite(frames: np.ndarray, start: int, source: str) -> None:
    """Raise naming the first frame of ``frames`` ((n, channels) float64, from frame ``start``) that holds a NaN,
    an infinity or a value beyond FINITE_LIMIT."""
    bad = ~(np.abs(frames) <= FINITE_LIMIT)
    if bad.any():
        raise decode_error(source, "not_finite", a=start + int(np.argmax(bad.any(axis=1))))


def _from_float(x: np.ndarray, dtype: type) -> np.ndarray:
    """float64 samples as ``sf_readf_float`` / ``_short`` / ``_int`` return them from a float file with clipping
    on (soundfile's setting): floats rounded to float32; integers ``lrint(x)`` unscaled, clipped at the type's
    limits (libsndfile's thresholds: below -32768.0 and below -2147483647.0), NaN giving INT_MIN (x86's cvtsd2si),
    which int16 keeps the low bits of (0)."""
    if dtype is np.float32:
        with np.errstate(over="ignore"):  # doubles beyond float32 become infinities, as in C
            return x.astype(np.float32)
    info = np.iinfo(dtype)
    low = -32768.0 if dtype is np.int16 else -2147483647.0
    with np.errstate(invalid="ignore"):
        r = np.where(np.isnan(x), float(np.iinfo(np.int32).min), np.rint(x))
        r = np.where(x > info.max, info.max, np.where(x < low, info.min, r))
    return r.astype(np.int64).astype(dtype)


def _downmix(frames: np.ndarray, dtype: type) -> np.ndarray:
    """Average the channels of ``(frames, channels)`` samples into one (rounded for integer types)."""
    if frames.shape[1] == 1:
        return frames[:, 0]
    mean = frames.astype(np.float64).mean(axis=1)
    if np.issubdtype(dtype, np.integer):
        return np.rint(mean).astype(dtype)
    return mean.astype(dtype)


#: Sample formats of the WAV payloads :func:`parse_wav` accepts: name -> bytes per sample.
PCM_FORMATS = {"u8": 1, "s16": 2, "s24": 3, "s32": 4, "f32": 4, "f64": 8}
_WAV_CODES = {(1, 8): "u8", (1, 16): "s16", (1, 24): "s24", (1, 32): "s32", (3, 32): "f32", (3, 64): "f64"}
_EXTENSIBLE = 0xFFFE
_KSDATAFORMAT_TAIL = bytes.fromhex("000000001000800000aa00389b71")  # the GUID after its 2-byte format code


@dataclass(frozen=True)
class WavPayload:
    """Where the samples of a PCM or IEEE-float WAV lie in its bytes (see :func:`parse_wav`).

    Attribute names follow ``soundfile.SoundFile`` (``samplerate``, ``channels``, ``frames``), so that
    :func:`plan_window` plans windows over it exactly as over an opened file."""

    samplerate: int
    channels: int
    frames: int
    sample_format: str     # a key of PCM_FORMATS
    data_offset: int       # byte offset of frame 0
    block_align: int       # bytes per frame (channels * bytes per sample)


def parse_wav(data: Any) -> WavPayload | None:
    """Parse the RIFF/WAVE header of a well-formed PCM (8/16/24/32-bit) or IEEE-float (32/64-bit) WAV, including
    WAVE_FORMAT_EXTENSIBLE, without decoding anything; the samples are then the bytes
    ``[data_offset, data_offset + frames * block_align)``, little-endian, interleaved.

    Returns ``None`` for anything else (other containers and codecs, RIFX/RF64, a data chunk announcing more bytes
    than the file holds or an unknown length, an odd block alignment, more than 1024 channels, a sample rate
    outside :data:`RATE_RANGE`): the caller then decodes with libsndfile
    (:func:`decode_audio`), which accepts or rejects the file with its usual errors. For the files it accepts, the
    frame count is libsndfile's (``data size // block_align``).

    Example::

        info = parse_wav(open("speech.wav", "rb").read())
        pcm = memoryview(data)[info.data_offset: info.data_offset + info.frames * info.block_align]
    """
    buf = _as_buffer(data)
    size = len(buf)
    if size < 44:
        return None
    head = bytes(buf[:12])
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    pos, fmt = 12, None
    while pos + 8 <= size:
        cid, clen = struct.unpack_from("<4sI", buf, pos)
        body = pos + 8
        if cid == b"fmt ":
            if clen < 16 or body + clen > size:
                return None
            code, channels, rate, _, align, bits = struct.unpack_from("<HHIIHH", buf, body)
            if code == _EXTENSIBLE:
                if clen < 40:
                    return None
                valid, _, guid = struct.unpack_from("<HI16s", buf, body + 18)
                if guid[2:] != _KSDATAFORMAT_TAIL or valid not in (0, bits):
                    return None
                code = struct.unpack_from("<H", guid)[0]
            fmt = (_WAV_CODES.get((code, bits)), channels, rate, align)
        elif cid == b"data":
            if fmt is None or fmt[0] is None:
                return None
            name, channels, rate, align = fmt
            if not (1 <= channels <= MAX_CHANNELS and RATE_RANGE[0] <= rate <= RATE_RANGE[1]) \
                    or align != channels * PCM_FORMATS[name] or not 0 < clen <= size - body:
                return None
            return WavPayload(rate, channels, clen // align, name, body, align)
        pos = body + clen + (clen & 1)   # chunks are padded to an even size
    return None


def libsndfile_candidates() -> list[str]:
    """The libsndfile soundfile loaded, as paths to ``dlopen`` in the order soundfile tried them (its wheel's
    copy, then the system's): the first that opens is soundfile's own, so a compiled decoder gives its results."""
    import soundfile

    names = [getattr(soundfile, attr, None) for attr in ("_full_path", "_libname", "_explicit_libname")]
    return [n for n in names if n]


def soxr_quality(quality: float) -> str:
    """The soxr recipe for DALI's ``quality`` (0..100): <15 quick, <35 low, <50 medium, <75 high, else very high."""
    if not 0 <= quality <= 100:
        raise ValueError(f"quality must be within [0, 100], got {quality}")
    for limit, recipe in ((15, "QQ"), (35, "LQ"), (50, "MQ"), (75, "HQ")):
        if quality < limit:
            return recipe
    return "VHQ"


def resample_length(in_length, in_rate: float, out_rate: float):
    """Output length of resampling ``in_length`` samples: ``ceil(in_length * out_rate / in_rate)``, the rates taken
    as float32 and the arithmetic in float64, as DALI computes it (``resampled_length`` of
    ``dali/kernels/signal/resampling.h``, used by its ``audio_resample`` and its audio decoder). The output
    sample ``j`` lies at input time ``j * in_rate / out_rate``: the last one is the last that lies inside the
    signal. (soxr gives ``round(...)``: one sample fewer for about half of the lengths.) ``in_length`` and the
    rates: numbers (gives an int), or arrays, one value per signal (gives an int64 array, each computed alike)."""
    out = np.ceil(np.asarray(in_length, dtype=np.float64) * np.asarray(out_rate, np.float32).astype(np.float64)
                  / np.asarray(in_rate, np.float32).astype(np.float64))
    return int(out) if out.ndim == 0 else out.astype(np.int64)


def resample_soxr(signal: np.ndarray, in_rate: float, out_rate: float, quality: float = 50.0) -> np.ndarray:
    """Resample ``signal`` (``(n,)`` or ``(n, channels)``, float32/float64/int16/int32) with libsoxr.

    The output has :func:`resample_length` frames and the input's dtype.

    Example::

        y = resample_soxr(x, 44100, 16000)
    """
    import soxr

    if in_rate <= 0 or out_rate <= 0:
        raise ValueError(f"sample rates must be > 0, got in_rate={in_rate}, out_rate={out_rate}")
    n_out = resample_length(signal.shape[0], in_rate, out_rate)
    if signal.shape[0] == 0 or n_out == 0:
        return np.zeros((n_out,) + signal.shape[1:], signal.dtype)
    if in_rate == out_rate:
        return signal.copy()
    dtype = signal.dtype
    work = signal if dtype in (np.float32, np.float64, np.int16, np.int32) else signal.astype(np.float32)
    if round(signal.shape[0] * out_rate / in_rate) < n_out:
        # soxr stops at round(length * ratio); DALI's length is one more. soxr flushes its filter with zeros, so
        # zeros appended to the input leave its first outputs as they are and give the last one its true value.
        tail = np.zeros((int(math.ceil(in_rate / out_rate)) + 1,) + work.shape[1:], work.dtype)
        work = np.concatenate([work, tail])
    out = soxr.resample(np.ascontiguousarray(work), float(in_rate), float(out_rate), quality=soxr_quality(quality))
    if out.shape[0] < n_out:  # not seen: soxr's length is round(length * ratio)
        out = np.concatenate([out, np.zeros((n_out - out.shape[0],) + out.shape[1:], out.dtype)])
    return out[:n_out].astype(dtype, copy=False)
