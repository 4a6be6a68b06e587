"""The audio files of a batch: headers in one call, then decoding in chunks, with the GIL released (see
:mod:`sluice.native`).

Plain PCM and IEEE-float WAVs are parsed and converted by the compiled core with libsndfile's arithmetic; FLACs
(8/16/24-bit) are decoded by the core's own FLAC decoder, with libsndfile's conversions; every other file
(Ogg/Vorbis, Opus, MP3, AIFF, odd WAVs, and the FLACs that decoder refuses: corrupt, truncated, of unknown length)
is decoded by libsndfile itself, the copy soundfile loaded, opened by the core and fed from memory without calling
back into Python. The pure-Python twin does the
same through soundfile (:func:`sluice.backends.audio.open_audio`, :func:`~sluice.backends.audio.read_into`); the
results, errors included, are identical (tests/native/test_audio_native.py).

Example (two mono files, whole, one after the other in ``out``)::

    with open_files([wav_bytes, flac_bytes], ["a.wav", "b.flac"]) as files:
        start, n_read, n_out, errors = plan_windows(files.rate, files.frames, [0.0, 0.0], [0.0, 0.0])
        out = np.empty(int(n_out.sum()), np.float32)
        offsets = np.array([0, n_out[0] * 4])                      # bytes
        failures = files.decode(0, 2, out, offsets, start, n_read, n_out, "float32", downmix=True)
"""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sluice.backends.audio import (
    AudioDecodeError,
    PCM_FORMATS,
    WindowPlan,
    decode_error,
    libsndfile_candidates,
    open_audio,
    parse_wav,
    read_into,
)
from sluice.native import core
from sluice.pipeline.batch import host_empty  # the one place host buffers come from

__all__ = ["open_files", "AudioFiles", "host_tensor", "OK", "FAILED", "NOT_PARSED", "WAV_FORMATS"]

logger = logging.getLogger(__name__)

#: Values of :attr:`AudioFiles.status`: a file to decode, one that failed (see ``failures``), one left unopened
#: (``sndfile=False`` and not a plain WAV).
OK, FAILED, NOT_PARSED = 0, 1, 2
#: Sample formats of plain WAV payloads, as :meth:`AudioFiles.payloads` numbers them.
WAV_FORMATS = tuple(PCM_FORMATS)
_DTYPE_CODES = {"int16": 0, "int32": 1, "float32": 2}


_sndfile_lock = threading.Lock()
_sndfile_ready: bool | None = None  # None: not tried yet


def _compiled():
    """The core when it can decode audio (libsndfile opened), else None (the twin runs)."""
    global _sndfile_ready
    c = core()
    if c is None or not hasattr(c, "AudioFiles"):
        return None
    if _sndfile_ready is None:
        with _sndfile_lock:
            if _sndfile_ready is None:
                why = [c.load_sndfile(path) for path in libsndfile_candidates()]
                _sndfile_ready = "" in why
                if not _sndfile_ready:
                    logger.warning("sluice's core cannot open libsndfile (%s); audio decodes through soundfile, "
                                   "more slowly", "; ".join(why) or "soundfile names no library")
    return c if _sndfile_ready else None


class AudioFiles(abc.ABC):
    """The encoded files of a batch, opened (a context manager; :meth:`close` frees libsndfile's handles).

    Attributes (arrays, one value per file): ``status`` (:data:`OK`, :data:`FAILED`, :data:`NOT_PARSED`),
    ``rate`` (Hz), ``channels``, ``frames``; ``failures``: ``{index: AudioDecodeError}`` naming each file."""

    status: np.ndarray
    rate: np.ndarray
    channels: np.ndarray
    frames: np.ndarray
    failures: dict[int, AudioDecodeError]

    @abc.abstractmethod
    def decode(self, lo: int, hi: int, out: np.ndarray, out_offsets: np.ndarray, start: np.ndarray,
               n_read: np.ndarray, n_out: np.ndarray, dtype: str, downmix: bool,
               finite: bool = True, pool=None) -> dict[int, AudioDecodeError]:
        """Decode files ``lo..hi-1`` (those with status OK) into ``out`` (a C-contiguous array): file ``i``'s
        ``n_read[i]`` frames from ``start[i]``, then silence up to ``n_out[i]`` frames, as ``dtype`` ("int16",
        "int32", "float32"), shaped ``(n_out, channels)`` or ``(n_out,)`` with ``downmix``, at byte offset
        ``out_offsets[i]``. The other arguments are arrays over all files. Calls on disjoint ranges may run in
        parallel threads; the core decodes the files on ``pool``'s threads (the pipeline's ``WorkerPool``: see
        :func:`sluice.pipeline.pool.share_items`) and the calling one. Returns the failures among these files."""

    @abc.abstractmethod
    def payloads(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where each plain WAV's samples lie: (index in :data:`WAV_FORMATS`, byte offset of frame 0, bytes per
        frame), the format -1 for files that are not plain WAVs."""

    @abc.abstractmethod
    def close(self) -> None:
        """Free libsndfile's handles (the files cannot be decoded afterwards)."""

    def __enter__(self) -> AudioFiles:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _CoreFiles(AudioFiles):
    """The compiled core's files: one call for all headers, one per decoded chunk, the GIL released in each."""

    def __init__(self, c, data, offsets, sizes, sources: list[str], sndfile: bool):
        self._files = c.AudioFiles(data, offsets, sizes)
        self._sources = sources
        self.status, self.rate, self.channels, self.frames, failed = self._files.open(sndfile)
        self.failures = self._named(failed)

    def _named(self, failed: dict) -> dict[int, AudioDecodeError]:
        return {i: decode_error(self._sources[i], problem, a, b, text) for i, (problem, a, b, text) in failed.items()}

    def decode(self, lo, hi, out, out_offsets, start, n_read, n_out, dtype, downmix, finite=True, pool=None):
        return self._named(self._files.decode(lo, hi, out, out_offsets, start, n_read, n_out, _DTYPE_CODES[dtype],
                                              bool(downmix), bool(finite), pool))

    def payloads(self):
        return self._files.payloads()

    def close(self) -> None:
        self._files.close()


