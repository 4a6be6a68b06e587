# ruff: noqa: I001, PLR0402
"""A DALI program in the style of a user's video benchmark: ``fn.readers.video`` from a file list whose paths are
relative to the working directory (``./test_videos/...``, the list itself in another folder), the clips resized
(FHWC: frames stay frames), read through a ``DALIGenericIterator`` with ``reader_name``. Written afresh on
generated videos; the DALI code is unchanged but for the first import line.

DALI opens file_list paths as written (get_file_label_pair of dali/operators/reader/loader/video_loader.cc).
Reference: each generated frame carries its index as a barcode, read back from the resized frames.
"""

import sluice.compat; sluice.compat.install()  # the one line a DALI program adds

import pytest
import nvidia.dali.fn as fn
from nvidia.dali import pipeline_def
from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

av = pytest.importorskip("av")

from sluice.backends.video.barcode import read_barcode, write_barcode_video

NUM_FRAMES, SEQUENCE_LENGTH = 16, 8


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """The program's working directory: test_videos/ with two clips, lists/file_list.txt naming them by paths
    relative to the working directory."""
    monkeypatch.setenv("SLUICE_VIDEO_INDEX_DIR", str(tmp_path / "index"))
    (tmp_path / "test_videos").mkdir()
    (tmp_path / "lists").mkdir()
    for name in ("a", "b"):
        write_barcode_video(tmp_path / "test_videos" / f"{name}.mp4", "libx264", num_frames=NUM_FRAMES)
    (tmp_path / "lists" / "file_list.txt").write_text("./test_videos/a.mp4 0\ntest_videos/b.mp4 1\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pipeline_def
def video_pipe(file_list, device):
    video, label = fn.readers.video(device=device, file_list=file_list, sequence_length=SEQUENCE_LENGTH,
                                    random_shuffle=False, name="Reader")
    return fn.resize(video, resize_x=64, resize_y=36), label


def run_program(device):
    pipe = video_pipe(batch_size=2, num_threads=2, device_id=0 if device == "gpu" else None, seed=1,
                      file_list="lists/file_list.txt", device=device)
    loader = DALIGenericIterator(pipe, ["video", "label"], reader_name="Reader",
                                 last_batch_policy=LastBatchPolicy.PARTIAL)
    assert len(loader) == 2  # 2 files x 2 sequences of 8 frames, 2 per batch
    seen = []
    for out in loader:
        video, label = out[0]["video"], out[0]["label"]
        assert tuple(video.shape) == (2, SEQUENCE_LENGTH, 36, 64, 3)
        for clip, lab in zip(video, label.flatten().tolist()):
            seen.append((lab, [read_barcode(frame) for frame in clip]))
    assert seen == [(0, list(range(8))), (0, list(range(8, 16))), (1, list(range(8))), (1, list(range(8, 16)))]


def test_relative_file_list_program(workdir):
    run_program("cpu")


@pytest.mark.cuda
def test_relative_file_list_program_gpu(workdir):
    run_program("gpu")
