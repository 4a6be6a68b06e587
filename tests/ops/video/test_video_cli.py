"""sluice probe / sluice index (src/sluice/video_cli.py); PyAV's stream metadata is the reference."""

from __future__ import annotations

import json

import av

from sluice.backends.video import index as index_mod
from sluice.video_cli import index, main, probe

from video_fixtures import NUM_FRAMES, VFR_PTS


def test_probe_cfr_and_vfr(videos, vfr_videos):
    info = probe(str(videos["h264-mp4"]))
    with av.open(str(videos["h264-mp4"])) as c:
        st = c.streams.video[0]
        assert (info["width"], info["height"], info["codec"]) == (st.codec_context.width, st.codec_context.height,
                                                                  "h264")
    assert info["frames"] == NUM_FRAMES and info["frame_rate"] == "CFR" and info["b_frames"]
    assert abs(info["duration_s"] - NUM_FRAMES / 30) < 1e-6
    assert info["gop_lengths"] == {"min": 4, "max": 12, "mean": 10.0} and info["keyframes"] == 4
    vfr = probe(str(vfr_videos["mkv"]))
    assert vfr["frame_rate"] == "VFR" and vfr["frames"] == len(VFR_PTS)
    assert vfr["frame_interval_s"]["min"] == 0.01 and vfr["frame_interval_s"]["max"] == 0.2


def test_index_folder_and_cli(videos, tmp_path, capsys):
    (tmp_path / "bad.mp4").write_bytes(b"junk")
    results = index([str(videos["h264-mp4"].parent), str(tmp_path / "bad.mp4")], workers=2)
    assert results[str(videos["h264-mp4"])].startswith("ok (40 frames)")
    assert results[str(tmp_path / "bad.mp4")].startswith("error: cannot open video")
    assert (index_mod.cache_dir() / f"{index_mod.cache_key(videos['vp9-webm'])}.npz").exists()
    assert main(["probe", "--json", str(videos["vp9-webm"])]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["codec"] == "vp9" and out["frames"] == NUM_FRAMES
    assert main(["index", str(tmp_path)]) == 1
    assert "bad.mp4: error" in capsys.readouterr().out
