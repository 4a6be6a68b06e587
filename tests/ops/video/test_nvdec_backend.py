"""The NVDEC backend: its packet plumbing on the CPU through a PyAV stand-in, and the real thing on a GPU."""

from __future__ import annotations

import os
import sys
from fractions import Fraction
from concurrent.futures import ThreadPoolExecutor

import time

import numpy as np
import pytest
import torch

from sluice.backends.video import VideoError, get_index, read_frames
from sluice.backends.video.barcode import read_barcode
from sluice.backends.video.nvdec import NvdecBackend, nv12_to_rgb, nvdec_codec

import fake_nvc
from video_fixtures import NUM_FRAMES, VFR_PTS


@pytest.fixture
def fake_nvdec(monkeypatch):
    created: list = []
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", fake_nvc.make_module(created))
    return created


def test_packets_sent_to_nvdec_decode_exactly(gpu_videos, fake_nvdec):
    backend = NvdecBackend(sessions=2)
    rng = np.random.default_rng(3)
    for name, path in gpu_videos.items():
        req = rng.integers(0, NUM_FRAMES, 10).tolist() + [NUM_FRAMES - 1, 0]
        clip = read_frames(path, frames=req, backend=backend)
        assert [read_barcode(f) for f in clip.frames] == req, name
    # one decoder per codec/size: sessions are reused, and every run ends with a flush
    assert len(fake_nvdec) == len({get_index(p).codec for p in gpu_videos.values()})
    assert all(d.flushes >= 1 for d in fake_nvdec)


def test_gop_decoded_once_per_request(videos, fake_nvdec):
    backend = NvdecBackend()
    path = videos["h264-mp4"]
    read_frames(path, frames=[13, 14, 15, 22], backend=backend)  # all in the GOP of keyframe 12
    assert fake_nvdec[0].packets <= 12 + 4  # the GOP up to frame 22, plus the reorder delay


def test_vfr_timestamps_on_nvdec_path(vfr_videos, fake_nvdec):
    t = np.array(VFR_PTS) / 1000.0
    clip = read_frames(vfr_videos["mp4"], timestamps=[t[9], t[9] + 0.001, t[3]], backend=NvdecBackend())
    assert [read_barcode(f) for f in clip.frames] == [9, 9, 3]


def test_sessions_shared_between_threads(videos, fake_nvdec):
    backend = NvdecBackend(sessions=3)
    path = videos["h264-mp4"]
    reqs = [[i, i + 5, i + 11] for i in range(0, 24, 2)]
    with ThreadPoolExecutor(6) as pool:
        clips = list(pool.map(lambda r: read_frames(path, frames=r, backend=backend), reqs))
    for r, c in zip(reqs, clips):
        assert [read_barcode(f) for f in c.frames] == r
    assert 1 <= len(fake_nvdec) <= 3


def test_long_request_split_over_sessions(videos, fake_nvdec):
    backend = NvdecBackend(sessions=3)
    clip = read_frames(videos["h264-mp4"], backend=backend)  # all 40 frames, 4 GOPs
    assert [read_barcode(f) for f in clip.frames] == list(range(NUM_FRAMES))
    from sluice.backends.video import nvdec

    big = nvdec.SPLIT_FRAMES
    try:
        nvdec.SPLIT_FRAMES = 8
        clip = read_frames(videos["h264-mp4"], frames=list(range(NUM_FRAMES))[::-1], backend=backend)
        assert [read_barcode(f) for f in clip.frames] == list(range(NUM_FRAMES))[::-1]
        nvdec.SPLIT_GROUPS = 1
        runs = []
        real = backend._decode_plan
        backend._decode_plan = lambda src, idx, plan, wanted: runs.append(len(plan)) or real(src, idx, plan, wanted)
        clip = read_frames(videos["h264-mov"], frames=range(0, 40, 3), backend=backend)
        assert [read_barcode(f) for f in clip.frames] == list(range(0, 40, 3))
        assert sorted(runs) == [1, 1, 2]  # 4 groups of pictures in 3 runs, one per session
    finally:
        nvdec.SPLIT_FRAMES, nvdec.SPLIT_GROUPS = big, 3


def test_unsupported_codec_message():
    assert nvdec_codec("h264") == "H264"
    with pytest.raises(VideoError, match=r"x.mkv: codec 'ffv1' is not supported by the GPU \(NVDEC\).*av1, h264"):
        nvdec_codec("ffv1", "x.mkv")


