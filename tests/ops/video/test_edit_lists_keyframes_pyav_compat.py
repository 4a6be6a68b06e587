"""Properties of real videos that change which picture is frame ``i``, against PyAV's sequential decode (frame ``i``
is the ``i``-th picture PyAV gives from the start of the file, as DALI numbers frames):

- an mp4 edit list that hides pictures (a video cut with ``ffmpeg -ss -t -c copy`` keeps the group of pictures
  before its first frame, and the packets after its end, in the file, and FFmpeg discards their pictures);
- H.264 keyframes (sync samples) that are no random access points: periodic intra refresh marks its recovery
  points as keyframes, and decoding from one gives wrong pixels for the frames after it.

Each frame carries its index as a barcode; clips are compared value for value with ``dtype=FLOAT,
normalized=False`` (the program of issue 36), and so are their frame numbers and timestamps."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from sluice import fn, pipeline_def, types
from sluice.backends.video import get_index, read_frames
from sluice.backends.video.barcode import read_barcodes, write_barcode_video

from video_fixtures import trim_edit_list

av = pytest.importorskip("av")

NUM, W, H = 48, 64, 48
FIRST, SHOWN = 5, 36  # the cut: frames 5..40 of the encoded 48 (its first GOP cut inside, its last GOP too)


def _pyav(path):
    """PyAV's sequential decode: (frames, their times in seconds)."""
    with av.open(str(path)) as c:
        frames = [(f.to_ndarray(format="rgb24"), float(f.time)) for f in c.decode(video=0)]
    return np.stack([f for f, _ in frames]), np.array([t for _, t in frames])


@pytest.fixture(scope="module")
def cut(tmp_path_factory):
    """An mp4 whose edit list shows frames FIRST..FIRST+SHOWN-1 of the encoded ones (B-frames, GOPs of 12)."""
    root = tmp_path_factory.mktemp("edit_lists")
    whole = root / "whole.mp4"
    write_barcode_video(whole, "libx264", num_frames=NUM, width=W, height=H, options={"bf": "3", "g": "12"})
    path = root / "cut.mp4"
    shutil.copy(whole, path)
    trim_edit_list(path, FIRST, SHOWN)
    ref, times = _pyav(path)
    assert read_barcodes(ref) == list(range(FIRST, FIRST + SHOWN)), "PyAV shows the edit list's frames only"
    return str(path), ref, times


@pytest.fixture(scope="module")
def intra_refresh(tmp_path_factory):
    """H.264 with periodic intra refresh: one IDR picture, then recovery points that the mp4 marks as keyframes."""
    path = tmp_path_factory.mktemp("intra_refresh") / "intra_refresh.mp4"
    # (60 frames: decoding from the recovery point of frame 48 gave frames 50-59 wrong by up to 99 levels, where
    # the missing references' content shows in the frames predicted from them)
    write_barcode_video(path, "libx264", num_frames=60, width=W, height=H,
                        options={"bf": "0", "g": "12", "x264-params": "intra-refresh=1"})
    with av.open(str(path)) as c:
        assert sum(p.is_keyframe for p in c.demux(video=0) if p.size) > 1, "the container marks recovery points"
    ref, times = _pyav(path)
    return str(path), ref, times


def _reader(path: str, device: str, length: int, stride: int, step: int, **kwargs):
    """Every sequence of an epoch: (first frame, FLOAT clip, timestamps)."""
    @pipeline_def(batch_size=3, num_threads=2, device_id=0 if device == "gpu" else None, seed=5)
    def pipe():
        video, _, first, ts = fn.readers.video(device=device, filenames=[path], labels=[0], sequence_length=length,
                                               stride=stride, step=step, enable_frame_num=True,
                                               enable_timestamps=True, dtype=types.FLOAT, normalized=False,
                                               name="Reader", **kwargs)
        return video, first, ts

    p = pipe()
    n = p.epoch_size("Reader")
    out = []
    seen = set()
    for _ in range(40):
        video, first, ts = p.run()
        for i in range(len(video)):
            start = int(first[i].cpu()[0])
            if start not in seen:
                seen.add(start)
                out.append((start, video[i].cpu().numpy(), ts[i].cpu().numpy()))
        if len(seen) >= n:
            break
    p.close()
    return out


