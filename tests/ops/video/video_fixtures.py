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