def test_nv12_to_rgb_matches_pyav():
    av = pytest.importorskip("av")
    from sluice.backends.video.barcode import make_frame

    rgb = make_frame(5, 64, 48)
    frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="nv12")
    nv12 = torch.from_numpy(frame.to_ndarray())[None]  # (1, H*3/2, W)
    ours = nv12_to_rgb(nv12, 48, 64)[0].numpy().astype(int)
    ref = frame.to_ndarray(format="rgb24").astype(int)  # FFmpeg's swscale, same BT.601 limited-range matrix
    err = np.abs(ours - ref)
    # same matrix; swscale interpolates chroma where we repeat it, so only chroma edges differ much
    assert err.mean() < 3 and np.quantile(err, 0.9) <= 4, (err.mean(), np.quantile(err, 0.9))


def test_too_small_for_nvdec(videos, fake_nvdec):
    with pytest.raises(VideoError, match=r"hevc.mkv: cannot create an NVDEC decoder for HEVC 64x48: .*outside what "
                                         r"this GPU's NVDEC decodes \(144x144 to .*use device='cpu'"):
        read_frames(videos["hevc-mkv"], frames=[0], backend=NvdecBackend())


@pytest.mark.cuda
def test_real_nvdec_barcodes(nvdec_videos):
    backend = NvdecBackend(device_id=0)
    rng = np.random.default_rng(5)
    for name, path in nvdec_videos.items():
        req = rng.integers(0, NUM_FRAMES, 10).tolist()
        clip = read_frames(path, frames=req, backend=backend)
        assert clip.frames.is_cuda and clip.frames.shape == (10, 144, 160, 3)
        assert [read_barcode(f) for f in clip.frames] == req, name


def test_unsupported_codec_file(tmp_path, fake_nvdec):
    from sluice.backends.video.barcode import write_barcode_video

    path = tmp_path / "lossless.mkv"
    write_barcode_video(path, "ffv1", num_frames=3)
    with pytest.raises(VideoError, match=r"lossless.mkv: codec 'ffv1' is not supported by the GPU \(NVDEC\)"):
        read_frames(path, frames=[0], backend=NvdecBackend())
    assert read_barcode(read_frames(path, frames=[2]).frames[0]) == 2  # FFmpeg decodes it on the CPU


def test_decoder_failure_names_the_file(videos, fake_nvdec, monkeypatch):
    backend = NvdecBackend(sessions=1)
    read_frames(videos["h264-mp4"], frames=[1], backend=backend)
    session = fake_nvdec[0]

    def broken(packet):
        raise RuntimeError("CUDA_ERROR_INVALID_SOURCE")

    monkeypatch.setattr(session, "Decode", broken)
    with pytest.raises(VideoError, match=r"h264.mp4: NVDEC failed decoding the group of pictures of frame 20 .*"
                                         r"INVALID_SOURCE"):
        read_frames(videos["h264-mp4"], frames=[20], backend=backend)
    # the broken session was dropped: the next request gets a fresh decoder
    assert [read_barcode(f) for f in read_frames(videos["h264-mp4"], frames=[20], backend=backend).frames] == [20]
    assert len(fake_nvdec) == 2


@pytest.mark.cuda
def test_real_nvdec_vfr_and_sequential(vfr_videos, gpu_videos):
    pytest.importorskip("PyNvVideoCodec")
    backend = NvdecBackend(device_id=0)
    t = np.array(VFR_PTS) / 1000.0
    clip = read_frames(vfr_videos["mp4"], timestamps=[t[9], t[9] + 0.001, t[3], t[-1]], backend=backend)
    assert [read_barcode(f) for f in clip.frames] == [9, 9, 3, len(VFR_PTS) - 1]
    clip = read_frames(gpu_videos["h264-mp4"], backend=backend)  # every frame, split over sessions
    assert [read_barcode(f) for f in clip.frames] == list(range(NUM_FRAMES))