class _TwinFiles(AudioFiles):
    """The pure-Python twin: soundfile opens and reads each file (libsndfile calling back into Python)."""

    def __init__(self, buffers: list, sources: list[str], sndfile: bool):
        n = len(buffers)
        self._sources = sources
        self._handles: list = [None] * n
        self._wavs: list = [None] * n
        self.status = np.full(n, OK, np.int8)
        self.rate, self.channels, self.frames = (np.zeros(n, np.int64) for _ in range(3))
        self.failures = {}
        for i, buf in enumerate(buffers):
            head = self._wavs[i] = parse_wav(buf)
            if head is None and not sndfile:
                self.status[i] = NOT_PARSED
                continue
            if head is None:
                try:
                    head = self._handles[i] = open_audio(buf, sources[i])
                except AudioDecodeError as exc:
                    self.status[i], self.failures[i] = FAILED, exc
                    continue
            self.rate[i], self.channels[i], self.frames[i] = head.samplerate, head.channels, head.frames
        self._buffers = buffers

    def decode(self, lo, hi, out, out_offsets, start, n_read, n_out, dtype, downmix, finite=True, pool=None):
        failures = {}
        for i in range(lo, hi):
            if self.status[i] != OK:
                continue
            if self._handles[i] is None:  # a plain WAV: libsndfile opens it now, as the core does not need to
                self._handles[i] = open_audio(self._buffers[i], self._sources[i])
            channels = int(self.channels[i])
            shape = (int(n_out[i]),) if downmix else (int(n_out[i]), channels)
            view = np.frombuffer(out, dtype=dtype, count=int(np.prod(shape)), offset=int(out_offsets[i]))
            plan = WindowPlan(int(self.rate[i]), channels, int(start[i]), int(n_read[i]), int(n_out[i]))
            try:
                read_into(self._handles[i], plan, view.reshape(shape), self._sources[i], finite)
            except AudioDecodeError as exc:
                failures[i] = exc
        return failures

    def payloads(self):
        n = len(self._wavs)
        fmt, offset, align = np.full(n, -1, np.int8), np.zeros(n, np.int64), np.zeros(n, np.int64)
        for i, w in enumerate(self._wavs):
            if w is not None:
                fmt[i], offset[i], align[i] = WAV_FORMATS.index(w.sample_format), w.data_offset, w.block_align
        return fmt, offset, align

    def close(self) -> None:
        for f in self._handles:
            if f is not None:
                f.close()
        self._handles = [None] * len(self._handles)


def open_files(data: Sequence[Any] | Any, sources: Sequence[str], *, offsets: Sequence[int] | None = None,
               sizes: Sequence[int] | None = None, sndfile: bool = True) -> AudioFiles:
    """Open a batch's encoded files: ``data`` is a sequence of byte buffers (bytes, uint8 NumPy arrays), or one
    buffer holding them all, file ``i`` at ``data[offsets[i]: offsets[i] + sizes[i]]``. ``sources`` name the
    files in errors. Every header is read in this one call: plain WAVs are parsed; with ``sndfile`` every other
    file is opened by libsndfile (and checked: truncated WAV data chunks, Ogg streams without their last page,
    sample rates outside 1 Hz..1 MHz), without it they are left unopened (status :data:`NOT_PARSED`)."""
    sources = list(sources)
    c = _compiled() if sndfile else core()
    if c is not None and hasattr(c, "AudioFiles"):
        if offsets is None:
            data = [np.frombuffer(d, np.uint8) if isinstance(d, (bytes, bytearray, memoryview)) else d for d in data]
        else:
            offsets = np.asarray(offsets, dtype=np.int64)
            sizes = np.asarray(sizes, dtype=np.int64)
        return _CoreFiles(c, data, offsets, sizes, sources, sndfile)
    if offsets is not None:
        region = memoryview(np.ascontiguousarray(data, dtype=np.uint8).reshape(-1))
        data = [region[o: o + s] for o, s in zip(np.asarray(offsets).tolist(), np.asarray(sizes).tolist())]
    return _TwinFiles(list(data), sources, sndfile)


def host_tensor(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor for a batch's output, in a block the core recycles once every view of it is
    gone: a batch of decoded audio is large (113 MB for 64 clips of 10 s), and fresh memory costs a page fault per
    4 KiB on first touch, more than the decoding; torch's allocator returns such blocks to the kernel. Small
    tensors, and all without the core, come from ``torch.empty`` (the C heap reuses small blocks itself)."""
    return host_empty(tuple(int(d) for d in shape), dtype, reuse=True)
