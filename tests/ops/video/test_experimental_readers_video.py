"""fn.experimental.readers.video (DALI 2.4's experimental reader) on sluice's video machinery: sequences checked
frame by frame by their barcodes against DALI's documented rules (step defaults to stride * sequence_length, labels
only when known, enable_frame_num 'scalar' / 'sequence', pad_mode, uniform_sample as numpy.linspace rounded half
up, file_list rounding and inclusive ends)."""

from __future__ import annotations

import numpy as np
import pytest

from sluice import fn, pipeline_def
from sluice.backends.video.barcode import read_barcode

from video_fixtures import NUM_FRAMES, VFR_PTS


def codes(sample) -> list[int]:
    return [read_barcode(f) for f in sample]


def run_reader(batch_size=2, iterations=1, device="cpu", **kwargs):
    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=0 if device == "gpu" else None, seed=3)
    def pipe():
        out = fn.experimental.readers.video(device=device, name="Reader", **kwargs)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    p = pipe()
    return p, [p.run() for _ in range(iterations)]


def test_default_step_no_labels_and_frame_numbers(videos):
    files = [str(videos["h264-mp4"])]
    p, outs = run_reader(batch_size=4, filenames=files, sequence_length=4, stride=2, enable_frame_num="scalar")
    video, num = outs[0]  # no labels: filenames without labels
    assert video.layout() == "FHWC"
    # step = stride * sequence_length = 8: starts 0, 8, 16, 24, 32 (32 + 8 <= 40)
    assert [int(num[i][0]) for i in range(4)] == [0, 8, 16, 24]
    assert codes(video[1]) == [8, 10, 12, 14]
    assert p.reader_meta("Reader")["epoch_size"] == 5


def test_labels_sequence_frame_numbers_and_timestamps(videos):
    files = [str(videos["vp9-webm"]), str(videos["h264-mp4"])]
    _, outs = run_reader(batch_size=2, filenames=files, labels=[3, 5], sequence_length=3, step=20,
                         enable_frame_num="sequence", enable_timestamps=True)
    video, label, num, ts = outs[0]
    assert [int(label[i][0]) for i in range(2)] == [3, 3]
    assert num[1].tolist() == [20, 21, 22] and codes(video[1]) == [20, 21, 22]
    np.testing.assert_allclose(ts[1].numpy(), np.array([20, 21, 22]) / 30, atol=1e-3)


@pytest.mark.parametrize("pad_mode,tail", [("constant", [-1, -1]), ("edge", [39, 39]), ("reflect_101", [38, 37]),
                                           ("symmetric", [39, 38])])
def test_pad_modes_at_the_end(videos, pad_mode, tail):
    _, outs = run_reader(batch_size=5, filenames=[str(videos["h264-mp4"])], sequence_length=6, step=9,
                         pad_mode=pad_mode, enable_frame_num="sequence", fill_value=[7])
    video, num = outs[0]
    # starts 0, 9, 18, 27, 36: the last wants frames 36..41, two of them past the end
    assert num[4].tolist() == [36, 37, 38, 39] + tail
    if pad_mode == "constant":
        assert codes(video[4][:4]) == [36, 37, 38, 39] and bool((video[4][4:] == 7).all())
    else:
        assert codes(video[4]) == [36, 37, 38, 39] + tail
    p, _ = run_reader(batch_size=5, filenames=[str(videos["h264-mp4"])], sequence_length=6, step=9)
    assert p.reader_meta("Reader")["epoch_size"] == 4  # unpadded, only whole sequences: 0, 9, 18, 27


def test_uniform_sample_and_file_list(videos, vfr_videos, tmp_path):
    _, outs = run_reader(batch_size=1, filenames=[str(videos["h264-mp4"])], sequence_length=5, uniform_sample=True,
                         enable_frame_num="sequence")
    video, num = outs[0]
    expected = np.floor(np.linspace(0, NUM_FRAMES - 1, 5) + 0.5).astype(int).tolist()
    assert num[0].tolist() == expected and codes(video[0]) == expected
    lst = tmp_path / "list.txt"
    lst.write_text(f"{videos['h264-mp4']} 1 5 12\n")  # frames 5..12, the end inclusive by default
    _, outs = run_reader(batch_size=2, file_list=str(lst), file_list_format="frames", sequence_length=4,
                         enable_frame_num="scalar")
    video, label, num = outs[0]
    assert codes(video[0]) == [5, 6, 7, 8] and codes(video[1]) == [9, 10, 11, 12] and int(label[1][0]) == 1
    # seconds on a VFR file: start 0.2 rounds down to frame 3 (pts 200), end 0.45 up to frame 11 (pts 456), kept
    lst.write_text(f"{vfr_videos['mp4']} 4 0.2 0.45\n")
    _, outs = run_reader(batch_size=3, file_list=str(lst), sequence_length=3, enable_timestamps=True)
    video, label, ts = outs[0]
    assert [codes(v) for v in video] == [[3, 4, 5], [6, 7, 8], [9, 10, 11]]
    np.testing.assert_allclose(ts[2].numpy(), np.array(VFR_PTS[9:12]) / 1000, atol=1e-6)
    _, outs = run_reader(batch_size=2, file_list=str(lst), sequence_length=3, file_list_rounding="start_up_end_down",
                         file_list_include_end=False)
    video, _ = outs[0]
    assert [codes(v) for v in video] == [[3, 4, 5], [6, 7, 8]]


def test_errors(videos):
    with pytest.raises(Exception, match="enable_frame_num"):
        run_reader(filenames=[str(videos["h264-mp4"])], sequence_length=2, enable_frame_num="all")


@pytest.mark.cuda
def test_gpu_reader(gpu_videos):
    pytest.importorskip("PyNvVideoCodec")
    _, outs = run_reader(batch_size=2, device="gpu", filenames=[str(gpu_videos["h264-mp4"])], labels=[1],
                         sequence_length=4, enable_frame_num=True)
    video, label, num = outs[0]
    assert video[0].is_cuda and codes(video[0].cpu()) == [0, 1, 2, 3] and int(num[1][0]) == 4