def test_lost_frame_stops_early_with_error(videos, fake_nvdec, monkeypatch):
    from sluice.backends.video import nvdec

    monkeypatch.setattr(nvdec, "REORDER_SLACK", 4)
    path = videos["h264-mp4"]
    idx = get_index(path)
    lost = int(idx.pts[14])
    backend = NvdecBackend(sessions=1)
    read_frames(path, frames=[0], backend=backend)
    dec = fake_nvdec[0]
    real = dec.Decode
    monkeypatch.setattr(dec, "Decode", lambda pkt: [f for f in real(pkt) if f.timestamp != lost])
    fed = dec.packets
    with pytest.raises(VideoError, match=r"h264.mp4: frame 14 could not be decoded by NVDEC"):
        read_frames(path, frames=[14], backend=backend)
    assert dec.packets - fed <= 14 - 12 + 4 + 4  # from keyframe 12 to frame 14, the slack and the reorder delay


@pytest.mark.parametrize("codec, ext, options", [
    ("libx264", "mkv", {"x264-params": "open-gop=1", "bf": "3"}),
    ("libx265", "mp4", {"x265-params": "log-level=error:open-gop=1:keyint=12:min-keyint=12:bframes=4"}),
])
def test_open_gop_leading_pictures_exact(tmp_path, fake_nvdec, monkeypatch, codec, ext, options):
    """Leading pictures of an open GOP decode from the previous keyframe; runs that start at an open-GOP
    keyframe (non-IDR, parameter sets prepended) never keep their broken leading pictures. Both backends are
    compared pixel for pixel with PyAV's sequential decode."""
    pytest.importorskip("av")
    from sluice.backends.video import nvdec
    from sluice.backends.video.barcode import write_barcode_video
    from video_fixtures import reference_frames

    path = tmp_path / f"open_gop.{ext}"
    write_barcode_video(path, codec, num_frames=60, width=160, height=144, options=options)
    idx = get_index(path)
    position = np.empty(idx.num_frames, int)
    position[idx.decode_order] = np.arange(idx.num_frames)
    leading = [f for k in idx.key_frames.tolist() for f in range(k) if position[f] > position[k]]
    assert leading, "the encoder made no open GOP"
    import av

    with av.open(str(path)) as c:  # the stand-in converts to RGB as NVDEC does (BT.601 for an unspecified matrix)
        nvdec_ref = [fake_nvc._nvdec_rgb(f) for f in c.decode(video=0)]
    refs = {None: reference_frames(path), "nvdec": nvdec_ref}
    monkeypatch.setattr(nvdec, "SPLIT_FRAMES", 4)
    monkeypatch.setattr(nvdec, "SPLIT_GROUPS", 1)  # every group of pictures its own run, on its own session
    rng = np.random.default_rng(2)
    for backend in (None, NvdecBackend(sessions=3)):
        ref = refs[None if backend is None else "nvdec"]
        for _ in range(6):
            req = sorted(set(rng.integers(0, 60, 6).tolist()) | set(rng.choice(leading, 2).tolist()))
            clip = read_frames(path, frames=req, backend=backend)
            for k, f in enumerate(req):
                np.testing.assert_array_equal(np.asarray(clip.frames[k]), ref[f], err_msg=f"frame {f}")


# --- files through PyNvVideoCodec's SimpleDecoder (the stand-in numbers frames as PyAV presents them) -----------
def _simple(created):
    return [d for d in created if isinstance(d, fake_nvc.SimpleDecoder)]


def test_files_go_through_the_file_decoder(gpu_videos, fake_files):
    backend = NvdecBackend(sessions=2)
    rng = np.random.default_rng(11)
    counted = 0
    for name, path in gpu_videos.items():
        req = rng.integers(0, NUM_FRAMES, 8).tolist() + [NUM_FRAMES - 1, 0]
        clip = read_frames(path, frames=req, backend=backend)
        assert [read_barcode(f) for f in clip.frames] == req, name
        counted += get_index(path).count_frames
    # AVI without presentation times is numbered by counting frames: packet by packet; the rest by file
    assert backend.stats["packet_runs"] == counted >= 1
    assert backend.stats["file_decoder_runs"] == len(gpu_videos) - counted
    files = _simple(fake_files)
    assert len(files) <= 2 and sum(len(d.opened) for d in files) == len(gpu_videos) - counted  # switched, not new


