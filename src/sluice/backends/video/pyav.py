"""CPU video backend: PyAV (FFmpeg) with frame threading, driven by the packet index.

For a request, each group of pictures holding a wanted frame is decoded once from its keyframe (a seek to the
keyframe's pts, then decoding forward until the group's last wanted frame is out); consecutive groups are decoded
without a seek when that is no more work. Only wanted frames are converted to RGB. Example::

    idx = get_index("clip.mp4")
    frames = PyAVBackend().decode("clip.mp4", idx, [3, 40, 41])   # {frame: HWC uint8 RGB array}
"""

from __future__ import annotations

import logging
import threading
from typing import Iterable, Iterator, Sequence

import numpy as np

from .bitstream import nonref_detector
from .index import (Source, VideoError, VideoIndex, describe, open_container, packets_from, reusable_container,
                    video_stream)

logger = logging.getLogger(__name__)

#: FFmpeg decoder threads per file of the CPU video operators (their backends are made when sluice loads).
DEFAULT_THREADS = 2


def _decoded_frames(packets: Iterable, name: str, skip=None) -> Iterator:
    """Decoded frames of ``packets`` (to the end of the stream), skipping corrupt packets and those
    ``skip(packet)`` says are not needed."""
    import av

    try:
        for packet in packets:
            if skip is not None and packet.size and skip(packet):
                continue
            try:
                frames = packet.decode()
            except av.error.FFmpegError as e:
                logger.warning("%s: skipping undecodable packet at pts %s: %s", name, packet.pts, e)
                continue
            yield from frames
    except av.error.FFmpegError as e:  # demuxing a truncated or corrupt file
        logger.warning("%s: demuxing stopped: %s", name, e)


def unwanted_nonref(idx: VideoIndex, stream, frames: Sequence[int]):
    """``skip(packet)``: True for packets of non-reference pictures (H.264/HEVC) that no wanted frame needs."""
    detect = nonref_detector(idx.codec, stream.codec_context.extradata)
    if detect is None or idx.count_frames:  # counting decoded frames needs every one of them
        return None
    wanted = {int(f) for f in frames}

    def skip(packet) -> bool:
        pts = packet.pts if packet.pts is not None else packet.dts
        return pts is not None and idx.frame_of_pts(int(pts)) not in wanted and detect(packet)

    return skip


# FFmpeg AVColorSpace -> the YUV matrix NVDEC's RGB output uses: the stream's matrix when it names one, and BT.601
# when it does not (PyNvVideoCodec 2.2 on the H200: NVDEC's RGB of an unspecified-matrix H.264 stream matched
# swscale's BT.601 default within 0.44 levels, and BT.709 by 4.42)
_NVDEC_MATRIX = {1: "ITU709", 4: "FCC", 5: "ITU601", 6: "ITU601", 7: "SMPTE240M", 9: "BT2020", 10: "BT2020"}
COLORS = ("ffmpeg", "nvdec")


class _Rgb:
    """Frame -> HWC uint8 RGB with one cached swscale context (``to_ndarray`` makes a new one per frame, and
    starts threads: 100x slower on small frames).

    ``colors="ffmpeg"`` converts as FFmpeg does by default (an unspecified YUV matrix is BT.601);
    ``colors="nvdec"`` as NVDEC does (the stream's matrix, BT.601 when unspecified; full range when the stream
    says so), so that frames
    decoded on the CPU match frames NVDEC decoded, in the hybrid backend."""

    def __init__(self, colors: str = "ffmpeg") -> None:
        from av.video.reformatter import VideoReformatter

        self._reformatter = VideoReformatter()
        self._nvdec = colors == "nvdec"

    def __call__(self, frame) -> np.ndarray:
        kwargs = {}
        if self._nvdec:
            full = int(getattr(frame, "color_range", 0) or 0) == 2  # AVCOL_RANGE_JPEG
            kwargs = dict(src_colorspace=_NVDEC_MATRIX.get(int(getattr(frame, "colorspace", 2) or 2), "ITU601"),
                          src_color_range="JPEG" if full else "MPEG", dst_color_range="JPEG")
        try:
            return self._reformatter.reformat(frame, format="rgb24", threads=1, **kwargs).to_ndarray()
        except TypeError:  # PyAV before the threads= keyword
            return self._reformatter.reformat(frame, format="rgb24", **kwargs).to_ndarray()


