"""Constants and the PyAV reference decode shared by the video tests (imported by conftest and test files)."""

from __future__ import annotations

import av
import numpy as np

NUM_FRAMES = 40
# (name, encoder, file name); AV1 is encoded with SVT-AV1 when the wheel has it
CODECS = [
    ("h264-mp4", "libx264", "h264.mp4"),
    ("h264-mov", "libx264", "h264.mov"),
    ("h264-ts", "libx264", "h264.ts"),
    ("hevc-mkv", "libx265", "hevc.mkv"),
    ("mpeg4-avi", "mpeg4", "mpeg4.avi"),
    ("h264-avi", "libx264", "h264.avi"),  # B-frames in AVI: no presentation times in the container
    ("vp9-webm", "libvpx-vp9", "vp9.webm"),
    ("av1-mkv", "libsvtav1", "av1.mkv"),
]
VFR_PTS = [0, 100, 150, 200, 233, 266, 276, 286, 296, 396, 406, 456, 556, 756, 806, 839, 872, 905, 1005, 1015,
           1025, 1035, 1135, 1185, 1235, 1335, 1368, 1401, 1501, 1511]



def reference_frames(path) -> list[np.ndarray]:
    """Every frame of ``path`` decoded sequentially by PyAV (the reference for seeking decodes)."""
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def _mp4_boxes(data: bytes, start: int, end: int):
    """(type, offset, header length, size) of the boxes in ``data[start:end]``."""
    import struct

    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        header = 8
        if size == 1:
            size, header = struct.unpack(">Q", data[pos + 8:pos + 16])[0], 16
        elif size == 0:
            size = end - pos
        yield kind, pos, header, size
        pos += size


def _mp4_find(data: bytes, path: list[bytes], start: int = 0, end: int | None = None) -> tuple[int, int]:
    """(offset, header length) of the first box at ``path`` (e.g. [b"moov", b"trak", b"edts", b"elst"])."""
    for kind, pos, header, size in _mp4_boxes(data, start, len(data) if end is None else end):
        if kind == path[0]:
            return (pos, header) if len(path) == 1 else _mp4_find(data, path[1:], pos + header, pos + size)
    raise KeyError(b"/".join(path))


def trim_edit_list(path, first: int, count: int, fps: int = 30) -> None:
    """Rewrite the edit list of an mp4 (one edit, as the mov muxer writes for libx264 with B-frames) to show
    ``count`` frames from frame ``first`` on, the packets before and after staying in the file: what ``ffmpeg -ss
    -t -c copy`` writes when it cuts a video inside a group of pictures. Frames are 1/fps long."""
    import struct

    data = bytearray(open(path, "rb").read())
    mvhd, h = _mp4_find(data, [b"moov", b"mvhd"])
    movie_scale = struct.unpack(">I", data[mvhd + h + 12:mvhd + h + 16])[0]  # version 0
    mdhd, h = _mp4_find(data, [b"moov", b"trak", b"mdia", b"mdhd"])
    media_scale = struct.unpack(">I", data[mdhd + h + 12:mdhd + h + 16])[0]
    elst, h = _mp4_find(data, [b"moov", b"trak", b"edts", b"elst"])
    body = elst + h
    assert data[body] == 0 and struct.unpack(">I", data[body + 4:body + 8])[0] == 1, "one version-0 edit"
    _, media_time = struct.unpack(">Ii", data[body + 8:body + 16])
    media_time += first * media_scale // fps
    duration = count * movie_scale // fps
    data[body + 8:body + 16] = struct.pack(">Ii", duration, media_time)
    open(path, "wb").write(bytes(data))