def test_file_decoders_opened_ahead_are_the_ones_requests_use(gpu_videos, fake_files):
    """open_ahead makes every session's file decoder on the file at once, in the background; the requests that
    follow take those (no decoder made after), and a file that cannot be opened is left to the request to refuse."""
    backend = NvdecBackend(sessions=3)
    path = gpu_videos["h264-mp4"]
    for t in backend.open_ahead(path):
        t.join(timeout=60)
    made = _simple(fake_files)
    assert len(made) == 3 and all(d.opened == [str(path)] for d in made)
    assert all(d.calls == 1 for d in made)  # each decoded a frame, which makes its hardware session
    with ThreadPoolExecutor(3) as pool:
        clips = list(pool.map(lambda f: read_frames(path, frames=[f, f + 3], backend=backend), [0, 4, 8]))
    assert [[read_barcode(x) for x in c.frames] for c in clips] == [[0, 3], [4, 7], [8, 11]]
    assert _simple(fake_files) == made and sum(d.calls for d in made) == 3 + 3
    fake_nvc.SimpleDecoder.fail_open = True
    other = NvdecBackend(sessions=2)
    for t in other.open_ahead(gpu_videos["hevc-mkv"]):
        t.join(timeout=60)
    assert other._files._created == 0  # nothing held: the request tries, fails and falls back itself
    clip = read_frames(gpu_videos["hevc-mkv"], frames=[2], backend=other)
    assert [read_barcode(x) for x in clip.frames] == [2] and other.stats["packet_runs"] == 1


def test_file_decoders_shared_between_threads(gpu_videos, fake_files):
    backend = NvdecBackend(sessions=3)
    paths = [gpu_videos["h264-mp4"], gpu_videos["hevc-mkv"], gpu_videos["h264-mov"]]
    reqs = [(paths[i % 3], [i, i + 5, i + 11]) for i in range(0, 24, 2)]
    with ThreadPoolExecutor(6) as pool:
        clips = list(pool.map(lambda r: read_frames(r[0], frames=r[1], backend=backend), reqs))
    for (_, r), c in zip(reqs, clips):
        assert [read_barcode(f) for f in c.frames] == r
    assert 1 <= len(_simple(fake_files)) <= 3 and backend.stats["packet_runs"] == 0


def test_encoded_bytes_go_packet_by_packet(videos, fake_files):
    backend = NvdecBackend()
    clip = read_frames(videos["h264-mp4"].read_bytes(), frames=[3, 17], backend=backend)
    assert [read_barcode(f) for f in clip.frames] == [3, 17]
    assert backend.stats["packet_runs"] == 1 and backend.stats["file_decoder_runs"] == 0 and not _simple(fake_files)


def test_file_numbered_differently_is_decoded_by_packets(videos, fake_files, monkeypatch, caplog):
    """A file decoder whose frame numbers disagree with the packet index (by pts) is not trusted for that file."""
    monkeypatch.setattr(fake_nvc.SimpleDecoder, "misnumber", True)
    backend = NvdecBackend()
    path = videos["h264-mp4"]
    with caplog.at_level("INFO", logger="sluice.backends.video.nvdec"):
        for req in ([4, 9], [20, 2]):
            assert [read_barcode(f) for f in read_frames(path, frames=req, backend=backend).frames] == req
    assert "h264.mp4: decoded packet by packet from now on" in caplog.text
    assert "differ in pixels from the packet path's" in caplog.text  # stamps one frame late: near, then checked
    assert _simple(fake_files)[0].calls == 1  # not asked again for that file
    assert backend.stats == {"file_decoder_runs": 0, "packet_runs": 1, "pixel_checks": 1}


@pytest.mark.parametrize("offsets", [[-1, 0, 1], [0, -1]])
def test_near_stamps_trusted_after_pixel_checks(videos, fake_files, monkeypatch, offsets):
    """SimpleDecoder stamping the right frames a frame or so off (B-pyramid H.264 on the H200): the first
    requests are checked against the packet path's pixels, later ones taken."""
    monkeypatch.setattr(fake_nvc.SimpleDecoder, "stamp_offsets", offsets)
    backend = NvdecBackend(sessions=1)
    path = videos["h264-mp4"]
    for req in ([4, 9, 30], [20, 2], [7, 8], [1, 25]):
        assert [read_barcode(f) for f in read_frames(path, frames=req, backend=backend).frames] == req
    assert backend.stats == {"file_decoder_runs": 2, "packet_runs": 0, "pixel_checks": 2}


