"""One cache root: every file sluice keeps between runs goes below SLUICE_CACHE (default ~/.cache/sluice), the
video frame indexes included; the tests keep it in pytest's temporary folder."""

from pathlib import Path

from sluice import cache_dir
from sluice.backends.video import index


def test_cache_root_follows_sluice_cache_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("SLUICE_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "mine"
    assert cache_dir("demo_images") == tmp_path / "mine" / "demo_images"
    monkeypatch.delenv("SLUICE_CACHE")
    assert cache_dir() == tmp_path / "xdg" / "sluice"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "sluice"
    assert not (tmp_path / "home").exists()  # naming the folder creates nothing


def test_video_indexes_live_under_the_cache_root_unless_moved(monkeypatch, tmp_path):
    monkeypatch.setenv("SLUICE_CACHE", str(tmp_path))
    monkeypatch.delenv("SLUICE_VIDEO_INDEX_DIR", raising=False)
    assert index.cache_dir() == tmp_path / "video_index"
    monkeypatch.setenv("SLUICE_VIDEO_INDEX_DIR", str(tmp_path / "shared_indexes"))
    assert index.cache_dir() == tmp_path / "shared_indexes"


def test_the_tests_write_only_to_their_temporary_folder(sluice_cache, tmp_path_factory):
    assert cache_dir() == sluice_cache
    assert Path(sluice_cache).is_relative_to(tmp_path_factory.getbasetemp())
    assert Path.home().is_relative_to(tmp_path_factory.getbasetemp())  # conftest checks its .cache/sluice at the end
