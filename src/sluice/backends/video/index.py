"""Packet index of a video stream: where every frame is, in presentation order, and which keyframe decodes it.

The index is built once per file by demuxing (no decoding) with PyAV and cached on disk, keyed by the file's
path, size and modification time (or, for encoded bytes, by a hash of the content). Encoded bytes fed again (the
same buffer: address, length and a hash of sampled blocks, :func:`buffer_key`) find their index in memory and
their open container without reading the whole content again. Frames are numbered in
presentation order (packets sorted by pts), so B-frames and variable frame rates are handled exactly: frame ``i``
is the ``i``-th picture shown, and the frame shown at time ``t`` is the last one whose pts is ``<= t``.

Two properties of real files decide what "shown" and "keyframe" mean here, as FFmpeg's sequential decode (and DALI)
see them:

- pictures an mp4 edit list hides (FFmpeg's demuxer marks their packets discarded, and its decoder drops them: a
  video cut with ``ffmpeg -ss -t -c copy`` keeps the group of pictures before its first frame and the packets after
  its end) are no frames. Frame 0 is the first picture the edit list shows; where its keyframe is hidden, decoding
  frame 0's group starts at that hidden keyframe (:meth:`VideoIndex.start_packet`).
- a packet the container marks as a keyframe is a keyframe here only when decoding can start from it
  (``bitstream.random_access_detector``: H.264 IDR pictures and open-GOP recovery points, HEVC IRAP pictures; not
  the recovery points of periodic intra refresh, whose next pictures predict from pictures before them).

A request for frames is turned into a *plan*: the wanted frames grouped by the keyframe to decode them from, so
that each group of pictures is decoded once, from its keyframe, and shared by all wanted frames in it. Example::

    idx = get_index("clip.mp4")
    idx.num_frames, idx.is_vfr
    plan = idx.plan([5, 3, 90, 5])     # [(key frame, [wanted frames...]), ...]
"""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import os
import stat
import sys
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Iterator, Sequence, Union

import numpy as np

from .bitstream import random_access_detector

logger = logging.getLogger(__name__)

Source = Union[str, os.PathLike, bytes, bytearray, memoryview, np.ndarray]

INDEX_VERSION = 5
PAD_MODES = ("none", "constant", "edge", "reflect_1001", "reflect_101")


class VideoError(RuntimeError):
    """A video file cannot be read: corrupt, truncated, no video stream, unsupported codec, missing keyframe."""


def describe(source: Source) -> str:
    """A short name for error messages: the path, or '<N bytes>' for encoded data in memory."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return f"<{len(as_bytes(source))} bytes of encoded video>"


def as_bytes(source) -> bytes | memoryview:
    """Encoded data as a bytes-like object (accepts bytes, numpy uint8 arrays and CPU torch tensors)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return source
    if hasattr(source, "detach"):  # torch tensor
        source = source.detach().cpu().numpy()
    arr = np.ascontiguousarray(np.asarray(source)).view(np.uint8).reshape(-1)
    return memoryview(arr)


class BufferReader(io.RawIOBase):
    """A seekable read-only file over encoded bytes in memory, without copying them (``io.BytesIO`` copies a
    memoryview whole: a 90 MB video per open). Each ``read`` copies only what it returns."""

    def __init__(self, data) -> None:
        super().__init__()
        self._view = memoryview(as_bytes(data)).cast("B")
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        end = len(self._view) if size is None or size < 0 else min(self._pos + size, len(self._view))
        out = self._view[self._pos:end].tobytes()
        self._pos = max(self._pos, end)
        return out

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = max(0, base + int(offset))
        return self._pos

    def tell(self) -> int:
        return self._pos


def open_container(source: Source):
    """Open ``source`` with PyAV, turning FFmpeg's errors into :class:`VideoError` naming the file."""
    import av

    try:
        if isinstance(source, (str, os.PathLike)):
            return av.open(os.fspath(source), "r")
        return av.open(BufferReader(source), "r")
    except (av.error.FFmpegError, OSError, ValueError) as e:
        if isinstance(source, (str, os.PathLike)):
            check_file(source)  # the path itself is the problem: say which
        raise VideoError(f"cannot open video {describe(source)}: {e} (corrupt, truncated or not a "
                         f"container FFmpeg can read; supported containers include mp4, mov, mkv, webm, avi)") from e


_threads = threading.local()
CONTAINERS_PER_THREAD = 4


