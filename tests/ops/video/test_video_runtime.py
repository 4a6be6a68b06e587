"""The GPU video backends belong to the pipeline's runtime (issue 37): NVDEC's split pool and open-ahead threads and
the hybrid backend's per-path workers are the runtime's threads, one NVDEC and one hybrid backend per pipeline and
GPU (no process-wide singleton), closed with the pipeline. Run on the CPU through the PyNvVideoCodec stand-in
(fake_nvc; the fake_files fixture of conftest.py); the real NVDEC runs in the cuda tests."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from sluice.backends.video import get_index, prepare_clip, read_clips, read_frames
from sluice.backends.video.barcode import read_barcode
from sluice.backends.video import nvdec as nvdec_module
from sluice.backends.video.hybrid import HybridBackend
from sluice.backends.video.nvdec import NvdecBackend
from sluice.ops.decoders import video as decoders_video
from sluice.runtime import Runtime

from video_fixtures import NUM_FRAMES


def _new(before: set) -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t not in before and t.is_alive())


def test_nvdec_threads_are_the_runtimes_and_close_drops_the_decoders(gpu_videos, fake_files, monkeypatch):
    before = set(threading.enumerate())
    rt = Runtime(num_threads=2)
    backend = NvdecBackend(sessions=3, runtime=rt)
    path = gpu_videos["h264-mp4"]
    opening = backend.open_ahead(path)
    assert len(opening) == 3 and all(rt.owns(t) and t.name == "sluice-nvdec-open" for t in opening)
    for t in opening:
        t.join(timeout=60)
    monkeypatch.setattr(nvdec_module, "SPLIT_FRAMES", 8)
    monkeypatch.setattr(nvdec_module, "SPLIT_GROUPS", 1)
    clip = read_frames(path, frames=list(range(NUM_FRAMES)), backend=backend)  # split over the sessions
    assert [read_barcode(f) for f in clip.frames] == list(range(NUM_FRAMES))
    split = [t for t in rt.threads() if t.name.startswith("sluice-nvdec_")]
    assert split and len(split) <= 3  # the split pool, of `sessions` threads at most, made by the runtime
    assert backend._files._free
    rt.close()  # the backend is not a session here: closed by hand, then the runtime
    backend.close()
    assert backend._files._free == [] and backend._files._created == 0
    assert _new(before) == []


def test_a_backend_without_a_runtime_has_its_own(gpu_videos, fake_files):
    before = set(threading.enumerate())
    backend = NvdecBackend(sessions=2)
    for t in backend.open_ahead(gpu_videos["h264-mp4"]):
        t.join(timeout=60)
    clip = read_frames(gpu_videos["h264-mp4"], frames=[3, 9], backend=backend)
    assert [read_barcode(f) for f in clip.frames] == [3, 9]
    backend.close()
    assert _new(before) == []
    clip = read_frames(gpu_videos["h264-mp4"], frames=[5], backend=backend)  # usable again: opens anew
    assert [read_barcode(f) for f in clip.frames] == [5]
    backend.close()


def test_each_runtime_has_its_own_gpu_backend_closed_with_it(gpu_videos, fake_files, monkeypatch):
    """gpu_backend: one NVDEC and one hybrid backend per runtime and GPU, shared by that runtime's operators;
    another runtime (another pipeline) gets its own; closing a runtime closes its backends and ends their
    threads, and leaves the other's working."""
    monkeypatch.setattr("sluice.backends.video.hybrid.CPU_PROCESSES", False)
    before = set(threading.enumerate())
    train, val = Runtime(num_threads=2, device_id=0), Runtime(num_threads=2, device_id=0)  # GPU 0's: its streams
    a, b = decoders_video.gpu_backend(train, 0), decoders_video.gpu_backend(val, 0)
    assert isinstance(a, HybridBackend) and a is decoders_video.gpu_backend(train, 0)
    assert a is not b and a.nvdec is not b.nvdec and a.nvdec is decoders_video.nvdec_backend(train, 0)
    assert not hasattr(decoders_video, "_NVDEC") and not hasattr(decoders_video, "_HYBRID")
    path = gpu_videos["h264-mp4"]
    idx = get_index(path)
    reqs = [[0, 5, 10], [12, 20, 30], [31, 35, 39]]
    for backend in (a, b):
        clips = read_clips([prepare_clip(path, frames=r, index=idx) for r in reqs], backend)
        assert [[read_barcode(f) for f in c.frames] for c in clips] == reqs
    assert any(t.name.startswith("sluice-video-") for t in train.threads())
    closed = []
    monkeypatch.setattr(HybridBackend, "close", lambda self, real=HybridBackend.close: closed.append(self)
                        or real(self))
    train.close()
    assert closed == [a] and train.sessions() == {}
    clips = read_clips([prepare_clip(path, frames=r, index=idx) for r in reqs], b)  # val unaffected
    assert [[read_barcode(f) for f in c.frames] for c in clips] == reqs
    val.close()
    assert _new(before) == []


def test_mixed_video_operator_takes_its_pipelines_backend(fake_files):
    rt = Runtime(num_threads=2)
    op = decoders_video.SCHEMA.kernel_for("mixed")(SimpleNamespace(device_id=0, runtime=rt, num_threads=2))
    assert op.backend is rt.sessions()[("video hybrid", 0)]
    rt.close()
