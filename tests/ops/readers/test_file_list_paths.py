"""Where each reader looks for the relative paths of a ``file_list``, as DALI's loaders do:

* readers.file and readers.numpy: relative to ``file_root``, else to the list's folder (the text before its last
  ``/``; none: the working directory) -- FileLabelLoader / FileLoader of
  ``dali/operators/reader/loader/file_label_loader.h`` and ``file_loader.h``, joined by ``join_path`` of
  ``filesystem.cc`` (absolute paths stay as they are);
* readers.video: as written, relative to the working directory (``get_file_label_pair`` of
  ``dali/operators/reader/loader/video_loader.cc``), or to ``file_root`` where sluice is given one;
* readers.sequence has no ``file_list`` (DALI's SequenceReader takes ``file_root`` only).
"""

import numpy as np
import pytest

import sluice
from sluice import fn
from sluice.schema import get_schema


def _value(sample):
    return int(np.frombuffer(sample.numpy().tobytes(), np.int32)[0])


def _read(reader, batch_size=2, **kw):
    @sluice.pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=1)
    def pipe():
        out = getattr(fn.readers, reader)(**kw)
        return out[0] if isinstance(out, (list, tuple)) else out

    (data,) = pipe().run()
    return data


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """cwd/data/x.bin (value 1), cwd/lists/data/x.bin (value 2): the same relative path from the working
    directory and from the list's folder names different files."""
    for folder, v in (("data", 1), ("lists/data", 2)):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "x.bin").write_bytes(np.int32(v).tobytes())
        np.save(tmp_path / folder / "x.npy", np.int32([v]))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_file_reader_paths_are_relative_to_the_list(tree):
    (tree / "lists" / "l.txt").write_text("data/x.bin 0\n")
    assert _value(_read("file", 1, file_list="lists/l.txt")[0]) == 2
    (tree / "l.txt").write_text("data/x.bin 0\n")
    assert _value(_read("file", 1, file_list="l.txt")[0]) == 1  # no folder in the list's path: the cwd
    assert _value(_read("file", 1, file_list="lists/l.txt", file_root=str(tree))[0]) == 1
    (tree / "lists" / "abs.txt").write_text(f"{tree / 'data' / 'x.bin'} 0\n")
    assert _value(_read("file", 1, file_list="lists/abs.txt")[0]) == 1


def test_numpy_reader_paths_are_relative_to_the_list(tree):
    (tree / "lists" / "l.txt").write_text("data/x.npy\n")
    assert _read("numpy", 1, file_list="lists/l.txt")[0].tolist() == [2]
    assert _read("numpy", 1, file_list="lists/l.txt", file_root=str(tree))[0].tolist() == [1]


def test_video_reader_paths_are_relative_to_the_working_directory(tree, monkeypatch):
    pytest.importorskip("av")
    from sluice.backends.video.barcode import read_barcode, write_barcode_video

    monkeypatch.setenv("SLUICE_VIDEO_INDEX_DIR", str(tree / "index"))
    write_barcode_video(tree / "data" / "v.mp4", "libx264", num_frames=6)
    (tree / "lists" / "l.txt").write_text("data/v.mp4 3\n")
    clips = _read("video", 1, file_list="lists/l.txt", sequence_length=3)
    assert [read_barcode(f) for f in clips[0]] == [0, 1, 2]
    (tree / "data" / "v.mp4").rename(tree / "lists" / "data" / "v.mp4")  # only next to the list now
    with pytest.raises(Exception, match="does not exist"):
        _read("video", 1, file_list="lists/l.txt", sequence_length=3)
    clips = _read("video", 1, file_list="lists/l.txt", file_root=str(tree / "lists"), sequence_length=3)
    assert [read_barcode(f) for f in clips[0]] == [0, 1, 2]


def test_sequence_reader_has_no_file_list():
    assert "file_list" not in get_schema("readers.sequence").args