class _ContainerCache(OrderedDict):
    """One thread's open containers, closed when the thread ends (its local storage goes, and this with it).

    A PyAV container over encoded bytes is in a reference cycle (through its Python file object), so dropping it
    frees it only at a garbage collection, which may come in a child forked later (a DataLoader worker): there,
    freeing a decoder whose FFmpeg threads fork did not copy waits for them forever. Closed here, in the process
    and at the time the thread ends, it holds no such threads when it is collected."""

    def __init__(self) -> None:
        super().__init__()
        self._pid = os.getpid()

    def __del__(self) -> None:
        if os.getpid() != self._pid:
            # A copy made by fork (a child's Python drops the other threads' local storage as it starts): closing or
            # freeing these containers would wait for FFmpeg threads fork did not copy. The child keeps them.
            _FORKED_COPIES.extend(self.values())
            return
        for container in self.values():
            try:
                container.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown, or already closed
                pass


#: Containers of a parent's threads found in a forked child: kept, never freed (see _ContainerCache.__del__).
_FORKED_COPIES: list = []


@contextmanager
def reusable_container(source: Source, tag: str = ""):
    """An open PyAV container for ``source``, kept open per thread between requests for the same file.

    Opening an mp4 parses its whole sample table (about 20 ms for a 50-minute 60 fps video), which would make
    a clip's cost grow with the video's length; reusing the container keeps it constant. The file's size and
    modification time are part of the key, so a changed file is reopened; encoded bytes are keyed by
    :func:`buffer_key` (the container reads the caller's buffer, which it keeps alive while cached).
    Callers seek before reading (every request starts with a seek to a keyframe).
    """
    is_file = isinstance(source, (str, os.PathLike))
    key = (cache_key(source) if is_file else buffer_key(source), tag)
    cache = getattr(_threads, "containers", None)
    if cache is None:
        cache = _threads.containers = _ContainerCache()
    container = cache.pop(key, None) or open_container(source)
    try:
        yield container
    except BaseException:
        container.close()  # its state after a failure is unknown
        raise
    cache[key] = container
    while len(cache) > CONTAINERS_PER_THREAD:
        cache.popitem(last=False)[1].close()


def packets_from(container, stream, idx: "VideoIndex", key: int) -> Iterator:
    """The stream's packets from keyframe ``key``'s packet on (then to the end, with the final empty packet).

    Containers seek differently (mp4 by sample table, mpegts by bisecting timestamps, avi by index): the seek
    aims at the keyframe's dts, packets before the keyframe are dropped, and when the demuxer lands after it the
    seek is retried from the previous keyframe, then from the start. Raises :class:`VideoError` if the keyframe
    is never reached.
    """
    import av

    key_pts, key_dts, key_pos = idx.start_packet(key)
    earlier = idx.key_frames[idx.key_frames < key]
    targets = [key_dts] + ([idx.start_packet(int(earlier[-1]))[1]] if len(earlier) else []) + [None]
    for target in targets:
        try:
            if target is None:
                container.seek(0)
            else:
                container.seek(target, stream=stream, backward=True, any_frame=False)
        except av.error.FFmpegError:
            continue
        demux = container.demux(stream)
        for packet in demux:
            if packet.size == 0:
                break
            ts = packet.dts if idx.count_frames or packet.pts is None else packet.pts
            if ts is None:
                continue
            if int(ts) == key_pts:
                yield packet
                yield from demux
                return
            f = idx.frame_of_pts(int(ts))
            if f >= 0 and idx.decode_position[f] > key_pos:
                break  # landed (or read on) past the keyframe: seek earlier
    raise VideoError(f"{idx.name}: cannot seek to keyframe {key} (pts {key_pts}); the file's index or "
                     f"timestamps are damaged")