class PyAVBackend:
    """Decodes frames with PyAV on the CPU; ``threads`` decoder threads per file (0: FFmpeg chooses); ``colors``:
    YUV -> RGB as FFmpeg ("ffmpeg") or as NVDEC ("nvdec") converts."""

    device = "cpu"

    def __init__(self, threads: int = 2, colors: str = "ffmpeg") -> None:
        if colors not in COLORS:
            raise ValueError(f"Invalid colors ({colors!r}). Supported values are {', '.join(COLORS)}.")
        self.threads = int(threads)
        self.colors = colors
        self._local = threading.local()

    def _rgb(self) -> "_Rgb":
        """This thread's converter (its swscale context is reused while the frame size stays the same)."""
        rgb = getattr(self._local, "rgb", None)
        if rgb is None:
            rgb = self._local.rgb = _Rgb(self.colors)
        return rgb

    def decode(self, source: Source, idx: VideoIndex, frames: Sequence[int]) -> dict[int, np.ndarray]:
        """Decode the distinct ``frames`` (presentation numbers) of ``source``; returns {frame: HWC uint8 RGB}."""
        plan = idx.plan(frames)
        out: dict[int, np.ndarray] = {}
        if not plan:
            return out
        with reusable_container(source, f"pyav-{self.threads}") as container:
            stream = video_stream(container, idx.name)
            if not stream.codec_context.is_open:  # a reused container keeps its decoder settings
                stream.thread_type = "AUTO"
                stream.codec_context.thread_count = self.threads
            skip = unwanted_nonref(idx, stream, frames)
            self._run_plan(container, stream, idx, plan, out, self._rgb(), skip)
        return out

    def _run_plan(self, container, stream, idx: VideoIndex, plan, out: dict, rgb: "_Rgb", skip) -> None:
        frames_iter = None
        pos = -1  # presentation number of the last frame the decoder gave
        for key, group in plan:
            if frames_iter is None or not (key <= pos + 1 and group[0] > pos):
                frames_iter = self._seek(container, stream, idx, key, skip)
                pos = -1
            pos = self._collect(frames_iter, idx, group, out, pos, rgb)
            missing = [f for f in group if f not in out]
            if missing:
                # the demuxer may have landed after the keyframe: retry once from the previous keyframe / start
                earlier = idx.key_frames[idx.key_frames < key]
                retry_key = int(earlier[-1]) if len(earlier) else 0
                logger.info("%s: frames %s not reached from keyframe %d; retrying from %d", idx.name, missing,
                            key, retry_key)
                frames_iter = self._seek(container, stream, idx, retry_key, skip)
                pos = self._collect(frames_iter, idx, missing, out, -1, rgb)
                missing = [f for f in group if f not in out]
                if missing:
                    raise VideoError(f"{idx.name}: frame {missing[0]} could not be decoded (corrupt or truncated "
                                     f"data in its group of pictures, keyframe {key}; the video has "
                                     f"{idx.num_frames} frames)")

    @staticmethod
    def _seek(container, stream, idx: VideoIndex, key: int, skip) -> Iterator:
        """(frame number, decoded frame) from keyframe ``key`` on."""
        frames = _decoded_frames(packets_from(container, stream, idx, key), idx.name, skip)
        if idx.count_frames:
            return ((key + n, frame) for n, frame in enumerate(frames))
        return ((idx.frame_of_pts(int(frame.pts if frame.pts is not None else frame.dts)), frame)
                for frame in frames if frame.pts is not None or frame.dts is not None)

    @staticmethod
    def _collect(frames_iter, idx: VideoIndex, group: Sequence[int], out: dict, pos: int, rgb: "_Rgb") -> int:
        remaining = set(group)
        last = group[-1]
        for i, frame in frames_iter:
            if i < 0:
                continue
            pos = i
            if i in remaining:
                if getattr(frame, "is_corrupt", False):
                    # the decoder concealed damaged or missing data (FFmpeg's decode_error_flags or its corrupt
                    # flag): a frame of grey or smeared blocks, given out as if nothing had happened
                    raise VideoError(f"{idx.name}: frame {i} is corrupt: the decoder found damaged data in it or in "
                                     "a frame it is predicted from; the file is damaged")
                out[i] = rgb(frame)
                remaining.discard(i)
            if i >= last or not remaining:
                break
        return pos


def read_audio_window(source: Source, start: float, end: float, *, sample_rate: int = 0,
                      name: str | None = None) -> tuple[np.ndarray, int]:
    """Audio samples of ``[start, end)`` seconds of the first audio stream, as float32 ``(samples, channels)``.

    The window is exact to the sample: ``round(end * rate) - round(start * rate)`` samples, zero-padded where the
    audio ends early. ``sample_rate`` resamples (FFmpeg's swresample); 0 keeps the stream's rate. Example::

        audio, rate = read_audio_window("clip.mp4", 1.0, 1.5)
    """
    import av

    name = name or describe(source)
    if not end > start >= 0:
        raise ValueError(f"{name}: audio window [{start}, {end}) s is empty or negative")
    with open_container(source) as container:
        if not container.streams.audio:
            raise VideoError(f"{name} has no audio stream")
        stream = container.streams.audio[0]
        rate = int(sample_rate or stream.codec_context.sample_rate or stream.rate)
        channels = stream.codec_context.channels
        resampler = av.AudioResampler(format="fltp", layout=stream.codec_context.layout, rate=rate)
        first = int(round(start * rate))
        count = int(round(end * rate)) - first
        out = np.zeros((count, channels), np.float32)
        tb = float(stream.time_base)
        try:
            container.seek(max(int(start / tb) - 1, 0), stream=stream, backward=True, any_frame=False)
        except av.error.FFmpegError:
            container.seek(0, stream=stream)
        cursor = None  # sample number (at ``rate``) of the next resampled sample
        for frame in _decoded_frames(container.demux(stream), name):
            if cursor is None:
                if frame.pts is None:
                    raise VideoError(f"{name}: audio frames carry no timestamps")
                cursor = int(round(frame.pts * tb * rate))
            for res in resampler.resample(frame):
                data = res.to_ndarray().T.astype(np.float32, copy=False)  # (samples, channels)
                lo, hi = cursor - first, cursor - first + len(data)
                a, b = max(lo, 0), min(hi, count)
                if b > a:
                    out[a:b] = data[a - lo:b - lo]
                cursor += len(data)
            if cursor - first >= count:
                break
        if cursor is None:
            logger.warning("%s: no audio decoded in [%s, %s) s", name, start, end)
    return out, rate


def default_threads() -> int:
    """Decoder threads per file for the CPU backend: :data:`DEFAULT_THREADS`."""
    return DEFAULT_THREADS
