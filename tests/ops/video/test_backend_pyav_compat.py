"""The packet index and the PyAV backend against PyAV's own sequential decode (bit-exact) and the barcodes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from sluice.backends.video import VideoError, build_index, get_index, read_audio_window, read_frames
from sluice.backends.video import index as index_mod
from sluice.backends.video.barcode import read_barcode, write_barcode_video

from video_fixtures import NUM_FRAMES, VFR_PTS, reference_frames

av = pytest.importorskip("av")


def barcodes(clip) -> list[int]:
    return [read_barcode(f) for f in clip.frames.numpy()]


def test_codecs_and_containers_random_frames_exact(videos):
    assert {"h264-mp4", "mpeg4-avi", "vp9-webm"} <= set(videos)
    rng = np.random.default_rng(0)
    for name, path in videos.items():
        ref = reference_frames(path)
        assert len(ref) == NUM_FRAMES, name
        req = rng.integers(0, NUM_FRAMES, 12).tolist() + [NUM_FRAMES - 1, 0, 0]
        clip = read_frames(path, frames=req)
        assert clip.frames.shape == (len(req), 48, 64, 3) and clip.frames.dtype.is_floating_point is False
        assert barcodes(clip) == req, name
        for k, f in enumerate(req):  # the seeking decode gives exactly the sequential decoder's pixels
            np.testing.assert_array_equal(clip.frames[k].numpy(), ref[f], err_msg=f"{name} frame {f}")
        np.testing.assert_array_equal(clip.frame_numbers, req)


def test_bframes_reordered_and_index_facts(videos):
    idx = build_index(videos["h264-mp4"])
    assert idx.num_frames == NUM_FRAMES and idx.codec == "h264" and (idx.width, idx.height) == (64, 48)
    assert not np.array_equal(idx.decode_order, np.arange(NUM_FRAMES)), "libx264 with bf=2 reorders frames"
    assert np.all(np.diff(idx.pts) > 0)
    assert idx.gop_lengths().tolist() == [12, 12, 12, 4]
    assert not idx.is_vfr and abs(idx.fps - 30) < 1e-6


def test_start_end_stride_sequence_length(videos):
    path = videos["h264-mp4"]
    assert barcodes(read_frames(path, start_frame=5, stride=7)) == list(range(5, NUM_FRAMES, 7))
    assert barcodes(read_frames(path, start_frame=3, end_frame=11, stride=2)) == [3, 5, 7, 9]
    assert barcodes(read_frames(path, start_frame=2, sequence_length=4, stride=11)) == [2, 13, 24, 35]
    assert barcodes(read_frames(path)) == list(range(NUM_FRAMES))


def test_bytes_input_equals_path(videos):
    path = videos["vp9-webm"]
    a = read_frames(path, frames=[4, 30])
    b = read_frames(path.read_bytes(), frames=[4, 30])
    assert np.array_equal(a.frames.numpy(), b.frames.numpy())


def test_vfr_timestamps_exact(vfr_videos):
    t = np.array(VFR_PTS) / 1000.0
    for ext, path in vfr_videos.items():
        idx = get_index(path)
        assert idx.is_vfr, ext
        np.testing.assert_allclose(idx.times, t, atol=1e-9)
        # at a frame's own time, just after it, and just before the next one
        query = [t[7], t[7] + 0.0005, t[20] - 0.0005, 0.0, t[-1]]
        clip = read_frames(path, timestamps=query)
        assert barcodes(clip) == [7, 7, 19, 0, len(VFR_PTS) - 1], ext
        np.testing.assert_allclose(clip.timestamps, t[[7, 7, 19, 0, len(VFR_PTS) - 1]])


def test_cfr_detected(videos):
    for name, path in videos.items():
        assert not get_index(path).is_vfr, name


@pytest.mark.parametrize("mode, expected", [
    ("edge", [38, 39, 39, 39]),
    ("reflect_1001", [38, 39, 39, 38]),
    ("reflect_101", [38, 39, 38, 37]),
])
def test_padding(videos, mode, expected):
    clip = read_frames(videos["h264-mp4"], start_frame=38, sequence_length=4, pad_mode=mode)
    assert barcodes(clip) == expected
    assert clip.frame_numbers.tolist() == expected


def test_padding_constant_and_none(videos):
    path = videos["h264-mp4"]
    clip = read_frames(path, frames=[39, 40, 41], pad_mode="constant", fill_value=[10, 20, 30])
    assert read_barcode(clip.frames[0]) == 39
    assert (clip.frames[1:] == clip.frames.new_tensor([10, 20, 30])).all()
    assert clip.frame_numbers.tolist() == [39, -1, -1] and clip.timestamps[1] == -1
    with pytest.raises(ValueError, match=r"h264.mp4: frame 40 is out of range: the video has 40 frames.*pad_mode"):
        read_frames(path, frames=[1, 40])
    with pytest.raises(ValueError, match="frame -1 is out of range"):
        read_frames(path, frames=[-1])
    with pytest.raises(ValueError, match=r"timestamp 99.0 s is out of range.*h264.mp4|h264.mp4.*timestamp 99.0 s"):
        read_frames(path, timestamps=[99.0])
    assert barcodes(read_frames(path, timestamps=[99.0], pad_mode="edge")) == [39]
    with pytest.raises(ValueError, match=r"Invalid pad_mode \('wrap'\). Supported values are none, constant"):
        read_frames(path, frames=[1], pad_mode="wrap")


def test_index_cache_on_disk_keyed_by_mtime(video_dir, tmp_path):
    path = tmp_path / "c.mkv"
    write_barcode_video(path, "libx264", num_frames=10)
    idx = get_index(path)
    key = index_mod.cache_key(path)
    assert (index_mod.cache_dir() / f"{key}.npz").exists()
    index_mod._memory.clear()
    again = get_index(path)
    assert again is not idx and np.array_equal(again.pts, idx.pts) and again.codec == idx.codec
    write_barcode_video(path, "libx264", num_frames=14)
    os.utime(path, ns=(1, 10**18))
    assert index_mod.cache_key(path) != key
    assert get_index(path).num_frames == 14


# ------------------------------------------------------------------------------------------------- bad input
def test_zero_byte_and_garbage(tmp_path):
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    with pytest.raises(VideoError, match="empty.mp4"):
        read_frames(empty, frames=[0])
    with pytest.raises(VideoError, match=r"<3000 bytes of encoded video>"):
        read_frames(np.random.default_rng(0).integers(0, 255, 3000, dtype=np.uint8), frames=[0])
    with pytest.raises(FileNotFoundError, match="nope.mp4"):
        read_frames(tmp_path / "nope.mp4", frames=[0])


def test_truncated_files(videos, tmp_path):
    data = videos["h264-mp4"].read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) // 2])  # PyAV writes the moov atom last: the file cannot be opened
    with pytest.raises(VideoError, match="cut.mp4"):
        read_frames(cut, frames=[0])
    mkv = videos["hevc-mkv"].read_bytes() if "hevc-mkv" in videos else videos["vp9-webm"].read_bytes()
    cut2 = tmp_path / "cut.mkv"
    cut2.write_bytes(mkv[: int(len(mkv) * 0.6)])
    idx = build_index(cut2)
    assert 0 < idx.num_frames < NUM_FRAMES
    assert read_barcode(read_frames(cut2, frames=[0]).frames[0]) == 0
    with pytest.raises(ValueError, match=f"cut.mkv: frame {NUM_FRAMES - 1} is out of range"):
        read_frames(cut2, frames=[NUM_FRAMES - 1])


def test_corrupt_payload_never_crashes(videos, tmp_path):
    data = bytearray(videos["h264-mkv" if "h264-mkv" in videos else "h264-mov"].read_bytes())
    rng = np.random.default_rng(1)
    for pos in rng.integers(len(data) // 4, len(data), 40):
        data[pos] ^= 0xFF
    bad = tmp_path / "bad.mov"
    bad.write_bytes(bytes(data))
    try:
        clip = read_frames(bad, frames=list(range(0, NUM_FRAMES, 3)))
        assert clip.frames.shape[0] == len(range(0, NUM_FRAMES, 3))
    except VideoError as e:
        assert "bad.mov" in str(e)


def test_missing_keyframe(videos, tmp_path):
    src = videos["h264-mov"]
    out_path = tmp_path / "nokey.mkv"
    with av.open(str(src)) as inp, av.open(str(out_path), "w") as out:
        ins = inp.streams.video[0]
        ost = out.add_stream_from_template(ins)
        first = True
        for packet in inp.demux(ins):
            if packet.size == 0:
                continue
            if first:  # drop the first keyframe
                first = False
                continue
            packet.stream = ost
            out.mux(packet)
    idx = build_index(out_path)
    assert not idx.keyframe[0]
    with pytest.raises(VideoError, match=r"nokey.mkv: frame 0 cannot be decoded: no keyframe before it"):
        read_frames(out_path, frames=[0, 20])
    key = int(idx.key_frames[0])
    # frame j of the cut file is frame j + 1 of the source (its frame 0, the keyframe, was dropped)
    assert read_barcode(read_frames(out_path, frames=[key + 1]).frames[0]) == key + 2


def test_no_video_stream(tmp_path):
    path = tmp_path / "audio_only.mkv"
    with av.open(str(path), "w") as out:
        st = out.add_stream("pcm_s16le", rate=8000)
        st.layout = "mono"
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 800), np.int16), format="s16", layout="mono")
        frame.sample_rate = 8000
        frame.pts = 0
        for p in st.encode(frame):
            out.mux(p)
        for p in st.encode():
            out.mux(p)
    with pytest.raises(VideoError, match=r"audio_only.mkv has no video stream \(streams found: audio\)"):
        read_frames(path, frames=[0])


# ---------------------------------------------------------------------------------------------------- audio
def test_audio_window_exact_samples(vfr_videos):
    audio, rate = read_audio_window(vfr_videos["mkv"], 0.5, 0.625)
    assert rate == 8000 and audio.shape == (1000, 1)
    expected = (np.arange(4000, 5000) % 32000 - 16000) / 32768.0
    np.testing.assert_allclose(audio[:, 0], expected, atol=1e-6)
    with pytest.raises(VideoError, match="vfr.mp4 has no audio stream"):
        read_audio_window(vfr_videos["mp4"], 0.0, 0.1)


# ------------------------------------------------------------------------------------ non-reference skipping
def test_nonref_detection_matches_ffmpeg_skip_frame(videos):
    from sluice.backends.video.bitstream import nonref_detector

    for name in ("h264-mp4", "h264-mov", "hevc-mkv"):
        if name not in videos:
            continue
        with av.open(str(videos[name])) as c:
            st = c.streams.video[0]
            detect = nonref_detector(get_index(videos[name]).codec, st.codec_context.extradata)
            ours = {p.pts for p in c.demux(st) if p.size and detect(p)}
        with av.open(str(videos[name])) as c:  # FFmpeg's own judgement: skip_frame=NONREF drops exactly those
            st = c.streams.video[0]
            st.codec_context.skip_frame = "NONREF"
            kept = {f.pts for f in c.decode(st)}
        all_pts = set(get_index(videos[name]).pts.tolist())
        assert ours and ours == all_pts - kept, name


def test_nonref_length_prefix_is_not_a_start_code():
    from sluice.backends.video.bitstream import nonref_detector

    avcc = bytes([1, 0x64, 0, 0x0D, 0xFF, 0xE1]) + bytes(20)  # avcC record: 4-byte NAL lengths
    ref_p = (257).to_bytes(4, "big") + bytes([0x41]) + bytes(256)  # length 257 = 00 00 01 01: no start code
    nonref_b = (9).to_bytes(4, "big") + bytes([0x01]) + bytes(8)
    detect = nonref_detector("h264", avcc)
    assert detect(ref_p) is False and detect(nonref_b) is True
    annexb = nonref_detector("h264", avcc, annexb=True)
    assert annexb(b"\x00\x00\x00\x01\x09\xf0\x00\x00\x01\x01\x9e") is True  # AUD, then a non-ref slice
    assert annexb(b"\x00\x00\x00\x01\x65\x88\x84") is False  # IDR
    assert nonref_detector("vp9", b"") is None


def test_unwanted_nonref_packets_are_not_decoded(videos, monkeypatch):
    from sluice.backends.video import pyav as pyav_mod

    decoded = []
    real = pyav_mod._decoded_frames

    def counting(packets, name, skip=None):
        def skip_and_count(packet):
            s = skip(packet) if skip else False
            decoded.append(not s)
            return s
        return real(packets, name, skip_and_count)

    monkeypatch.setattr(pyav_mod, "_decoded_frames", counting)
    clip = read_frames(videos["h264-mp4"], frames=[12, 23])  # one GOP: 12 .. 23
    assert barcodes(clip) == [12, 23]
    assert 0 < decoded.count(False) and decoded.count(True) < 12


def test_random_requests_exact_at_160x144(gpu_videos):
    """Larger frames give packets of 256..511 bytes, whose 4-byte length starts like a start code."""
    rng = np.random.default_rng(11)
    for name in ("h264-mp4", "hevc-mkv"):
        if name not in gpu_videos:
            continue
        path = gpu_videos[name]
        sizes = []
        with av.open(str(path)) as c:
            sizes = [p.size for p in c.demux(video=0) if p.size]
        ref = reference_frames(path)
        for _ in range(6):
            req = sorted(rng.choice(NUM_FRAMES, 5, replace=False).tolist())
            clip = read_frames(path, frames=req)
            for k, f in enumerate(req):
                np.testing.assert_array_equal(clip.frames[k].numpy(), ref[f], err_msg=f"{name} frame {f}")
        if name == "h264-mp4":
            assert any(256 <= s < 512 for s in sizes)


def test_container_reused_per_thread_and_reopened_when_changed(tmp_path, monkeypatch):
    path = tmp_path / "reuse.mkv"
    write_barcode_video(path, "libx264", num_frames=30)
    opened = []
    real = index_mod.open_container
    monkeypatch.setattr(index_mod, "open_container", lambda s: opened.append(s) or real(s))
    for req in ([25, 3], [7], [29, 0, 14]):  # backwards and forwards: every request seeks first
        assert barcodes(read_frames(path, frames=req)) == req
    assert len(opened) == 2  # once to build the index, once to decode
    write_barcode_video(path, "libx264", num_frames=20)
    os.utime(path, ns=(1, 2 * 10**18))
    assert barcodes(read_frames(path, frames=[19])) == [19]
    assert len(opened) == 4  # a new index and a new container for the changed file