def check_file(path: str | os.PathLike) -> None:
    """Raise, naming ``path`` and the reason, when it cannot be read as a video file: FileNotFoundError (it does
    not exist, or is a broken symlink), PermissionError (not readable), VideoError (a symlink loop, a directory,
    an empty file)."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise VideoError(f"video file {p!r} is a symlink loop (its links point back at themselves)") from None
        if e.errno == errno.ENOENT:
            broken = " (a broken symlink)" if os.path.islink(p) else ""
            raise FileNotFoundError(f"video file {p!r} does not exist{broken}") from None
        raise VideoError(f"video file {p!r} cannot be read: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise VideoError(f"video file {p!r} is a directory, not a file")
    if not os.access(p, os.R_OK):
        raise PermissionError(f"video file {p!r} is not readable (permission denied)")
    if st.st_size == 0:
        raise VideoError(f"video file {p!r} is empty (0 bytes)")


def video_stream(container, name: str):
    """The first video stream of an open container, or a :class:`VideoError` naming the file."""
    if not container.streams.video:
        kinds = sorted({s.type for s in container.streams}) or ["none"]
        raise VideoError(f"{name} has no video stream (streams found: {', '.join(kinds)})")
    return container.streams.video[0]


@dataclass
class VideoIndex:
    """Frames of one video stream in presentation order, with their packets' timing and position.

    Arrays (one entry per frame, sorted by presentation time): ``pts`` and ``dts`` in ``time_base`` units,
    ``keyframe`` flags, byte position ``pos`` (-1 when the container does not say) and ``duration``.
    ``decode_order`` lists frame numbers in the order their packets appear in the stream. ``hidden_pts``: the pts of
    pictures the container's edit list hides (no frames); ``preroll``: (pts, dts) of the hidden keyframe that
    decoding frame 0 starts from, when the edit list hides it (else empty); ``demoted_keys``: how many packets the
    container marks as keyframes are not random access points.
    """

    name: str
    codec: str
    width: int
    height: int
    time_base: Fraction
    pts: np.ndarray
    dts: np.ndarray
    keyframe: np.ndarray
    pos: np.ndarray
    duration: np.ndarray
    decode_order: np.ndarray
    container: str = ""
    pix_fmt: str = ""
    average_rate: float = 0.0
    count_frames: bool = False
    declared_frames: int = 0  # frames the container's own table says the stream has (mp4/mov; 0: not said)
    hidden_pts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    preroll: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    demoted_keys: int = 0
    key_frames: np.ndarray = field(init=False, repr=False)
    _by_pts: dict | None = field(default=None, init=False, repr=False)
    _decode_position: np.ndarray | None = field(default=None, init=False, repr=False)
    _cached: dict = field(default_factory=dict, init=False, repr=False)  # facts of the whole stream, made once

    def __post_init__(self) -> None:
        self.key_frames = np.flatnonzero(self.keyframe)

    @property
    def decode_position(self) -> np.ndarray:
        """For each frame, the position of its packet in the stream (decode order)."""
        if self._decode_position is None:
            pos = np.empty(self.num_frames, np.int64)
            pos[self.decode_order] = np.arange(self.num_frames)
            self._decode_position = pos
        return self._decode_position

    def frame_of_pts(self, pts: int) -> int:
        """Frame number of a decoded frame's pts (the last frame at or before it when not exact; -1 if none, and
        for the pictures an edit list hides)."""
        if self._by_pts is None:
            by_pts = {int(p): -1 for p in self.hidden_pts.tolist()}
            by_pts.update((int(p), i) for i, p in enumerate(self.pts.tolist()))
            self._by_pts = by_pts
        i = self._by_pts.get(pts)
        return i if i is not None else int(np.searchsorted(self.pts, pts, side="right")) - 1

    # ------------------------------------------------------------------ facts
    @property
    def num_frames(self) -> int:
        return int(len(self.pts))

    @property
    def damage(self) -> str:
        """Why the file is damaged ("" when it is not seen to be): fewer frames could be read than its container's
        sample table declares (a truncated file, or one whose header lies, such as an ``mdhd`` timescale of 0)."""
        read = self.num_frames + len(self.hidden_pts)  # the table counts the pictures an edit list hides too
        if self.declared_frames > read:
            return (f"its container declares {self.declared_frames} frames but only {read} could be read "
                    f"(truncated, or a damaged header)")
        return ""

    @property
    def container_tables_exact(self) -> bool:
        """Whether the container's own tables number and seek frames as this index does: no picture hidden by an
        edit list, and every keyframe it marks a random access point. A decoder that seeks and counts frames by
        those tables (PyNvVideoCodec's SimpleDecoder) can give other frames where this is False."""
        return not len(self.hidden_pts) and not self.demoted_keys

    def start_packet(self, key: int) -> tuple[int, int, int]:
        """(pts, dts, decode position) of the packet a decode from keyframe ``key`` starts at: the keyframe's own,
        or, for frame 0 of a video whose edit list hides the keyframe before it, that hidden keyframe's (decode
        position -1: before every frame's packet)."""
        if key == 0 and len(self.preroll):
            return int(self.preroll[0]), int(self.preroll[1]), -1
        return int(self.pts[key]), int(self.dts[key]), int(self.decode_position[key])

    @property
    def times(self) -> np.ndarray:
        """Presentation time of every frame in seconds (float64; computed once: do not modify)."""
        t = self._cached.get("times")
        if t is None:
            t = self._cached["times"] = self.pts.astype(np.float64) * float(self.time_base)
            t.flags.writeable = False
        return t

    @property
    def end_time(self) -> float:
        """Time at which the last frame stops being shown, in seconds."""
        if not self.num_frames:
            return 0.0
        last = int(self.pts[-1]) + max(int(self.duration[-1]), 0)
        if self.duration[-1] <= 0 and self.num_frames > 1:
            last = int(self.pts[-1]) + int(self.median_interval)
        return last * float(self.time_base)

    @property
    def frame_intervals(self) -> np.ndarray:
        return np.diff(self.pts)

    @property
    def median_interval(self) -> float:
        """The median distance between consecutive frames' pts (time_base units; 0 with fewer than 2 frames)."""
        med = self._cached.get("median_interval")
        if med is None:
            d = self.frame_intervals
            med = self._cached["median_interval"] = float(np.median(d)) if len(d) else 0.0
        return med

    @property
    def closest_interval(self) -> float:
        """The shortest time between consecutive frames in seconds (1.0 with fewer than 2 frames)."""
        c = self._cached.get("closest")
        if c is None:
            t = self.times
            c = self._cached["closest"] = float(np.diff(t).min()) if len(t) > 1 else 1.0
        return c

    @property
    def dts_lead(self) -> int:
        """How far the stream's first dts lies below its first pts (time_base units; negative with B-frames)."""
        lead = self._cached.get("dts_lead")
        if lead is None:
            lead = self._cached["dts_lead"] = int(self.dts.min()) - int(self.pts.min()) if self.num_frames else 0
        return lead

    @property
    def is_vfr(self) -> bool:
        """True when frame intervals vary by more than timestamp rounding (1 tick or 2% of the median)."""
        vfr = self._cached.get("vfr")
        if vfr is None:
            d = self.frame_intervals
            vfr = len(d) >= 2 and float(d.max() - d.min()) > max(1.0, 0.02 * self.median_interval)
            self._cached["vfr"] = vfr
        return vfr

    @property
    def fps(self) -> float:
        """Mean frame rate over the stream (frames per second)."""
        if self.num_frames > 1:
            span = (int(self.pts[-1]) - int(self.pts[0])) * float(self.time_base)
            if span > 0:
                return (self.num_frames - 1) / span
        return float(self.average_rate)

    def gop_lengths(self) -> np.ndarray:
        """Number of frames from each keyframe to the next (presentation order)."""
        keys = self.key_frames
        if not len(keys):
            return np.zeros(0, np.int64)
        return np.diff(np.append(keys, self.num_frames))

    # -------------------------------------------------------------- requests
    def start_keyframe(self, frames: np.ndarray) -> np.ndarray:
        """For each frame, the keyframe to start decoding from: the last keyframe whose pts is <= the frame's.

        Decoding from there in stream order reaches the frame for closed and open GOPs alike (leading B-frames
        of an open GOP start from the previous keyframe). Raises :class:`VideoError` for frames before the first
        keyframe (a file whose first keyframe is missing).
        """
        frames = np.asarray(frames, np.int64)
        keys = self.key_frames
        pos = np.searchsorted(self.pts[keys], self.pts[frames], side="right") - 1 if len(keys) else \
            np.full(len(frames), -1)
        if len(frames) and (pos < 0).any():
            bad = int(frames[np.argmax(pos < 0)])
            first = f"the first keyframe is frame {int(keys[0])}" if len(keys) else "the stream has no keyframe"
            raise VideoError(f"{self.name}: frame {bad} cannot be decoded: no keyframe before it ({first}); "
                             f"the file is missing its keyframe (cut or corrupt)")
        return keys[pos]

    def plan(self, frames: Sequence[int]) -> list[tuple[int, list[int]]]:
        """Group the distinct wanted frames by start keyframe, in stream order: ``[(keyframe, [frames...])]``."""
        wanted = np.unique(np.asarray(frames, np.int64))
        if not len(wanted):
            return []
        starts = self.start_keyframe(wanted)
        groups: "OrderedDict[int, list[int]]" = OrderedDict()
        for key, f in zip(starts.tolist(), wanted.tolist()):
            groups.setdefault(key, []).append(f)
        return list(groups.items())

    def frame_at_times(self, times: Sequence[float], pad_mode: str = "none") -> np.ndarray:
        """Frame shown at each time (seconds, stream clock): the last frame whose pts is <= t.

        Times past the end are an error with ``pad_mode='none'``; otherwise they map to frame numbers past the end
        (one more per mean frame interval), which :meth:`resolve_padding` then pads. Negative times are errors.
        """
        t = np.asarray(times, np.float64).reshape(-1)
        stamps = self.times
        idx = np.searchsorted(stamps, t + 1e-9, side="right") - 1
        # times between 0 and the first frame's pts show the first frame
        idx = np.where((t >= 0) & (idx < 0), 0, idx)
        neg = (t < 0) | ~np.isfinite(t)
        if neg.any():
            raise ValueError(f"{self.name}: timestamp {float(t[np.argmax(neg)])} s is out of range: timestamps are "
                             f"seconds from 0 to {self.end_time:.6g}")
        over = t >= self.end_time
        if over.any():
            if pad_mode == "none":
                raise ValueError(f"{self.name}: timestamp {float(t[np.argmax(over)])} s is out of range: the video "
                                 f"shows frames from 0 to {self.end_time:.6g} s; pass pad_mode= one of "
                                 f"{PAD_MODES[1:]} to pad")
            step = 1.0 / self.fps if self.fps > 0 else 1.0
            idx = np.where(over, self.num_frames + np.floor((t - self.end_time) / step), idx)
        return idx.astype(np.int64)

    def resolve_padding(self, frames: Sequence[int], pad_mode: str = "none") -> np.ndarray:
        """Map requested frame numbers onto real frames; -1 marks a constant-fill frame.

        ``edge`` repeats the last frame, ``reflect_1001`` mirrors with the edge repeated (..., n-1, n-1, n-2),
        ``reflect_101`` without (..., n-1, n-2, n-3), ``constant`` gives -1; ``none`` raises for frames out of
        range. Negative frame numbers are always an error.
        """
        f = np.asarray(frames, np.int64).reshape(-1)
        n = self.num_frames
        if pad_mode not in PAD_MODES:
            raise ValueError(f"Invalid pad_mode ({pad_mode!r}). Supported values are {', '.join(PAD_MODES)}.")
        if len(f) and f.min() < 0:
            raise ValueError(f"{self.name}: frame {int(f.min())} is out of range: frames are numbered from 0 "
                             f"to {n - 1}")
        over = f >= n
        if not over.any():
            return f
        if pad_mode == "none" or n == 0:
            damage = f"; {self.damage}" if self.damage else ""
            raise ValueError(f"{self.name}: frame {int(f[over][0])} is out of range: the video has {n} frames "
                             f"(0 to {n - 1}){damage}; pass pad_mode= one of {PAD_MODES[1:]} to pad")
        if pad_mode == "constant":
            return np.where(over, -1, f)
        if pad_mode == "edge":
            return np.minimum(f, n - 1)
        if pad_mode == "reflect_1001":
            period = 2 * n
            m = f % period
            return np.where(m < n, m, period - 1 - m)
        period = max(2 * n - 2, 1)  # reflect_101
        m = f % period
        return np.where(m < n, m, period - m)

    # ------------------------------------------------------------ (de)serialise
    def to_arrays(self) -> dict:
        return dict(version=np.int64(INDEX_VERSION), pts=self.pts, dts=self.dts, keyframe=self.keyframe,
                    pos=self.pos, duration=self.duration, decode_order=self.decode_order,
                    hidden_pts=self.hidden_pts, preroll=self.preroll,
                    meta=np.array([self.codec, str(self.width), str(self.height), str(self.time_base.numerator),
                                   str(self.time_base.denominator), self.container, self.pix_fmt,
                                   repr(self.average_rate), str(int(self.count_frames)),
                                   str(int(self.declared_frames)), str(int(self.demoted_keys))]))

    @classmethod
    def from_arrays(cls, name: str, a) -> "VideoIndex":
        if int(a["version"]) != INDEX_VERSION:
            raise ValueError("stale index version")
        codec, w, h, num, den, cont, pix, rate, count, declared, demoted = [str(x) for x in a["meta"]]
        return cls(name=name, codec=codec, width=int(w), height=int(h), time_base=Fraction(int(num), int(den)),
                   pts=a["pts"], dts=a["dts"], keyframe=a["keyframe"].astype(bool), pos=a["pos"],
                   duration=a["duration"], decode_order=a["decode_order"], container=cont, pix_fmt=pix,
                   average_rate=float(rate), count_frames=bool(int(count)), declared_frames=int(declared),
                   hidden_pts=a["hidden_pts"], preroll=a["preroll"], demoted_keys=int(demoted))


def build_index(source: Source, name: str | None = None) -> VideoIndex:
    """Demux ``source`` (a path or encoded bytes) once and index its first video stream's packets."""
    import av

    name = name or describe(source)
    with open_container(source) as container:
        stream = video_stream(container, name)
        ctx = stream.codec_context
        # AVI stores no presentation times: FFmpeg's packet pts follow decode order even with B-frames. There,
        # frame i is the i-th slot of the constant frame rate (its dts), and decoded frames are numbered by
        # counting from the keyframe a decode starts at (closed GOPs: the keyframe is shown first).
        count_frames = container.format.name.split(",")[0] == "avi"
        is_rap = None if count_frames or ctx is None else random_access_detector(_codec_name(ctx), ctx.extradata)
        rows = []
        hidden = []  # (pts, dts, keyframe) of the pictures an edit list hides
        demoted, seen_key = 0, False
        try:
            for packet in container.demux(stream):
                if packet.size == 0:
                    continue
                pts = packet.pts if packet.pts is not None and not count_frames else packet.dts
                if pts is None:
                    raise VideoError(f"{name}: packet {len(rows)} has no timestamp; cannot index frames by time")
                dts = packet.dts if packet.dts is not None else pts
                key = bool(packet.is_keyframe)
                if key and is_rap is not None and seen_key and not is_rap(packet):
                    key, demoted = False, demoted + 1  # (the first keyframe stays one: decoding starts there)
                seen_key = seen_key or key
                if getattr(packet, "is_discard", False):  # (an older PyAV lacks the flag)
                    hidden.append((pts, dts, key))
                    continue
                rows.append((pts, dts, key, packet.pos if packet.pos is not None else -1, packet.duration or 0))
        except av.error.FFmpegError as e:
            logger.warning("%s: demuxing stopped after %d packets: %s (truncated file?)", name, len(rows), e)
        if not rows:
            shown = f" ({len(hidden)} pictures, all hidden by its edit list)" if hidden else ""
            raise VideoError(f"{name}: the video stream has no packets{shown} (empty, truncated or corrupt file)")
        if stream.time_base is None:
            raise VideoError(f"{name}: the video stream has no time base")
        arr = np.array(rows, dtype=np.int64)
        order = np.argsort(arr[:, 0], kind="stable")
        # decode_order[k] = frame number (presentation order) of the k-th packet in the stream
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        sorted_rows = arr[order]
        dup = np.flatnonzero(np.diff(sorted_rows[:, 0]) == 0)
        if len(dup):
            logger.warning("%s: %d packets share a pts with another one", name, len(dup))
        keyframe = sorted_rows[:, 2].astype(bool)
        preroll = np.zeros(0, np.int64)
        if not keyframe[0]:  # frame 0's keyframe hidden by the edit list: its decode starts there
            before = [(p, d) for p, d, k in hidden if k and p <= sorted_rows[0, 0]]
            if before:
                preroll = np.array(max(before), np.int64)
                keyframe[0] = True
        return VideoIndex(
            name=name, codec=_codec_name(ctx), width=int(ctx.width), height=int(ctx.height),
            time_base=Fraction(stream.time_base.numerator, stream.time_base.denominator),
            pts=sorted_rows[:, 0].copy(), dts=sorted_rows[:, 1].copy(), keyframe=keyframe,
            pos=sorted_rows[:, 3].copy(), duration=sorted_rows[:, 4].copy(), decode_order=rank,
            container=container.format.name, pix_fmt=str(ctx.pix_fmt or ""),
            average_rate=float(stream.average_rate or 0.0), count_frames=count_frames,
            declared_frames=int(stream.frames or 0) if container.format.name.startswith("mov") else 0,
            hidden_pts=np.sort(np.array([h[0] for h in hidden], np.int64)), preroll=preroll, demoted_keys=demoted)


# ---------------------------------------------------------------------------------------------- caching
def cache_dir() -> Path:
    """Where indexes are stored: ``video_index`` in sluice's cache (``$SLUICE_CACHE``), or
    ``$SLUICE_VIDEO_INDEX_DIR`` when set (e.g. a folder of indexes shared by several machines); see
    :mod:`sluice.env`."""
    return _sluice_env().video_index_dir()


def _sluice_env():
    """:mod:`sluice.env`; in a CPU video worker process, which loads this module without sluice, loaded by its
    path (standard library only): ``import sluice.env`` would import sluice and torch there, seconds on a
    worker's first job with all of them starting at once."""
    if __name__.startswith("sluice."):
        from sluice import env

        return env
    module = sys.modules.get("_sluice_env")
    if module is None:
        import importlib.util

        path = Path(__file__).resolve().parents[2] / "env.py"
        spec = importlib.util.spec_from_file_location("_sluice_env", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["_sluice_env"] = module
    return module


#: Encoded bytes up to this size are hashed whole by :func:`buffer_key`; larger ones by sampled blocks.
SAMPLED_HASH_ABOVE = 1 << 20
_SAMPLE_EDGE, _SAMPLE_BLOCK, _SAMPLE_BLOCKS = 64 << 10, 1 << 10, 64


def buffer_key(source: Source) -> tuple:
    """An O(1) key of encoded bytes in memory: the buffer's address and length and a BLAKE2 hash of its first and
    last 64 KiB and 64 blocks of 1 KiB spread between them (the whole content up to 1 MiB).

    The same buffer fed again (``external_source`` feeding one file's bytes every iteration) is found without
    hashing 90 MB per sample; a buffer reused for other content of the same length changes its container's
    header (an mp4's ``moov``, at its start or end) and so its key. The full hash (:func:`cache_key`) still keys
    the disk cache, once per buffer.
    """
    arr = np.frombuffer(as_bytes(source), np.uint8)
    n = int(arr.size)
    h = hashlib.blake2b(digest_size=16)
    if n <= SAMPLED_HASH_ABOVE:
        h.update(arr)
    else:
        h.update(arr[:_SAMPLE_EDGE])
        h.update(arr[n - _SAMPLE_EDGE:])
        for start in np.linspace(_SAMPLE_EDGE, n - _SAMPLE_EDGE - _SAMPLE_BLOCK, _SAMPLE_BLOCKS).astype(np.int64):
            h.update(arr[start:start + _SAMPLE_BLOCK])
    return ("bytes", arr.ctypes.data if n else 0, n, h.hexdigest())


def source_identity(source: Source) -> tuple:
    """What names the same encoded data within one batch, in O(1): a file's absolute path, or a buffer's address
    and length. Each sample of ``external_source`` feeding one file's bytes is a view of its own over the same
    memory, so its object identity differs while this does not (the hybrid backend then decodes a group of pictures
    wanted by several of them once)."""
    if isinstance(source, (str, os.PathLike)):
        return ("file", os.path.abspath(os.fspath(source)))
    if isinstance(source, (bytes, bytearray, memoryview)):
        arr = np.frombuffer(source, np.uint8)
    elif isinstance(source, np.ndarray) and source.flags.c_contiguous:
        arr = source.reshape(-1).view(np.uint8)
    elif hasattr(source, "data_ptr") and source.device.type == "cpu" and source.is_contiguous():
        return ("bytes", source.data_ptr(), source.numel() * source.element_size())
    else:  # a copy would be made: its address could be another copy's later, so only the object names it
        return ("object", id(source))
    return ("bytes", arr.ctypes.data, int(arr.size)) if arr.size else ("object", id(source))


def file_key(path: str | os.PathLike) -> tuple:
    """What names a file's content in O(1): its absolute path, device and inode. The inode tells apart two files
    a path named in turn (a memfd's ``/proc/PID/fd/N`` once that number is reused, a file replaced by another)."""
    path = os.path.abspath(os.fspath(path))
    st = os.stat(path)
    return path, st.st_dev, st.st_ino


def cache_key(source: Source) -> str:
    """Path, device, inode, size and modification time for files; a BLAKE2 hash of the content for bytes."""
    h = hashlib.blake2b(digest_size=16)
    if isinstance(source, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(source))
        st = os.stat(path)
        h.update(f"file\0{path}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    else:
        h.update(b"bytes\0")
        h.update(as_bytes(source))
    return h.hexdigest()


_memory: "OrderedDict[str | tuple, VideoIndex]" = OrderedDict()
_memory_lock = threading.Lock()
_MEMORY_ENTRIES = 256


def _remember(key, idx: VideoIndex | None = None) -> VideoIndex | None:
    """Look ``key`` up in the in-memory indexes (``idx`` None), or store ``idx`` under it."""
    with _memory_lock:
        if idx is None:
            idx = _memory.get(key)
            if idx is not None:
                _memory.move_to_end(key)
            return idx
        _memory[key] = idx
        while len(_memory) > _MEMORY_ENTRIES:
            _memory.popitem(last=False)
        return idx


_flights: dict = {}  # key -> [lock, users]: one thread finds or builds an index, the others wait for it
_flights_lock = threading.Lock()


@contextmanager
def _single_flight(key):
    """Hold ``key``'s own lock: threads asking for the same index at once (every sample of a batch feeding the
    same video) wait for the one that builds it instead of each demuxing the whole file."""
    with _flights_lock:
        entry = _flights.setdefault(key, [threading.Lock(), 0])
        entry[1] += 1
    try:
        with entry[0]:
            yield
    finally:
        with _flights_lock:
            entry[1] -= 1
            if not entry[1]:
                del _flights[key]


def get_index(source: Source, *, cache: bool = True, name: str | None = None, key: str | None = None
              ) -> VideoIndex:
    """The index of ``source``, from memory, then the disk cache, else built (and stored) now; built once when
    several threads ask for it at once.

    Encoded bytes are first looked up by :func:`buffer_key` (O(1) in their length), and hashed whole only when
    that buffer was not seen before. ``key``: the :func:`cache_key` of the content when the caller knows it (a
    memfd holding bytes whose index was cached under their hash: a worker process finds it instead of indexing
    the file again)."""
    name = name or describe(source)
    if not cache:
        return build_index(source, name)
    is_file = isinstance(source, (str, os.PathLike))
    if is_file:
        check_file(source)
    fast = None if is_file else buffer_key(source)
    if fast is not None and (hit := _remember(fast)) is not None:
        return hit
    if key is not None and (hit := _remember(key)) is not None:
        return hit
    with _single_flight(fast or key or os.path.abspath(os.fspath(source))):
        return _find_or_build(source, name, fast, key)


_content_keys: "OrderedDict[tuple, str]" = OrderedDict()  # buffer_key -> cache_key of bytes already hashed


def content_key(source: Source) -> str:
    """:func:`cache_key` of ``source``, without hashing bytes whose index was looked up already (by
    :func:`buffer_key`)."""
    if not isinstance(source, (str, os.PathLike)):
        with _memory_lock:
            key = _content_keys.get(buffer_key(source))
        if key is not None:
            return key
    return cache_key(source)


def _find_or_build(source: Source, name: str, fast: tuple | None, key: str | None = None) -> VideoIndex:
    if fast is not None and (hit := _remember(fast)) is not None:
        return hit
    key = key or cache_key(source)
    if fast is not None:
        with _memory_lock:
            _content_keys[fast] = key
            while len(_content_keys) > _MEMORY_ENTRIES:
                _content_keys.popitem(last=False)
    hit = _remember(key)
    if hit is not None:
        return hit if fast is None else _remember(fast, hit)
    path = cache_dir() / f"{key}.npz"
    idx = None
    if path.exists():
        try:
            with np.load(path, allow_pickle=False) as a:
                idx = VideoIndex.from_arrays(name, a)
        except Exception as e:  # a damaged or stale cache entry is rebuilt, never trusted
            logger.info("ignoring video index cache %s: %s", path, e)
    if idx is None:
        idx = build_index(source, name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp.npz")
            np.savez(tmp, **idx.to_arrays())
            os.replace(tmp, path)
        except OSError as e:
            logger.info("cannot write video index cache %s: %s", path, e)
    _remember(key, idx)
    return idx if fast is None else _remember(fast, idx)


def _codec_name(ctx) -> str:
    """The codec's canonical name ('av1', not the decoder's 'libdav1d')."""
    codec = getattr(ctx, "codec", None)
    return str(getattr(codec, "canonical_name", None) or ctx.name)
