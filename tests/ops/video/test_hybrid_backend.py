"""The hybrid backend (NVDEC + CPU on one batch): exact frames (barcodes) and work really shared, on the CPU through
the PyAV stand-in for PyNvVideoCodec; the real thing on a GPU."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np
import pytest
import torch

from sluice.backends.video import VideoError, get_index, prepare_clip, read_clips, read_frames
from sluice.backends.video.barcode import read_barcode, read_barcodes
from sluice.backends.video.hybrid import HybridBackend, path_shares
from sluice.backends.video.nvdec import NvdecBackend
from sluice.backends.video.pyav import PyAVBackend

import fake_nvc
from video_fixtures import NUM_FRAMES


@pytest.fixture
def fake_nvdec(monkeypatch):
    created: list = []
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", fake_nvc.make_module(created))
    return created


def _requests(path, n: int, seed: int, length: int = 4, stride: int = 7) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, NUM_FRAMES - (length - 1) * stride, n)
    return [[int(s) + stride * k for k in range(length)] for s in starts]


def _clips(backend, path, reqs):
    idx = get_index(path)
    return read_clips([prepare_clip(path, frames=r, index=idx) for r in reqs], backend)


@pytest.mark.parametrize("share", [False, True])
def test_hybrid_exact_and_shared(gpu_videos, fake_nvdec, share):
    videos = gpu_videos
    jobs = {"nvdec": 0, "cpu": 0}
    for name in ("h264-mp4", "hevc-mkv", "h264-ts"):
        if name not in videos:
            continue
        # a fresh backend: with speeds measured on an earlier file, the slower path may rightly take no job of a
        # small batch
        backend = HybridBackend(sessions=2, cpu_workers=2, share_gops=share)
        reqs = _requests(videos[name], 16, seed=len(name))
        clips = _clips(backend, videos[name], reqs)
        for r, c in zip(reqs, clips):
            assert read_barcodes(c.frames) == r, name
            assert c.frames.shape == (len(r), 144, 160, 3)
        stats = backend.last_stats
        # every group was decoded by exactly one path
        jobs = {k: v + stats[k]["jobs"] for k, v in jobs.items()}
        groups = {(i, int(k)) for i, r in enumerate(reqs) for k in get_index(videos[name]).start_keyframe(r)}
        expected = len({k for _, k in groups}) if share else len(groups)
        assert stats["nvdec"]["jobs"] + stats["cpu"]["jobs"] == expected, (name, stats)
        assert abs(sum(path_shares(stats).values()) - 1) < 1e-6
    # both paths took work (over the three files: which path takes a small batch's few jobs depends on how the
    # threads happen to start on a loaded machine)
    assert jobs["nvdec"] > 0 and jobs["cpu"] > 0, jobs


def test_hybrid_matches_cpu_pixels(videos, fake_nvdec):
    """CPU-decoded frames of the hybrid are PyAV's frames (converted with NVDEC's matrix), unchanged."""
    path = videos["h264-mp4"]
    reqs = _requests(path, 8, seed=5)
    cpu_clips = [read_frames(path, frames=r, backend=PyAVBackend(colors="nvdec")) for r in reqs]
    hybrid = _clips(HybridBackend(sessions=1, cpu_workers=2), path, reqs)
    for a, b in zip(cpu_clips, hybrid):
        assert torch.equal(a.frames, b.frames.cpu())


def _yuv_to_rgb(frame, wr: float, wb: float) -> np.ndarray:
    """Reference: limited-range YUV 4:2:0 (PyAV's planes, chroma repeated) -> RGB with the matrix (wr, wb)."""
    h, w = frame.height, frame.width
    yuv = frame.to_ndarray(format="yuv420p").astype(np.float64)
    y = yuv[:h]
    u = yuv[h:h + h // 4].reshape(h // 2, w // 2).repeat(2, 0).repeat(2, 1)
    v = yuv[h + h // 4:].reshape(h // 2, w // 2).repeat(2, 0).repeat(2, 1)
    c, d, e = (y - 16) * 255 / 219, (u - 128) * 255 / 224, (v - 128) * 255 / 224
    wg = 1 - wr - wb
    rgb = [c + 2 * (1 - wr) * e, c - 2 * wb * (1 - wb) / wg * d - 2 * wr * (1 - wr) / wg * e, c + 2 * (1 - wb) * d]
    return np.clip(np.round(np.stack(rgb, -1)), 0, 255)


def test_cpu_colors_follow_nvdec_matrix(gpu_videos, tmp_path):
    """The hybrid's CPU frames use NVDEC's YUV matrix: the one the stream names, BT.601 when it names none (what
    NVDEC gave on the H200, as FFmpeg's default does), so that a clip's frames agree whichever path decoded them;
    checked against the matrices applied in NumPy."""
    import av

    path = gpu_videos["h264-mp4"]
    with av.open(str(path)) as c:
        frame = next(f for i, f in enumerate(c.decode(video=0)) if i == 7)
    assert frame.colorspace == 2  # unspecified, as libx264 writes by default
    bt709, bt601 = _yuv_to_rgb(frame, 0.2126, 0.0722), _yuv_to_rgb(frame, 0.299, 0.114)
    idx = get_index(path)
    for colors in ("nvdec", "ffmpeg"):
        got = PyAVBackend(threads=1, colors=colors).decode(path, idx, [7])[7].astype(np.float64)
        assert np.abs(got - bt601).mean() < 1.2 and np.abs(got - bt601).max() <= 4, colors
        assert np.abs(got - bt709).mean() > 1.5, colors

    tagged = tmp_path / "bt709.mp4"  # the same picture in a stream that names BT.709
    with av.open(str(tagged), "w") as out:
        stream = out.add_stream("libx264", rate=24)
        stream.width, stream.height, stream.pix_fmt = frame.width, frame.height, "yuv420p"
        stream.codec_context.colorspace = 1  # AVCOL_SPC_BT709
        picture = av.VideoFrame.from_ndarray(frame.to_ndarray(format="yuv420p"), format="yuv420p")
        for packet in [*stream.encode(picture), *stream.encode()]:
            out.mux(packet)
    with av.open(str(tagged)) as c:
        frame709 = next(c.decode(video=0))
    assert frame709.colorspace == 1
    got = PyAVBackend(threads=1, colors="nvdec").decode(tagged, get_index(tagged), [0])[0].astype(np.float64)
    ref709, ref601 = _yuv_to_rgb(frame709, 0.2126, 0.0722), _yuv_to_rgb(frame709, 0.299, 0.114)
    assert np.abs(got - ref709).mean() < 1.2 and np.abs(got - ref601).mean() > 1.5
    assert HybridBackend(sessions=1).cpu.colors == "nvdec"
    with pytest.raises(ValueError, match="Invalid colors"):
        PyAVBackend(colors="bt709")


def test_shared_gops_decode_less(videos, fake_nvdec):
    path = videos["h264-mp4"]
    reqs = [[13, 14, 20], [15, 22], [12, 13]]  # all in the group of pictures of keyframe 12
    backend = HybridBackend(sessions=1, cpu_workers=0, share_gops=True)
    clips = _clips(backend, path, reqs)
    assert [read_barcodes(c.frames) for c in clips] == reqs
    assert backend.last_stats["nvdec"]["jobs"] == 1
    assert fake_nvdec[0].packets <= 12 + 4


def test_cpu_only_and_nvdec_only(videos, fake_nvdec):
    path = videos["h264-mov"]
    reqs = _requests(path, 6, seed=2)
    for sessions, cpu_workers, busy in ((0, 2, "cpu"), (2, 0, "nvdec")):
        backend = HybridBackend(sessions=sessions, cpu_workers=cpu_workers)
        clips = _clips(backend, path, reqs)
        assert [read_barcodes(c.frames) for c in clips] == reqs
        idle = "nvdec" if busy == "cpu" else "cpu"
        assert backend.last_stats[idle]["jobs"] == 0 and backend.last_stats[busy]["jobs"] > 0


def test_codec_nvdec_lacks_goes_to_cpu(videos, fake_nvdec, monkeypatch):
    from sluice.backends.video import hybrid

    monkeypatch.setattr(hybrid, "NVDEC_CODECS", {})  # as if NVDEC decoded no codec at all
    backend = HybridBackend(sessions=2, cpu_workers=1)
    reqs = _requests(videos["h264-mp4"], 4, seed=1)
    clips = _clips(backend, videos["h264-mp4"], reqs)
    assert [read_barcodes(c.frames) for c in clips] == reqs
    assert backend.last_stats["nvdec"]["jobs"] == 0 and not fake_nvdec


def test_size_nvdec_lacks_goes_to_cpu_quietly(videos, fake_nvdec, caplog):
    backend = HybridBackend(sessions=2, cpu_workers=1)
    path = videos["hevc-mkv"]  # 64x48: below NVDEC's smallest HEVC picture
    for seed in (1, 2):
        reqs = _requests(path, 6, seed=seed)
        clips = _clips(backend, path, reqs)
        assert [read_barcodes(c.frames) for c in clips] == reqs
    assert backend.last_stats["nvdec"]["jobs"] == 0
    assert "NVDEC could not decode" not in caplog.text


def test_nvdec_failure_falls_back_to_cpu(videos, fake_nvdec, monkeypatch, caplog):
    def broken(self, packet):
        raise RuntimeError("decoder exploded")

    monkeypatch.setattr(fake_nvc._Decoder, "Decode", broken)
    backend = HybridBackend(sessions=2, cpu_workers=0)  # the CPU only takes what NVDEC gives back
    reqs = _requests(videos["h264-mp4"], 3, seed=4)
    clips = _clips(backend, videos["h264-mp4"], reqs)
    assert [read_barcodes(c.frames) for c in clips] == reqs
    assert backend.last_stats["cpu"]["jobs"] > 0 and backend.last_stats["nvdec"]["jobs"] == 0
    assert "decoding it on the CPU" in caplog.text


def test_missing_gpu_library_uses_cpu(videos, monkeypatch):
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", None)  # import fails
    backend = HybridBackend(sessions=2, cpu_workers=1)
    clip = read_frames(videos["h264-mp4"], frames=[3, 30, 31], backend=backend)
    assert read_barcodes(clip.frames) == [3, 30, 31]
    assert backend.last_stats["cpu"]["jobs"] == 2


def test_error_names_request(videos, tmp_path, fake_nvdec):
    good = videos["h264-mp4"]
    bad = tmp_path / "cut.mp4"
    data = good.read_bytes()
    bad.write_bytes(data)
    idx = get_index(str(bad))
    reqs = [prepare_clip(good, frames=[1, 2]), prepare_clip(str(bad), frames=[5], index=idx)]
    bad.write_bytes(data[: len(data) // 3])  # truncated after indexing: its later frames cannot be decoded
    reqs[1] = prepare_clip(str(bad), frames=[NUM_FRAMES - 1], index=idx)
    with pytest.raises(VideoError) as e:
        read_clips(reqs, HybridBackend(sessions=1, cpu_workers=1))
    assert e.value.request_index == 1


def test_padding_and_repeats(videos, fake_nvdec):
    path = videos["h264-mp4"]
    req = prepare_clip(path, frames=[38, 39, 40, 41, 38], pad_mode="constant", fill_value=[7])
    clip = read_clips([req], HybridBackend(sessions=1, cpu_workers=1))[0]
    assert [read_barcode(f) for f in clip.frames[[0, 1, 4]]] == [38, 39, 38]
    assert int(clip.frames[2].min()) == int(clip.frames[3].max()) == 7


def test_tail_left_to_nvdec_when_cpu_is_slower(videos, fake_nvdec):
    """With measured speeds saying a CPU job would outlast NVDEC's whole queue, the CPU takes no job."""
    backend = HybridBackend(sessions=2, cpu_workers=2)
    backend._spf = {"cpu": 10.0, "nvdec": 1e-6}
    path = videos["h264-mp4"]
    reqs = _requests(path, 6, seed=8)
    clips = _clips(backend, path, reqs)
    assert [read_barcodes(c.frames) for c in clips] == reqs
    assert backend.last_stats["cpu"]["jobs"] == 0


@pytest.mark.cuda
def test_real_hybrid_barcodes(nvdec_videos):
    backend = HybridBackend(device_id=0, sessions=3, cpu_workers=3, share_gops=False)
    jobs = {"nvdec": 0, "cpu": 0}
    for name, path in nvdec_videos.items():
        reqs = _requests(path, 24, seed=9)
        clips = _clips(backend, path, reqs)
        for r, c in zip(reqs, clips):
            assert c.frames.is_cuda
            assert read_barcodes(c.frames) == r, name
        print(name, backend.last_stats)
        for p in jobs:
            jobs[p] += backend.last_stats[p]["jobs"]
    # on tiny frames the CPU is faster per frame, so later batches may leave NVDEC few jobs; over all, both worked
    assert jobs["nvdec"] > 0 and jobs["cpu"] > 0, jobs
    # the same frames from NVDEC and from the hybrid's CPU path agree within conversion rounding (same matrix)
    path = nvdec_videos["h264-mp4"]
    frames = list(range(0, NUM_FRAMES, 3))
    cpu = backend.cpu.decode(path, get_index(path), frames)
    gpu = read_frames(path, frames=frames, backend=NvdecBackend()).frames.cpu().int()
    diff = (torch.from_numpy(np.stack([cpu[f] for f in frames])).int() - gpu).abs().float()
    print(f"NVDEC vs hybrid CPU RGB: mean |diff| {diff.mean():.3f}, max {diff.max():.0f}")
    ffmpeg = PyAVBackend(threads=1).decode(path, get_index(path), frames)  # swscale's default matrix (BT.601)
    other = (torch.from_numpy(np.stack([ffmpeg[f] for f in frames])).int() - gpu).abs().float().mean()
    assert diff.mean() < 1.5, f"NVDEC matches the hybrid CPU colours by {diff.mean():.2f}, FFmpeg's default by " \
        f"{other:.2f}"


def test_decoder_batch_through_hybrid(videos, tmp_path, fake_nvdec):
    """fn.decoders.video's mixed path (without its CUDA stream handling): a batch in one hybrid call, errors naming
    the sample."""
    from sluice.errors import SampleError
    from sluice.ops.decoders.video import decode_samples
    from sluice.pipeline.batch import Batch
    from sluice.schema import BatchArgs

    def as_tensor(path):
        return torch.from_numpy(np.frombuffer(path.read_bytes(), np.uint8).copy())

    paths = [videos["h264-mp4"], videos["h264-mov"], videos["h264-mp4"]]
    const = dict(frames=None, timestamps=None, start_frame=0, end_frame=None, stride=1, sequence_length=None,
                 pad_mode="none", fill_value=[0], enable_timestamps=False, enable_frame_num=False)
    wanted = [[1, 13, 25], [2, 3, 39], [25, 26]]
    args = BatchArgs(const, {"frames": wanted}, 3)
    backend = HybridBackend(sessions=1, cpu_workers=1)
    clips = decode_samples(Batch([as_tensor(p) for p in paths]), [str(p) for p in paths], args, backend, None)
    assert [read_barcodes(c.frames) for c in clips] == wanted
    assert backend.last_stats["nvdec"]["jobs"] + backend.last_stats["cpu"]["jobs"] == 5  # 3 + 2 groups; keyframe 24 of the mp4 shared
    bad = tmp_path / "zero.mp4"
    bad.write_bytes(b"\0" * 300)
    with pytest.raises(SampleError, match="zero.mp4"):
        decode_samples(Batch([as_tensor(paths[0]), as_tensor(bad)]), [str(paths[0]), str(bad)],
                       BatchArgs(const, {"frames": [[1], [1]]}, 2), backend, None)


def test_tail_left_to_cpu_when_nvdec_is_slower(videos, fake_nvdec):
    backend = HybridBackend(sessions=2, cpu_workers=2)
    backend._spf = {"cpu": 1e-6, "nvdec": 10.0}
    path = videos["h264-mp4"]
    reqs = _requests(path, 6, seed=8)
    clips = _clips(backend, path, reqs)
    assert [read_barcodes(c.frames) for c in clips] == reqs
    assert backend.last_stats["nvdec"]["jobs"] == 0 and not fake_nvdec


def test_batch_state_order_and_guard():
    """Measured speeds: the faster path per frame takes the heaviest job, the slower one the lightest, and a job
    is left to the other path when that path alone would drain the queue sooner."""
    from collections import deque

    from sluice.backends.video.hybrid import _BatchState, _Job

    def job(weight):
        return _Job(source="x", idx=None, key=0, frames={weight - 1})

    def state(spf, cpus=4):
        return _BatchState(deque(job(w) for w in (100, 50, 10)), deque(), {"nvdec": 2, "cpu": cpus}, spf)

    s = state({})  # nothing measured: NVDEC heavy first, CPU light first, no guard
    assert s.take("nvdec").weight == 100 and s.take("cpu").weight == 10 and s.remaining == 50
    s = state({"nvdec": 1.0, "cpu": 0.5}, cpus=1)  # the CPU faster per frame: it takes the heavy end
    assert s.take("cpu").weight == 100 and s.take("nvdec").weight == 10  # 10 s <= 60 frames * 0.5 s / 1 worker
    s = state({"nvdec": 1.0, "cpu": 4.0})
    # CPU: 10 frames take it 40 s; NVDEC alone drains 160 frames in 80 s: take. Then 50 frames: 200 s > 75 s: leave
    assert s.take("cpu").weight == 10
    assert s.take("cpu") is None and len(s.shared) == 2


def test_last_jobs_not_left_by_both_paths():
    """Each path would leave the last job to the other (a CPU job takes twice an NVDEC one, and NVDEC has fewer
    workers): the workers that leave first hand it on; the last worker standing takes it, so it is never left
    for the caller to decode alone after every worker stopped."""
    from collections import deque

    from sluice.backends.video.hybrid import _BatchState, _Job

    s = _BatchState(deque([_Job(source="x", idx=None, key=0, frames={9})]), deque(), {"nvdec": 2, "cpu": 2},
                    {"nvdec": 3.0, "cpu": 2.0})
    # 10 frames: an NVDEC worker needs 30 s, the CPU's two workers 10 s: both NVDEC workers leave it
    assert s.take("nvdec") is None and s.take("nvdec") is None
    assert s.active["nvdec"] == 0
    assert s.take("cpu").weight == 10  # no NVDEC worker left: the CPU takes it, whatever the estimate
    s = _BatchState(deque([_Job(source="x", idx=None, key=0, frames={9})]), deque(), {"nvdec": 1, "cpu": 16},
                    {"nvdec": 1.0, "cpu": 2.0})
    # 10 frames: NVDEC needs 10 s, the CPU alone 10 * 2 / 16 = 1.25 s: NVDEC leaves it; each CPU worker needs 20 s
    # against NVDEC's 10 s, but NVDEC has left: the first CPU worker takes it
    assert s.take("nvdec") is None and s.take("cpu").weight == 10 and not s.shared


@pytest.mark.cuda
def test_real_gpu_operators_use_hybrid(gpu_videos):
    """fn.readers.video on the GPU goes through the hybrid backend: exact sequences, work on both paths."""
    pytest.importorskip("PyNvVideoCodec")
    from sluice import fn, pipeline_def
    from sluice.ops.decoders.video import gpu_backend

    @pipeline_def(batch_size=12, num_threads=2, device_id=0, seed=1)
    def pipe():
        return fn.readers.video(device="gpu", filenames=[str(gpu_videos["h264-mp4"])], sequence_length=6, stride=5,
                                step=1, random_shuffle=True, enable_frame_num=True)

    p = pipe()
    p.build()
    for _ in range(3):
        video, _label, num = p.run()
        for i in range(len(video)):
            s = int(num[i][0])
            assert video[i].is_cuda and read_barcodes(video[i]) == list(range(s, s + 30, 5))
    stats = gpu_backend(p.executor.runtime, 0).last_stats  # the pipeline's own backend
    print("readers.video gpu, last batch:", stats)
    assert stats["nvdec"]["jobs"] + stats["cpu"]["jobs"] > 0


def test_cpu_jobs_in_processes(videos, fake_nvdec):
    """CPU jobs in worker processes (frames back through shared memory) give the same frames as in threads."""
    from sluice.backends.video import cpu_worker

    path = videos["h264-mp4"]
    reqs = _requests(path, 6, seed=11)
    threads = _clips(HybridBackend(sessions=0, cpu_workers=1), path, reqs)
    backend = HybridBackend(sessions=1, cpu_workers=2, cpu_processes=True)
    try:
        backend.start_workers()  # while they start, the CPU worker threads leave the jobs to NVDEC
        for w in backend._workers:  # a forked worker's pid is known once its READY is read
            deadline = time.monotonic() + 30
            while not w.poll_ready() and time.monotonic() < deadline:
                time.sleep(0.01)
        clips = _clips(backend, path, reqs)
        assert [read_barcodes(c.frames) for c in clips] == reqs
        assert backend.last_stats["cpu"]["jobs"] > 0
        for a, b in zip(threads, clips):
            assert torch.equal(a.frames, b.frames)
        pids = [w.pid for w in backend._workers]
        assert pids and all(p is not None for p in pids)
        server = backend._group[0].server_pid(cpu_worker.__file__)
        assert all(_parent(p) == server for p in pids)  # forked by the one server
    finally:
        backend.close()
    assert backend._workers == [] and all(not _alive(p) for p in pids) and not _alive(server)


def test_a_forked_copy_of_the_backend_leaves_the_parents_workers_alone(videos):
    """A child forked while the backend lives (a DataLoader worker) runs the backend's finalizer when its garbage
    collector drops its copy: that ends nothing of the parent's. Before, it waited 5 s for each of the parent's
    worker processes, then killed it (CI: the child hung in its garbage collector)."""
    path = videos["h264-mp4"]
    reqs = _requests(path, 3, seed=2)
    backend = HybridBackend(sessions=0, cpu_workers=2, cpu_processes=True, output_device="cpu")
    try:
        backend.start_workers()
        for w in backend._workers:  # a forked worker's pid is known once its READY is read
            deadline = time.monotonic() + 30
            while not w.poll_ready() and time.monotonic() < deadline:
                time.sleep(0.01)
        assert [read_barcodes(c.frames) for c in _clips(backend, path, reqs)] == reqs
        pids = [w.pid for w in backend._workers]
        assert pids and all(p is not None and _alive(p) for p in pids)
        start = time.monotonic()
        child = os.fork()
        if child == 0:  # the child: runs the finalizer as its garbage collector would, and nothing of pytest's
            try:
                backend._finalizer()
            finally:
                os._exit(0)
        os.waitpid(child, 0)
        assert time.monotonic() - start < 4, "the child waited for the parent's workers"
        assert all(_alive(p) for p in pids), "the child ended the parent's workers"
        assert [read_barcodes(c.frames) for c in _clips(backend, path, reqs)] == reqs
        assert [w.pid for w in backend._workers] == pids  # the same processes decoded: none was restarted
    finally:
        backend.close()


def test_nvdec_decodes_while_worker_processes_start(videos, fake_nvdec, monkeypatch):
    """While its worker process is not ready, a CPU worker thread leaves the jobs to NVDEC rather than decode them
    in the thread (PyAV there holds the GIL the NVDEC threads need); without NVDEC it decodes in the thread."""
    path = videos["h264-mp4"]
    reqs = _requests(path, 6, seed=5)
    in_threads = []
    for sessions in (1, 0):
        backend = HybridBackend(sessions=sessions, cpu_workers=2, cpu_processes=True)
        monkeypatch.setattr(backend, "_own_worker", lambda: None)  # never ready
        decode = backend.cpu.decode
        monkeypatch.setattr(backend.cpu, "decode", lambda *a, _d=decode: in_threads.append(sessions) or _d(*a))
        try:
            clips = _clips(backend, path, reqs)
            assert [read_barcodes(c.frames) for c in clips] == reqs
            if sessions:
                assert backend.last_stats["cpu"]["jobs"] == 0 and backend.last_stats["nvdec"]["jobs"] > 0
        finally:
            backend.close()
    assert in_threads and set(in_threads) == {0}


def test_default_cpu_workers_share_the_host(monkeypatch):
    from sluice.backends.video import hybrid

    monkeypatch.setattr(hybrid.os, "sched_getaffinity", lambda pid: set(range(128)), raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert hybrid.default_cpu_workers() == hybrid.MAX_DEFAULT_CPU_WORKERS
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert hybrid.default_cpu_workers() == 16
    monkeypatch.setattr(hybrid.os, "sched_getaffinity", lambda pid: set(range(12)), raising=False)
    assert hybrid.default_cpu_workers() == 1  # 12 cores, 8 ranks
    monkeypatch.setattr(hybrid.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert hybrid.default_cpu_workers(nvdec_sessions=7) == 9  # a core for each of NVDEC's seven threads
    assert hybrid.default_cpu_workers(nvdec_sessions=0) == 16
    monkeypatch.setattr(hybrid, "nvdec_usable", lambda: True)
    assert HybridBackend(sessions=7).cpu_workers == 9 and HybridBackend(sessions=0).cpu_workers == 16
    monkeypatch.setattr(hybrid, "nvdec_usable", lambda: False)  # no PyNvVideoCodec or no GPU: all cores decode
    assert HybridBackend(sessions=7).cpu_workers == 16
    monkeypatch.setattr(hybrid.os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    assert hybrid.default_cpu_workers(nvdec_sessions=7) == 1
    assert HybridBackend(sessions=0, cpu_workers=5).cpu_workers == 5


def test_processes_are_the_default(monkeypatch):
    monkeypatch.setattr("sluice.backends.video.hybrid.CPU_PROCESSES", True)  # the conftest sets it False
    assert HybridBackend(sessions=0, cpu_workers=1).cpu_processes
    assert not HybridBackend(sessions=0, cpu_workers=1, cpu_processes=False).cpu_processes
    monkeypatch.setattr("sluice.backends.video.hybrid.CPU_PROCESSES", False)
    assert not HybridBackend(sessions=0, cpu_workers=1).cpu_processes


def test_worker_process_errors_name_the_file(videos, tmp_path):
    from sluice._workers import Workers
    from sluice.backends.video.cpu_worker import WorkerProcess

    with Workers() as workers:
        worker = WorkerProcess(workers)
        missing = tmp_path / "missing.mp4"
        with pytest.raises(FileNotFoundError, match="missing.mp4"):  # the worker's error, its type kept
            worker.decode(str(missing), [0], "nvdec")
        frames = worker.decode(str(videos["h264-mp4"]), [0, 1], "nvdec")
        assert sorted(frames) == [0, 1] and read_barcodes(torch.from_numpy(np.stack([frames[0], frames[1]]))) == [0, 1]
        # a process that dies mid-request is started again and the request redone
        pid = worker.pid
        os.kill(pid, signal.SIGSTOP)
        threading.Timer(0.3, os.kill, (pid, signal.SIGKILL)).start()
        assert sorted(worker.decode(str(videos["h264-mp4"]), [1], "nvdec")) == [1]
        assert worker.pid != pid and worker.restarts == 1
        # one that dies again on the same request is an error naming it: tests/test_workers.py::test_restart_once
        # (a handler that exits on its request; killing this one from a thread raced with its restart)


def test_a_fork_server_that_cannot_start_means_decoding_in_threads(videos, fake_nvdec, monkeypatch, caplog):
    """A fork server found dead (its interpreter or imports fail) is a worker that cannot start: WorkerDied at
    start, which the backend answers by decoding in threads, at build (``get_ready``) as at the first job."""
    from sluice import _workers
    from sluice.backends.video.cpu_worker import WorkerDied, WorkerProcess

    def dead(self, worker_end):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(_workers._ForkServer, "start", dead)
    with _workers.Workers() as workers:
        with pytest.raises(WorkerDied, match="cannot start") as died:
            WorkerProcess(workers).start()
    assert died.value.at_start
    path = videos["h264-mp4"]
    reqs = _requests(path, 3, seed=13)
    for build_first in (True, False):
        backend = HybridBackend(sessions=0, cpu_workers=1, cpu_processes=True)
        try:
            if build_first:
                backend.get_ready(str(path))
                assert not backend.cpu_processes
            clips = _clips(backend, path, reqs)
        finally:
            backend.close()
        assert [read_barcodes(c.frames) for c in clips] == reqs
        assert not backend.cpu_processes and "cannot start" in caplog.text


def test_workers_that_cannot_start_fall_back_to_threads(videos, fake_nvdec, monkeypatch, caplog):
    from sluice.backends.video import cpu_worker

    path = videos["h264-mp4"]
    reqs = _requests(path, 4, seed=12)
    monkeypatch.setattr(cpu_worker.sys, "executable", "/bin/false")  # an "interpreter" that exits at once
    backend = HybridBackend(sessions=0, cpu_workers=1, cpu_processes=True)
    try:
        clips = _clips(backend, path, reqs)
    finally:
        backend.close()
    assert [read_barcodes(c.frames) for c in clips] == reqs
    assert not backend.cpu_processes and "cannot start" in caplog.text


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_empty_batch_and_whole_video(videos, fake_nvdec):
    backend = HybridBackend(sessions=1, cpu_workers=1)
    assert read_clips([], backend) == []
    clip = read_clips([prepare_clip(videos["h264-mp4"])], backend)[0]  # no frames named: every frame
    assert read_barcodes(clip.frames) == list(range(NUM_FRAMES))


def _wait_ready(backend, seconds=60.0):
    backend.start_workers()
    deadline = time.monotonic() + seconds
    while not all(w.poll_ready() for w in backend._spare):
        assert time.monotonic() < deadline, "the CPU worker processes did not get ready"
        time.sleep(0.05)


def test_a_worker_process_first_job_is_not_taken_for_the_cpu_speed(videos, fake_nvdec):
    """A process's first job (it opens the file and loads its index there) is left out of the CPU path's speed,
    which would otherwise make the scheduler leave the CPU idle for many batches."""
    path = videos["h264-mp4"]
    backend = HybridBackend(sessions=0, cpu_workers=1, cpu_processes=True)
    try:
        _wait_ready(backend)
        clip = _clips(backend, path, [[0, 1]])[0]
        assert read_barcodes(clip.frames) == [0, 1]
        assert backend.last_stats["cpu"]["jobs"] == 1 and "cpu" not in backend._spf
        assert backend._workers[0].answered == 1 and backend._spare == []  # decoded in the process
        maps = f"/proc/{backend._workers[0].pid}/maps"
        if os.path.exists(maps):  # the process loaded neither torch nor sluice (seconds each, 16 at once)
            assert "libtorch" not in open(maps).read()
        _clips(backend, path, [[2, 3]])
        assert backend._spf["cpu"] > 0
    finally:
        backend.close()


def test_cpu_jobs_are_decoded_in_the_threads_until_a_worker_process_is_ready(videos, fake_nvdec, monkeypatch):
    """The processes start at once, without waiting for them (16 importing PyAV together take seconds); a job
    that comes before one is ready is decoded in its thread, the same frames, and later ones go to the process."""
    from sluice.backends.video.cpu_worker import WorkerProcess

    path = videos["h264-mp4"]
    backend = HybridBackend(sessions=0, cpu_workers=1, cpu_processes=True)
    ready = WorkerProcess.poll_ready
    try:
        monkeypatch.setattr(WorkerProcess, "poll_ready", lambda self: False)
        clip = _clips(backend, path, [[0, 5]])[0]
        assert read_barcodes(clip.frames) == [0, 5]
        assert len(backend._workers) == 1 and backend._spare == backend._workers  # started, not used
        assert backend._workers[0].answered == 0
        monkeypatch.setattr(WorkerProcess, "poll_ready", ready)
        _wait_ready(backend)
        clip = _clips(backend, path, [[6, 7]])[0]
        assert read_barcodes(clip.frames) == [6, 7]
        assert backend._spare == [] and backend._workers[0].answered == 1
    finally:
        backend.close()
    assert backend._workers == [] and backend._spare == []


def test_a_worker_stuck_starting_is_an_error_not_a_hang(videos, monkeypatch, tmp_path):
    """A request waits a bounded time for its process to finish starting; one that never does is killed and the
    request raises WorkerDied naming the file."""
    from sluice import _workers
    from sluice.backends.video import cpu_worker

    stuck = tmp_path / "python"
    stuck.write_text("#!/bin/sh\nexec sleep 60\n")  # an "interpreter" that never gets ready
    stuck.chmod(0o755)
    monkeypatch.setattr(cpu_worker, "READY_TIMEOUT_S", 0.05)
    monkeypatch.setattr(_workers.sys, "executable", str(stuck))
    with _workers.Workers() as workers:
        worker = cpu_worker.WorkerProcess(workers)
        start = time.monotonic()
        with pytest.raises(cpu_worker.WorkerDied, match="did not get ready.*h264.mp4") as info:
            worker.decode(str(videos["h264-mp4"]), [0], "nvdec")
        assert info.value.at_start and time.monotonic() - start < 30


def test_same_bytes_fed_as_separate_views_share_their_groups_of_pictures(videos, fake_nvdec):
    """external_source feeding one file's bytes to every sample gives each its own array over the same memory:
    a group of pictures wanted by several of them is decoded once, as for one path."""
    path = videos["h264-mp4"]
    data = np.fromfile(path, np.uint8)
    idx = get_index(data)
    backend = HybridBackend(sessions=0, cpu_workers=2, cpu_processes=False)
    views = [data[:], data[:]]
    assert views[0] is not views[1]
    clips = read_clips([prepare_clip(v, frames=[1, 2], index=idx) for v in views], backend)
    assert [read_barcodes(c.frames) for c in clips] == [[1, 2], [1, 2]]
    assert backend.last_stats["cpu"]["jobs"] == 1
    copy = data.copy()  # the same content elsewhere: not known to be the same without hashing it
    read_clips([prepare_clip(v, frames=[1, 2], index=idx) for v in (data, copy)], backend)
    assert backend.last_stats["cpu"]["jobs"] == 2
    backend.close()


def test_batches_submitted_together_overlap_each_path_in_its_own_threads(videos, fake_nvdec, monkeypatch):
    """Two batches submitted before either is waited for: both come back exact; NVDEC jobs run only in the NVDEC
    path's threads and CPU jobs only in the CPU path's (a CPU worker thread keeps its worker process from batch to
    batch), and the second batch's jobs start while the first is still running."""
    path = videos["h264-mp4"]
    backend = HybridBackend(sessions=2, cpu_workers=2, share_gops=False, cpu_processes=False)
    seen: list[tuple] = []  # (path, thread, batch, start, end) of each job
    for kind in ("nvdec", "cpu"):
        decode = getattr(backend, f"_decode_{kind}")

        def traced(job, kind=kind, decode=decode):
            start = time.perf_counter()
            time.sleep(0.02)  # each job outlasts a worker's move to the next batch
            out = decode(job)
            seen.append((kind, threading.current_thread().name, job.batch, start, time.perf_counter()))
            return out

        monkeypatch.setattr(backend, f"_decode_{kind}", traced)
    idx = get_index(path)
    reqs = [_requests(path, 8, seed=s) for s in (21, 22)]
    pending = []
    for b, batch in enumerate(reqs):
        jobs_of = backend._jobs
        monkeypatch.setattr(backend, "_jobs", lambda requests, leases, b=b, jobs_of=jobs_of:
                            _tag(jobs_of(requests, leases), b))
        pending.append(backend.submit_batch([(path, idx, r) for r in batch]))
        monkeypatch.setattr(backend, "_jobs", jobs_of)
    for batch, p in zip(reqs, pending):
        got = p.result()
        assert [read_barcodes(torch.stack([g[f] for f in r])) for r, g in zip(batch, got)] == batch
    assert {k for k, *_ in seen} == {"nvdec", "cpu"}
    for kind, thread, *_ in seen:
        assert thread.startswith(f"sluice-video-{kind}"), (kind, thread)
    first_done = max(end for *_, b, _, end in seen if b == 0)
    second_started = min(start for *_, b, start, _ in seen if b == 1)
    assert second_started < first_done, "the second batch waited for the first batch's last job"
    backend.close()


def _tag(planned, batch: int):
    for job in planned[0]:
        job.batch = batch
    return planned


def test_a_cancelled_batch_raises_and_the_next_one_decodes(videos, fake_nvdec):
    path = videos["h264-mp4"]
    backend = HybridBackend(sessions=1, cpu_workers=1, cpu_processes=False)
    idx = get_index(path)
    first = backend.submit_batch([(path, idx, r) for r in _requests(path, 6, seed=3)])
    first.cancel()
    with pytest.raises(VideoError, match="cancelled"):
        first.result()
    batch = _requests(path, 4, seed=4)
    got = backend.submit_batch([(path, idx, r) for r in batch]).result()
    assert [read_barcodes(torch.stack([g[f] for f in r])) for r, g in zip(batch, got)] == batch
    backend.close()


def test_nvdec_takes_no_job_until_its_decoders_are_open(videos, fake_nvdec):
    """While the decoders opened ahead are not open yet (seconds in a fresh process), the CPU workers take the
    batch's jobs instead of NVDEC workers waiting on them; once open, NVDEC takes jobs again."""
    path = videos["h264-mp4"]
    backend = HybridBackend(sessions=2, cpu_workers=2, share_gops=False, cpu_processes=False)
    opened = threading.Event()
    opening = threading.Thread(target=opened.wait, args=(60,))
    opening.start()
    backend.nvdec._opening = [opening]
    idx = get_index(path)
    batch = _requests(path, 8, seed=31)
    got = backend.submit_batch([(path, idx, r) for r in batch]).result()
    assert [read_barcodes(torch.stack([g[f] for f in r])) for r, g in zip(batch, got)] == batch
    assert backend.last_stats["nvdec"]["jobs"] == 0 and backend.last_stats["cpu"]["jobs"] > 0
    opened.set()
    opening.join()
    for seed in (32, 33, 34):
        batch = _requests(path, 8, seed=seed)
        got = backend.submit_batch([(path, idx, r) for r in batch]).result()
        assert [read_barcodes(torch.stack([g[f] for f in r])) for r, g in zip(batch, got)] == batch
        if backend.last_stats["nvdec"]["jobs"]:
            break
    assert backend.last_stats["nvdec"]["jobs"] > 0
    backend.close()
