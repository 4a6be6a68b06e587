"""Small test videos, generated once per session with PyAV; each frame carries its index as a barcode."""

from __future__ import annotations

import sys
from fractions import Fraction

import pytest

av = pytest.importorskip("av")

from sluice.backends.video.barcode import write_barcode_video  # noqa: E402

import fake_nvc  # noqa: E402
from video_fixtures import CODECS, NUM_FRAMES, VFR_PTS  # noqa: E402


@pytest.fixture(autouse=True)
def _index_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SLUICE_VIDEO_INDEX_DIR", str(tmp_path_factory.getbasetemp() / "video_index"))
    # The hybrid backend's CPU jobs run in threads here (worker processes start a Python each: the tests that
    # are about them ask for them).
    monkeypatch.setattr("sluice.backends.video.hybrid.CPU_PROCESSES", False)


@pytest.fixture
def fake_files(monkeypatch):
    """PyNvVideoCodec replaced by the stand-in of fake_nvc.py, SimpleDecoder included; the decoders it makes."""
    created: list = []
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", fake_nvc.make_module(created, with_simple=True))
    monkeypatch.setattr(fake_nvc.SimpleDecoder, "misnumber", False)
    monkeypatch.setattr(fake_nvc.SimpleDecoder, "fail_open", False)
    monkeypatch.setattr(fake_nvc.SimpleDecoder, "clock", None)
    return created


@pytest.fixture(scope="session")
def video_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("videos")


def _encode_all(video_dir, prefix: str = "", **size) -> dict:
    out = {}
    for name, codec, fname in CODECS:
        if codec in av.codecs_available:
            out[name] = video_dir / f"{prefix}{fname}"
            write_barcode_video(out[name], codec, num_frames=NUM_FRAMES, **size)
    return out


@pytest.fixture(scope="session")
def videos(video_dir):
    """{name: path} at 64x48 for every codec/container pair the PyAV wheel can encode."""
    return _encode_all(video_dir)


@pytest.fixture(scope="session")
def gpu_videos(video_dir):
    """The same codecs at 160x144: NVDEC's smallest HEVC picture is 144x144, VP9's and AV1's 128x128."""
    return _encode_all(video_dir, "gpu_", width=160, height=144)


@pytest.fixture(scope="session")
def nvdec_videos(gpu_videos):
    """The gpu_videos whose codec this GPU's NVDEC reports it decodes (an H200's caps query reports no AV1, for
    one); H.264 and HEVC must be among them."""
    nvc = pytest.importorskip("PyNvVideoCodec")
    from sluice.backends.video.index import VideoError, get_index
    from sluice.backends.video.nvdec import check_caps, nvdec_codec

    out = {}
    for name, path in gpu_videos.items():
        idx = get_index(str(path))
        try:
            check_caps(nvc, nvdec_codec(idx.codec, idx.name), 0, idx.width, idx.height)
        except VideoError as e:
            print(f"NVDEC on this GPU skips {name}: {e}")
            continue
        out[name] = path
    assert "h264-mp4" in out and "hevc-mkv" in out, sorted(out)
    return out


@pytest.fixture(scope="session")
def vfr_videos(video_dir):
    """Variable-frame-rate H.264 in mp4 and mkv (irregular pts, ms clock), mkv with a lossless audio track."""
    out = {}
    for ext, audio in (("mp4", None), ("mkv", "pcm_s16le")):
        path = video_dir / f"vfr.{ext}"
        write_barcode_video(path, "libx264", num_frames=len(VFR_PTS), pts=VFR_PTS, time_base=Fraction(1, 1000),
                            audio=audio)
        out[ext] = path
    return out
