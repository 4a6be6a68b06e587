# ruff: noqa: I001, PLR0402
"""A DALI program in the style of a user's video loader: the DALI proxy with a PyTorch DataLoader, started and
stopped with ``start_thread()`` / ``stop_thread()`` (DALIServer's documented lifecycle), whose Dataset hands
encoded videos and frame lists to ``server.proxy``; the pipeline decodes the frames with
``fn.experimental.decoders.video(frames=..., build_index=True)`` and resizes the clips (FHWC). Written afresh on
generated videos; the DALI code is unchanged but for the first import line.

Reference: each generated frame carries its index as a barcode (sluice.backends.video.barcode), read back from
the resized frames (the resize keeps the width, so the barcode's blocks keep theirs).
"""

import sluice.compat; sluice.compat.install()  # the one line a DALI program adds

import numpy as np
import pytest
import torch
import nvidia.dali.fn as fn
from nvidia.dali import pipeline_def
from nvidia.dali.plugin.pytorch.experimental import proxy as dali_proxy

av = pytest.importorskip("av")

from sluice.backends.video.barcode import read_barcode, write_barcode_video

NUM_FRAMES = 20
CLIP = [[0, 2, 4, 6], [19, 18, 1, 10], [5, 5, 6, 7], [3, 9, 12, 15]]


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("SLUICE_VIDEO_INDEX_DIR", str(tmp_path_factory.mktemp("video_index")))
    root = tmp_path_factory.mktemp("proxy_videos")
    files = []
    for i in range(2):
        path = root / f"clip{i}.mp4"
        write_barcode_video(path, "libx264", num_frames=NUM_FRAMES)
        files.append(str(path))
    yield files
    mp.undo()


@pipeline_def
def clip_pipe(decoder_device):
    video = fn.external_source(name="video", no_copy=True)
    frames = fn.external_source(name="frames")
    clips = fn.experimental.decoders.video(video, device=decoder_device, frames=frames, build_index=True)
    return fn.resize(clips, size=[36, 64])


class Clips(torch.utils.data.Dataset):
    def __init__(self, files, proxy):
        self.files, self.proxy = files, proxy

    def __len__(self):
        return len(CLIP)

    def __getitem__(self, i):
        data = np.fromfile(self.files[i % len(self.files)], dtype=np.uint8)
        return self.proxy(video=data, frames=np.array(CLIP[i], dtype=np.int32)), i


def run_program(files, device):
    pipe = clip_pipe(batch_size=2, num_threads=2, device_id=0 if device == "gpu" else None, seed=1,
                     decoder_device="mixed" if device == "gpu" else "cpu", prefetch_queue_depth=2)
    server = dali_proxy.DALIServer(pipe)
    server.start_thread()
    try:
        loader = dali_proxy.DataLoader(server, Clips(files, server.proxy), batch_size=2, num_workers=2)
        seen = {}
        for clips, index in loader:
            assert tuple(clips.shape) == (2, 4, 36, 64, 3) and clips.dtype == torch.uint8
            assert clips.device.type == ("cuda" if device == "gpu" else "cpu")
            for clip, i in zip(clips, index.tolist()):
                seen[i] = [read_barcode(frame) for frame in clip]
    finally:
        server.stop_thread()
    assert seen == dict(enumerate(CLIP))


def test_proxy_program(videos):
    run_program(videos, "cpu")


@pytest.mark.cuda
def test_proxy_program_gpu(videos):
    run_program(videos, "gpu")