def _check_clips(clips, ref, times, length, stride, step, atol=0.0):
    starts = sorted(s for s, _, _ in clips)
    assert starts == list(range(0, len(ref) - (length - 1) * stride, step)), "a sequence per step, over the frames PyAV shows"
    for start, clip, ts in clips:
        want = np.arange(start, start + stride * length, stride)
        assert read_barcodes(np.clip(clip, 0, 255).astype(np.uint8)) == read_barcodes(ref[want]), f"start {start}"
        np.testing.assert_allclose(clip, ref[want].astype(np.float32), rtol=0, atol=atol + 1e-3,
                                   err_msg=f"sequence from frame {start}")
        np.testing.assert_allclose(ts, times[want], rtol=0, atol=1e-4, err_msg=f"timestamps from frame {start}")


def test_edit_list_index_counts_the_frames_pyav_shows(cut):
    path, ref, times = cut
    idx = get_index(path)
    assert idx.num_frames == SHOWN and not idx.damage
    np.testing.assert_allclose(idx.times, times, rtol=0, atol=1e-9)


@pytest.mark.parametrize("frames", [[0, 1, 2], [3, 17, SHOWN - 1], [SHOWN - 1, 0, 8]])
def test_edit_list_frames_are_pyav_frames(cut, frames):
    path, ref, _ = cut
    clip = read_frames(path, frames=frames)
    np.testing.assert_array_equal(clip.frames.numpy(), ref[frames])


@pytest.mark.parametrize("length,stride,step", [(4, 2, 3), (8, 1, 5)])
def test_edit_list_reader_clips(cut, length, stride, step, device="cpu", atol=0.0):
    path, ref, times = cut
    clips = _reader(path, device, length, stride, step)
    _check_clips(clips, ref, times, length, stride, step, atol)


@pytest.mark.cuda
def test_edit_list_reader_clips_gpu(cut):
    test_edit_list_reader_clips(cut, 4, 2, 3, "gpu", atol=2.0)


def test_edit_list_decoders_video_equals_reader(cut):
    path, ref, _ = cut
    data = np.fromfile(path, np.uint8)
    frames = np.array([0, 2, 4, 30, SHOWN - 1], np.int32)

    @pipeline_def(batch_size=1, num_threads=1, device_id=None, seed=1)
    def pipe():
        encoded = fn.external_source(source=lambda: [data], cycle=True)
        wanted = fn.external_source(source=lambda: [frames], cycle=True)
        return fn.decoders.video(encoded, frames=wanted)

    p = pipe()
    (out,) = p.run()
    p.close()
    np.testing.assert_array_equal(out[0].cpu().numpy(), ref[frames])


def test_intra_refresh_keyframes_are_not_seek_points(intra_refresh):
    path, ref, _ = intra_refresh
    idx = get_index(path)
    assert idx.key_frames.tolist() == [0], "recovery points with a recovery period are no random access points"
    for f in (13, 30, 50, 59):
        np.testing.assert_array_equal(read_frames(path, frames=[f]).frames[0].numpy(), ref[f], err_msg=f"frame {f}")


def test_intra_refresh_reader_clips(intra_refresh, device="cpu", atol=0.0):
    path, ref, times = intra_refresh
    clips = _reader(path, device, 4, 3, 5, random_shuffle=True, initial_fill=4)
    _check_clips(clips, ref, times, 4, 3, 5, atol)


@pytest.mark.cuda
def test_intra_refresh_reader_clips_gpu(intra_refresh):
    test_intra_refresh_reader_clips(intra_refresh, "gpu", atol=2.0)


@pytest.mark.parametrize("video", ["cut", "intra_refresh"])
@pytest.mark.parametrize("simple", [False, True])
def test_nvdec_path_frames(request, monkeypatch, video, simple):
    """The NVDEC backend's packets (through the PyAV stand-in of PyNvVideoCodec, which like NVDEC decodes the
    pictures an edit list hides and keeps none of them): the frames PyAV shows, converted as NVDEC converts. Such
    files never go through PyNvVideoCodec's SimpleDecoder, which seeks and counts by the container's tables."""
    import sys

    import fake_nvc
    from sluice.backends.video.nvdec import NvdecBackend

    path, _, _ = request.getfixturevalue(video)
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", fake_nvc.make_module([], with_simple=simple))
    with av.open(path) as c:
        ref = [fake_nvc._nvdec_rgb(f) for f in c.decode(video=0)]
    backend = NvdecBackend(sessions=2)
    n = len(ref)
    for frames in ([0, 1, 2], [3, 17, n - 1], [n - 1, 0, 8], [n - 2, n - 8]):
        clip = read_frames(path, frames=frames, backend=backend)
        for k, f in enumerate(frames):
            np.testing.assert_array_equal(clip.frames[k].numpy(), ref[f], err_msg=f"{video}: frame {f}")
    assert backend.stats["file_decoder_runs"] == 0
