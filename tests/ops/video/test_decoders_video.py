"""fn.decoders.video in a pipeline: frames checked by their barcodes; PyAV is the reference decoder."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from sluice import fn, pipeline_def
from sluice.backends.video.barcode import read_barcode, write_barcode_video
from sluice.testing import run_op

from video_fixtures import VFR_PTS


def encoded(path) -> np.ndarray:
    return np.frombuffer(path.read_bytes(), np.uint8).copy()


def codes(sample) -> list[int]:
    return [read_barcode(f) for f in sample]


def test_frames_any_order_with_repeats(videos):
    names = ["h264-mp4", "vp9-webm", "mpeg4-avi"]
    out = run_op("decoders.video", [encoded(videos[n]) for n in names], frames=[7, 1, 7, 39, 0])
    assert out.layout() == "FHWC" and len(out) == 3
    for i in range(3):
        assert out[i].shape == (5, 48, 64, 3) and out[i].dtype == torch.uint8
        assert codes(out[i]) == [7, 1, 7, 39, 0]


def test_range_and_outputs(videos):
    frames, ts, nums = run_op("decoders.video", [encoded(videos["h264-mkv" if "h264-mkv" in videos else "h264-mov"])],
                              start_frame=30, sequence_length=4, stride=4, pad_mode="edge",
                              enable_timestamps=True, enable_frame_num=True)
    assert codes(frames[0]) == [30, 34, 38, 39]
    assert nums[0].tolist() == [30, 34, 38, 39]
    np.testing.assert_allclose(ts[0].numpy(), np.array([30, 34, 38, 39]) / 30.0, atol=1e-6)


def test_timestamps_vfr(vfr_videos):
    t = np.array(VFR_PTS) / 1000.0
    out = run_op("decoders.video", [encoded(vfr_videos["mkv"])], timestamps=[t[4], t[12] + 0.01, t[-1] + 0.005])
    assert codes(out[0]) == [4, 12, len(VFR_PTS) - 1]


def test_per_sample_frames_from_a_node(videos):
    data = [encoded(videos["h264-mp4"]), encoded(videos["vp9-webm"])]
    wanted = [np.array([3, 30], np.int32), np.array([11, 2, 2], np.int32)]

    @pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=1)
    def pipe():
        enc = fn.external_source(source=lambda: data)
        idx = fn.external_source(source=lambda: wanted)
        return fn.decoders.video(enc, frames=idx)

    p = pipe()
    (out,) = p.run()
    p.close()  # its prefetching would go on into the next test
    assert codes(out[0]) == [3, 30] and codes(out[1]) == [11, 2, 2]


def test_with_readers_file_uses_the_path_index(tmp_path, monkeypatch):
    from sluice.backends.video import index as index_mod

    # Videos of this test only: calls are matched by content, and a thread of an earlier test's pipeline, still
    # prefetching, may hash bytes of its own meanwhile (bytes of the session's videos, read from their files).
    for n in (12, 13):
        write_barcode_video(tmp_path / f"v{n}.mp4", num_frames=n)
    files = {p.read_bytes() for p in tmp_path.iterdir()}
    hashed = []
    key = index_mod.cache_key
    monkeypatch.setattr(index_mod, "cache_key", lambda s: hashed.append(s) or key(s))

    @pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=1)
    def pipe():
        data, _ = fn.readers.file(file_root=str(tmp_path), file_filters=["*.mp4"])
        return fn.decoders.video(data, frames=[2, 9])

    p = pipe()
    (out,) = p.run()
    p.close()
    assert codes(out[0]) == [2, 9] and codes(out[1]) == [2, 9]
    # Keyed by path, never by hashing the files' bytes.
    assert any(isinstance(s, (str, os.PathLike)) for s in hashed)
    assert not any(bytes(index_mod.as_bytes(s)) in files for s in hashed if not isinstance(s, (str, os.PathLike)))


def test_errors_name_the_problem(videos):
    with pytest.raises(Exception, match=r"frame 40 is out of range: the video has 40 frames.*pad_mode"):
        run_op("decoders.video", [encoded(videos["h264-mp4"])], frames=[40])
    with pytest.raises(Exception, match=r"cannot open video .*corrupt, truncated"):
        run_op("decoders.video", [np.arange(500, dtype=np.uint8)], frames=[0])
    with pytest.raises(Exception, match="frames cannot be combined with start_frame"):
        run_op("decoders.video", [encoded(videos["h264-mp4"])], frames=[1], sequence_length=3)
    with pytest.raises(Exception, match=r"invalid pad_mode \('wrap'\). Supported values are 'none', 'constant'"):
        run_op("decoders.video", [encoded(videos["h264-mp4"])], frames=[1], pad_mode="wrap")


@pytest.mark.cuda
def test_mixed_nvdec(nvdec_videos):
    names = [n for n in ("h264-mp4", "hevc-mkv", "vp9-webm", "av1-mkv", "mpeg4-avi") if n in nvdec_videos]
    frames, nums = run_op("decoders.video", [encoded(nvdec_videos[n]) for n in names], device="mixed",
                          frames=[5, 39, 0, 5], enable_frame_num=True)
    for i in range(len(names)):
        assert frames[i].is_cuda and codes(frames[i]) == [5, 39, 0, 5], names[i]
        assert nums[i].is_cuda


def test_mixed_decoder_starts_its_workers_when_built(monkeypatch):
    """The mixed decoder's operator, made when the pipeline is built, gets its backend ready then (its CPU worker
    processes start; the first batch would otherwise wait for them)."""
    from types import SimpleNamespace

    from sluice.ops.decoders import video as decoders_video

    started = []
    backend = SimpleNamespace(get_ready=lambda path=None: started.append(path))
    monkeypatch.setattr(decoders_video, "gpu_backend", lambda runtime, device_id: backend)
    decoders_video.SCHEMA.kernel_for("mixed")(SimpleNamespace(device_id=0))
    assert started == [None]  # no file known at build: the workers only
