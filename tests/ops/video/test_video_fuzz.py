"""Corrupt and unreadable videos through the pipelines users write (issue 20): ``readers.video`` never shrinks the
epoch silently, and every failure is a PipelineError naming the operator, the file and (per sample) the sample.

The files are made here from one small faststart MP4 (its ``moov`` before the frames, as streaming sites write
them): truncated, zeroed in the middle, random after the magic, bit-flipped (20 bits; 64 bits in the frames),
an ``mdhd`` timescale of 0, empty;
and paths that are no video file: a directory, a symlink loop, a broken symlink, an unreadable file.
"""

from __future__ import annotations

import logging
import os
import re

import numpy as np
import pytest

from sluice import PipelineError, fn, pipeline_def
from sluice.backends.video import index as index_mod
from sluice.backends.video.barcode import _x264_reproducible, make_frame, read_barcode

av = pytest.importorskip("av")

FRAMES = 40


def _faststart(path, n: int = FRAMES, w: int = 64, h: int = 48) -> bytes:
    with av.open(str(path), "w", options={"movflags": "faststart"}) as out:
        s = out.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        opts = {"g": "12", "preset": "veryfast", "bf": "2"}
        _x264_reproducible(opts)
        s.options = opts
        for i in range(n):
            frame = av.VideoFrame.from_ndarray(make_frame(i, w, h), format="rgb24")
            frame.pts = i
            for p in s.encode(frame):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    return path.read_bytes()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("fuzz")
    raw = _faststart(d / "good.mp4")
    assert raw.find(b"moov") < raw.find(b"mdat")
    out = {"good": d / "good.mp4"}

    def write(name: str, data: bytes):
        out[name] = d / f"{name}.mp4"
        out[name].write_bytes(bytes(data))

    write("truncated10", raw[:len(raw) // 10])
    write("truncated50", raw[:len(raw) // 2])
    rng = np.random.default_rng(20)
    write("random", raw[:8] + rng.integers(0, 256, len(raw) - 8, dtype=np.uint8).tobytes())
    write("empty", b"")
    mdhd = bytearray(raw)
    at = raw.find(b"mdhd")
    tick = at + 8 + (8 if raw[at + 4] == 0 else 16)  # version/flags, then creation and modification times
    mdhd[tick:tick + 4] = bytes(4)
    write("mdhd0", mdhd)
    zeroed = bytearray(raw)
    zeroed[len(raw) // 2:len(raw) // 2 + len(raw) // 8] = bytes(len(raw) // 8)
    write("zeroed", zeroed)
    flipped = bytearray(raw)
    for k in rng.integers(len(raw) // 3, len(raw), 20):
        flipped[k] ^= 1 << int(rng.integers(0, 8))
    write("flipped", flipped)
    flipped64 = bytearray(raw)
    mdat = raw.find(b"mdat") + 4
    for k in np.random.default_rng(36).integers(mdat, len(raw), 64):
        flipped64[k] ^= 1 << int(rng.integers(0, 8))
    write("flipped64", flipped64)
    out["directory"] = d / "folder.mp4"
    out["directory"].mkdir()
    out["loop"] = d / "loop.mp4"
    os.symlink(d / "loop2.mp4", out["loop"])
    os.symlink(out["loop"], d / "loop2.mp4")
    out["broken"] = d / "broken.mp4"
    os.symlink(d / "nowhere.mp4", out["broken"])
    return out


def reader(files_, **kwargs):
    @pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
    def pipe():
        video, label = fn.readers.video(filenames=[str(f) for f in files_], sequence_length=8, stride=3, step=100,
                                        name="Reader", **kwargs)
        return video, label

    return pipe()


def run_error(p) -> PipelineError:
    """The PipelineError of a built pipeline's first run (the pipeline closed after)."""
    p.build()
    try:
        with pytest.raises(PipelineError) as info:
            p.run()
    finally:
        p.close()
    return info.value


def build_error(files_, **kwargs) -> PipelineError:
    with pytest.raises(PipelineError) as info:
        p = reader(files_, **kwargs)
        p.build()
        p.close()
    return info.value


@pytest.mark.parametrize("name, reason", [
    ("truncated10", "cannot open video .*corrupt, truncated"),
    ("truncated50", "declares 40 frames but only \\d+ could be read"),
    ("mdhd0", "declares 40 frames but only \\d+ could be read"),
    ("random", "cannot open video .*corrupt, truncated"),
    ("empty", "is empty \\(0 bytes\\)"),
    ("directory", "is a directory, not a file"),
    ("loop", "is a symlink loop"),
    ("broken", "does not exist \\(a broken symlink\\)"),
])
def test_reader_refuses_at_build_naming_operator_file_and_reason(files, name, reason):
    err = build_error([files["good"], files["good"], files[name], files["good"]])
    assert type(err) is PipelineError and err.op_name == "readers.video" and err.source == str(files[name])
    msg = str(err)
    assert msg.startswith(f"fn.readers.video: cannot read video file '{files[name]}': ")
    assert re.search(reason, msg), msg
    assert "skip_unreadable_files=True" in msg


def test_unreadable_file_says_permission(files, monkeypatch):
    target = str(files["good"])
    access = os.access
    monkeypatch.setattr(index_mod.os, "access", lambda p, mode: access(p, mode) and os.fspath(p) != target)
    index_mod._memory.clear()
    err = build_error([files["good"]])
    assert "is not readable (permission denied)" in str(err) and err.source == target


def test_several_bad_files_counted(files):
    err = build_error([files["good"], files["empty"], files["loop"], files["truncated50"]])
    assert str(files["empty"]) in str(err) and "(and 2 more files that cannot be read)" in str(err)


def test_skip_only_when_asked_and_the_count_reported(files, caplog):
    bad = [files["truncated50"], files["mdhd0"], files["loop"]]
    with caplog.at_level(logging.WARNING, logger="sluice.ops.readers.video"):
        p = reader([files["good"], *bad, files["good"]], skip_unreadable_files=True, enable_frame_num=False)
        p.build()
    try:
        video, label = p.run()
        assert sorted(int(x[0]) for x in label) == [0, 0, 4, 4]  # the good files keep their labels
        assert [read_barcode(f) for f in video[0]] == [0, 3, 6, 9, 12, 15, 18, 21]
        assert p.epoch_size("Reader") == 2
        assert [path for path, _ in p.executor.operator("Reader").skipped_files] == [str(f) for f in bad]
    finally:
        p.close()
    assert "skip_unreadable_files: 3 of 5 files left out of the epoch" in caplog.text
    assert all(str(f) in caplog.text for f in bad)
    with pytest.raises(PipelineError, match="none of the 2 video files can be read"):
        reader([files["empty"], files["loop"]], skip_unreadable_files=True).build()


def test_reader_damage_found_while_decoding_names_the_sample(files):
    error = run_error(reader([files["good"], files["good"], files["zeroed"], files["good"]], labels=[0, 1, 2, 3]))
    msg = str(error)
    assert type(error) is PipelineError and error.op_name == "readers.video"
    assert "fn.readers.video" in msg and "on sample 2" in msg and str(files["zeroed"]) in msg
    assert error.sample == 2 and "could not be decoded" in msg


@pytest.mark.parametrize("name", ["flipped", "flipped64"])
def test_reader_bit_flips_are_named_never_concealed(files, name):
    """FFmpeg conceals damage it finds (grey or smeared blocks; one constant frame, for a faststart MP4 with 64
    flipped bits) and says so only in the frame's flags: a corrupt frame is an error naming the sample and the file,
    never given out as a frame. PyAV itself flags the frames (the reference)."""
    with av.open(str(files[name])) as c:
        assert any(f.is_corrupt for f in c.decode(video=0))
    error = run_error(reader([files["good"], files["good"], files[name], files["good"]], labels=[0, 1, 2, 3]))
    msg = str(error)
    assert error.op_name == "readers.video" and error.sample == 2 and str(files[name]) in msg
    assert re.search(r"frame \d+ (is corrupt: the decoder found damaged data|could not be decoded)", msg), msg


@pytest.mark.cuda
def test_gpu_reader_bit_flips_are_named_never_concealed(files):
    """The same on the GPU (NVDEC and the hybrid's CPU jobs): the damaged file's sample is an error naming it."""
    @pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=1)
    def pipe():
        names = ("good", "good", "flipped64", "good")
        video, label = fn.readers.video(device="gpu", filenames=[str(files[n]) for n in names], labels=[0, 1, 2, 3],
                                        sequence_length=8, stride=3, step=100, name="Reader")
        return video, label

    error = run_error(pipe())
    assert error.op_name == "readers.video" and error.sample == 2 and str(files["flipped64"]) in str(error)


def test_backend_refuses_corrupt_frames(files):
    """The CPU backend itself: the frames of the good file decode, those of the damaged one raise a VideoError
    naming it."""
    from sluice.backends.video import VideoError, read_frames

    assert [read_barcode(f) for f in read_frames(str(files["good"]), frames=[0, 13, 39]).frames] == [0, 13, 39]
    with pytest.raises(VideoError, match=rf"{re.escape(str(files['flipped64']))}: frame \d+ is corrupt"):
        read_frames(str(files["flipped64"]), start_frame=0)


@pytest.mark.parametrize("name, reason", [
    ("truncated10", "cannot open video"),
    ("truncated50", "out of range: the video has \\d+ frames .*; its container declares 40 frames"),
    ("mdhd0", "out of range: the video has \\d+ frames .*; its container declares 40 frames"),
    ("random", "cannot open video"),
    ("zeroed", "could not be decoded"),
    ("flipped64", "is corrupt|could not be decoded"),
    ("empty", "is empty"),
])
def test_decoder_names_operator_sample_and_file(files, tmp_path, name, reason):
    root = tmp_path / "root" / "class0"
    root.mkdir(parents=True)
    for k, src in enumerate([files["good"], files[name]]):
        (root / f"{k}_{src.name}").write_bytes(src.read_bytes())

    @pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=1)
    def pipe():
        data, _ = fn.readers.file(file_root=str(tmp_path / "root"), file_filters=["*.mp4"])
        return fn.decoders.video(data, frames=[1, 30])

    error = run_error(pipe())
    msg = str(error)
    assert error.op_name == "decoders.video" and error.sample == 1
    assert "fn.decoders.video" in msg and "on sample 1" in msg and f"1_{files[name].name}" in msg
    assert re.search(reason, msg), msg
