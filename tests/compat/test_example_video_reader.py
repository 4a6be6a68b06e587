# ruff: noqa: I001, PLR0402
"""DALI's video reader examples ("simple video pipeline", "labelled videos from a directory", "labels from
frame numbers in a file list") written afresh on generated videos, plus the legacy VideoReader /
VideoReaderResize classes with their old arguments. The DALI code is unchanged but for the first import line.

Every generated frame carries its own index as a barcode (sluice.backends.video.barcode), so a sequence is
checked frame by frame: the reference is the frame numbering PyAV encoded.
"""

import sluice.compat; sluice.compat.install()  # the one line a DALI program adds

import os

import numpy as np
import pytest
from nvidia.dali import pipeline_def, Pipeline
import nvidia.dali.fn as fn
import nvidia.dali.ops as ops
import nvidia.dali.types as types

av = pytest.importorskip("av")

from sluice.backends.video.barcode import read_barcode, write_barcode_video

NUM_FRAMES = 24
SEQUENCE_LENGTH = 4


@pytest.fixture(scope="module", autouse=True)
def _index_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("SLUICE_VIDEO_INDEX_DIR", str(tmp_path_factory.mktemp("video_index")))
    yield
    mp.undo()


def _write_tree(root, **size):
    files = []
    for label, cls in enumerate(("run", "walk")):
        (root / cls).mkdir()
        path = root / cls / f"clip{label}.mp4"
        write_barcode_video(path, "libx264", num_frames=NUM_FRAMES, **size)
        files.append(str(path))
    return files


@pytest.fixture(scope="module")
def video_files(tmp_path_factory):
    return _write_tree(tmp_path_factory.mktemp("videos"))


@pytest.fixture(scope="module")
def gpu_video_files(tmp_path_factory):
    return _write_tree(tmp_path_factory.mktemp("gpu_videos"), width=160, height=144)


def frame_numbers(sequence):
    return [read_barcode(frame) for frame in sequence]


@pipeline_def
def video_pipe(filenames, device):
    videos = fn.readers.video(device=device, filenames=filenames, sequence_length=SEQUENCE_LENGTH, shard_id=0,
                              num_shards=1, random_shuffle=True, initial_fill=11)
    return videos


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.cuda)])
def test_simple_video_pipeline(video_files, gpu_video_files, device):
    files = gpu_video_files if device == "gpu" else video_files
    pipe = video_pipe(files, device, batch_size=2, num_threads=2, device_id=0 if device == "gpu" else None,
                      seed=123456)
    pipe.build()
    starts = []
    for _ in range(3):
        pipe_out = pipe.run()
        assert len(pipe_out) == 1  # DALI yields no labels for `filenames` without `labels`
        sequences_out = pipe_out[0].as_cpu().as_array()
        assert sequences_out.shape[:2] == (2, SEQUENCE_LENGTH) and sequences_out.dtype == np.uint8
        for sequence in sequences_out:
            numbers = frame_numbers(sequence)
            assert numbers == list(range(numbers[0], numbers[0] + SEQUENCE_LENGTH))
            starts.append(numbers[0])
    assert all(s % SEQUENCE_LENGTH == 0 for s in starts)


@pipeline_def
def labelled_video_pipe(video_directory):
    video, label = fn.readers.video(device="cpu", file_root=video_directory, sequence_length=SEQUENCE_LENGTH,
                                    random_shuffle=True, initial_fill=11)
    return video, label


def test_labelled_videos_from_a_directory(video_files):
    root = os.path.dirname(os.path.dirname(video_files[0]))
    pipe = labelled_video_pipe(root, batch_size=2, num_threads=2, device_id=None, seed=5)
    for _ in range(3):
        video, label = pipe.run()
        for j in range(2):
            numbers = frame_numbers(video.at(j))
            assert numbers == list(range(numbers[0], numbers[0] + SEQUENCE_LENGTH))
            assert int(label.at(j)[0]) in (0, 1)


class LegacyVideoPipe(Pipeline):
    def __init__(self, batch_size, num_threads, device_id, file_list, resize):
        super().__init__(batch_size, num_threads, device_id, seed=16)
        reader = ops.VideoReaderResize if resize else ops.VideoReader
        extra = {"resize_x": 128, "resize_y": 96} if resize else {}
        self.input = reader(device="cpu", file_list=file_list, sequence_length=SEQUENCE_LENGTH,
                            file_list_frame_num=True, skip_vfr_check=True, image_type=types.RGB,
                            dtype=types.UINT8, enable_frame_num=True, **extra)

    def define_graph(self):
        frames, label, frame_num = self.input(name="Reader")
        return frames, label, frame_num


@pytest.mark.parametrize("resize", [False, True])
def test_legacy_video_reader_with_frame_numbers(video_files, tmp_path, resize):
    file_list = tmp_path / "list.txt"
    file_list.write_text(f"{video_files[0]} 3 4 12\n{video_files[1]} 5 8 16\n")
    name = "VideoReaderResize" if resize else "VideoReader"
    with pytest.warns(DeprecationWarning, match=f"ops.{name} is deprecated; use ops.readers.{name[:5]}"):
        pipe = LegacyVideoPipe(4, 2, None, str(file_list), resize)
    assert pipe.epoch_size("Reader") == 4
    frames, label, frame_num = pipe.run()
    # the barcode's bit width follows the frame width: read resized frames back at the encoded size
    step = 2 if resize else 1
    got = [(int(label.at(j)[0]), frame_numbers(frames.at(j)[:, ::step, ::step])) for j in range(4)]
    assert got == [(3, [4, 5, 6, 7]), (3, [8, 9, 10, 11]), (5, [8, 9, 10, 11]), (5, [12, 13, 14, 15])]
    assert [int(frame_num.at(j)[0]) for j in range(4)] == [4, 8, 8, 12]
    assert frames.at(0).shape == ((SEQUENCE_LENGTH, 96, 128, 3) if resize else (SEQUENCE_LENGTH, 48, 64, 3))


def test_video_labels_empty_list_numbers_the_files(video_files):
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.readers.video(filenames=video_files, labels=[], sequence_length=NUM_FRAMES, device="cpu")

    video, label = pipe().run()
    assert video.at(0).shape[0] == NUM_FRAMES
    assert [int(label.at(j)[0]) for j in range(2)] == [0, 1]


def test_unsupported_video_arguments_raise(video_files):
    with pytest.raises(NotImplementedError, match="image_type=types.YCbCr"):
        fn.readers.video(filenames=video_files, sequence_length=2, image_type=types.YCbCr)
    with pytest.raises(NotImplementedError, match="channels=1"):
        ops.readers.Video(filenames=video_files, sequence_length=2, channels=1)