def test_near_stamps_checked_at_most_twice_when_requests_come_at_once(videos, fake_files, monkeypatch):
    """Seven requests of one file at once (a first batch): only the first PIXEL_CHECKS are decoded again packet by
    packet; the others wait for those checks and are then taken (each check decodes from Python: seven at once
    took seconds on the H200)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from sluice.backends.video import nvdec

    monkeypatch.setattr(fake_nvc.SimpleDecoder, "stamp_offsets", [-1, 0, 1])
    backend = NvdecBackend(sessions=7)
    packets = backend._decode_packets
    running, most = [0], [0]
    lock = threading.Lock()

    def slow_packets(*a, **kw):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        try:
            return packets(*a, **kw)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(backend, "_decode_packets", slow_packets)
    path = videos["h264-mp4"]
    reqs = [[k, k + 5, k + 11] for k in range(7)]
    with ThreadPoolExecutor(7) as pool:
        clips = list(pool.map(lambda r: read_frames(path, frames=r, backend=backend), reqs))
    assert [[read_barcode(f) for f in c.frames] for c in clips] == reqs
    assert backend.stats["pixel_checks"] == nvdec.PIXEL_CHECKS and most[0] <= nvdec.PIXEL_CHECKS
    assert backend.stats["file_decoder_runs"] == len(reqs) - nvdec.PIXEL_CHECKS


def test_far_stamps_refused_without_pixel_check(videos, fake_files, monkeypatch):
    monkeypatch.setattr(fake_nvc.SimpleDecoder, "stamp_offsets", [-5])
    backend = NvdecBackend()
    assert [read_barcode(f) for f in read_frames(videos["h264-mp4"], frames=[9, 3], backend=backend).frames] == [9, 3]
    assert backend.stats == {"file_decoder_runs": 0, "packet_runs": 1, "pixel_checks": 0}


def test_near_stamps_on_vfr_refused(vfr_videos, fake_files, monkeypatch):
    """On a variable-frame-rate file near stamps prove nothing (SimpleDecoder numbers frames at a constant
    rate): packet by packet."""
    monkeypatch.setattr(fake_nvc.SimpleDecoder, "stamp_offsets", [-1])
    backend = NvdecBackend()
    path = next(iter(vfr_videos.values()))
    assert [read_barcode(f) for f in read_frames(path, frames=[2, 5], backend=backend).frames] == [2, 5]
    assert backend.stats["pixel_checks"] == 0 and backend.stats["packet_runs"] == 1


def test_file_decoder_that_cannot_open_falls_back(gpu_videos, fake_files, monkeypatch):
    monkeypatch.setattr(fake_nvc.SimpleDecoder, "fail_open", True)
    backend = NvdecBackend()
    clip = read_frames(gpu_videos["hevc-mkv"], frames=[7, 1], backend=backend)
    assert [read_barcode(f) for f in clip.frames] == [7, 1] and backend.stats["packet_runs"] == 1


def test_file_decoder_can_be_turned_off(videos, fake_files, monkeypatch):
    monkeypatch.setattr("sluice.backends.video.nvdec.SIMPLE_DECODER", False)
    backend = NvdecBackend()
    assert [read_barcode(f) for f in read_frames(videos["h264-mp4"], frames=[5], backend=backend).frames] == [5]
    assert not _simple(fake_files) and backend.stats["packet_runs"] == 1


def test_file_decoder_on_a_millisecond_clock(videos, fake_files, monkeypatch):
    monkeypatch.setattr(fake_nvc.SimpleDecoder, "clock", 1000)
    backend = NvdecBackend()
    path = videos["h264-mp4"]
    assert get_index(path).time_base != Fraction(1, 1000)
    assert [read_barcode(f) for f in read_frames(path, frames=[6, 2, 19], backend=backend).frames] == [6, 2, 19]
    assert backend.stats["file_decoder_runs"] == 1 and backend.stats["packet_runs"] == 0


@pytest.mark.parametrize("clock", [None, 1000])
def test_file_decoder_vfr_timestamps(vfr_videos, fake_files, monkeypatch, clock):
    monkeypatch.setattr(fake_nvc.SimpleDecoder, "clock", clock)
    t = np.array(VFR_PTS) / 1000.0
    backend = NvdecBackend()
    clip = read_frames(vfr_videos["mkv"], timestamps=[t[9], t[9] + 0.001, t[3]], backend=backend)
    assert [read_barcode(f) for f in clip.frames] == [9, 9, 3] and backend.stats["file_decoder_runs"] == 1


@pytest.mark.cuda
def test_real_file_decoder_exact_and_same_pixels(nvdec_videos, vfr_videos, monkeypatch, caplog):
    """On the GPU: CFR mp4/mov files go through PyNvVideoCodec's SimpleDecoder; every file's frames are exact (by
    barcode) and have the pixels the packet path gives (the hybrid mixes both)."""
    pytest.importorskip("PyNvVideoCodec")
    caplog.set_level("INFO", logger="sluice.backends.video.nvdec")
    backend = NvdecBackend(device_id=0)
    rng = np.random.default_rng(8)
    for name, path in {**nvdec_videos, "vfr-mp4": vfr_videos["mp4"]}.items():
        n = get_index(path).num_frames
        req = sorted(set(rng.integers(0, n, 6).tolist()))
        clip = read_frames(path, frames=req, backend=backend)
        assert [read_barcode(f) for f in clip.frames] == req, name
        monkeypatch.setattr("sluice.backends.video.nvdec.SIMPLE_DECODER", False)
        ref = read_frames(path, frames=req, backend=backend).frames
        monkeypatch.setattr("sluice.backends.video.nvdec.SIMPLE_DECODER", True)
        diff = (clip.frames.float() - ref.float()).abs()
        print(f"{name}: file decoder vs packets, mean |diff| {diff.mean().item():.3f}, max {diff.max().item():.0f}")
        assert diff.mean().item() < 0.5, name
    print("stats:", backend.stats, "refused:", caplog.text)
    refused = {os.path.basename(key[0]) for key in backend._files_refused}
    # measured on the H200 (PyNvVideoCodec 2.2): its timestamps do not prove the frames of the VFR mp4, the HEVC
    # mkv or the MPEG-TS file (which it cannot seek), so those go packet by packet; CFR mp4/mov must not
    assert not refused & {"gpu_h264.mp4", "gpu_h264.mov"}, refused


def test_timestamps_agree_on_the_stream_clock_or_milliseconds(vfr_videos, videos):
    from sluice.backends.video.nvdec import timestamps_agree

    idx = get_index(vfr_videos["mp4"])
    frames = [3, 9, 10]
    pts = idx.pts[frames].tolist()
    ms = np.round(idx.times[frames] * 1000).astype(int).tolist()
    assert timestamps_agree(pts, frames, idx) and timestamps_agree(ms, frames, idx)
    assert not timestamps_agree(idx.pts[[4, 9, 10]].tolist(), frames, idx)  # one frame off
    assert not timestamps_agree([0, 0, 0], frames, idx) and timestamps_agree([], [], idx)
    mp4 = get_index(videos["h264-mp4"])  # B-frames: the first dts lies before the first pts
    shift = int(mp4.dts.min()) - int(mp4.pts.min())
    assert shift < 0 and timestamps_agree((mp4.pts[[2, 5]] + shift).tolist(), [2, 5], mp4)
    assert not timestamps_agree((mp4.pts[[3, 6]] + shift).tolist(), [2, 5], mp4)
    ms_next = np.round(idx.times[[4, 10, 11]] * 1000).astype(int).tolist()
    assert not timestamps_agree(ms_next, frames, idx)


def test_stamps_near_window(videos, vfr_videos):
    """Near: between two frames (plus the dts lead) below and one frame above each frame's pts, CFR only."""
    from sluice.backends.video.nvdec import stamps_near

    idx = get_index(videos["h264-mp4"])
    step = int(np.median(idx.frame_intervals))
    lead = min(0, int(idx.dts.min()) - int(idx.pts.min()))
    frames = [3, 9, 10]
    pts = idx.pts[frames]
    assert stamps_near((pts + lead - 2 * step).tolist(), frames, idx)
    assert stamps_near((pts + step).tolist(), frames, idx)
    assert not stamps_near((pts + lead - 2 * step - 1).tolist(), frames, idx)
    assert not stamps_near((pts + step + 1).tolist(), frames, idx)
    assert not stamps_near(pts[:2].tolist(), frames, idx)  # one stamp missing
    vfr = get_index(vfr_videos["mp4"])
    assert vfr.is_vfr and not stamps_near(vfr.pts[frames].tolist(), frames, vfr)
