"""fn.experimental.inputs.video: fed encoded videos come out as batches of consecutive sequences, checked frame by
frame by their barcodes, with DALI's documented batching (a video's last batch partial, its last sequence partial
or padded) and queue (the next fed video follows)."""

from __future__ import annotations

import numpy as np
import pytest

from sluice import fn, pipeline_def
from sluice.backends.video.barcode import read_barcode
from sluice.ops.inputs_video import sequence_plan

from video_fixtures import NUM_FRAMES


def codes(sample) -> list[int]:
    return [read_barcode(f) for f in sample]


def _pipe(policy="partial", device="cpu", exec_async=False):
    @pipeline_def(batch_size=3, num_threads=2, device_id=0 if device != "cpu" else None, exec_async=exec_async,
                  exec_pipelined=exec_async)
    def pipe():
        return fn.experimental.inputs.video(name="video", sequence_length=4, last_sequence_policy=policy,
                                            device=device)

    return pipe()


def test_plan_matches_dalis_example():
    # DALI's documented example: 67 frames, 5 per sequence, batch size 3 -> 14 sequences, the last of 2 frames
    position, batches = 0, []
    while position < 67:
        seqs, position = sequence_plan(position, 67, 5, 3, pad=False)
        batches.append([len(s) for s in seqs])
    assert batches == [[5, 5, 5]] * 4 + [[5, 2]]
    seqs, _ = sequence_plan(65, 67, 5, 3, pad=True)
    assert seqs[0].tolist() == [65, 66, 67, 68, 69]


@pytest.mark.parametrize("policy", ["partial", "pad"])
def test_streams_fed_videos_in_order(videos, policy):
    data = np.fromfile(videos["h264-mp4"], np.uint8)
    p = _pipe(policy)
    p.feed_input("video", [data])
    p.feed_input("video", [np.fromfile(videos["vp9-webm"], np.uint8)])
    seen = []
    for _ in range(4):  # 40 frames in sequences of 4: batches of 3, 3, 3, 1 sequences
        (clips,) = p.run()
        assert clips.layout() == "FHWC"
        seen.append([codes(c) for c in clips])
    assert [len(b) for b in seen] == [3, 3, 3, 1]
    assert [c for b in seen for c in b] == [list(range(s, s + 4)) for s in range(0, NUM_FRAMES, 4)]
    (clips,) = p.run()  # the second video starts
    assert codes(clips[0]) == [0, 1, 2, 3]
    with pytest.raises(Exception):
        for _ in range(4):
            p.run()  # the queue runs dry: an error naming the operator


def test_last_sequence_partial_or_padded(videos):
    data = np.fromfile(videos["h264-mp4"], np.uint8)
    for policy, last in (("partial", 4), ("pad", 6)):
        @pipeline_def(batch_size=20, num_threads=1, device_id=None, exec_async=False, exec_pipelined=False)
        def pipe():
            return fn.experimental.inputs.video(name="video", sequence_length=6, last_sequence_policy=policy)

        p = pipe()
        p.feed_input("video", [data])
        (clips,) = p.run()
        assert len(clips) == 7 and clips[6].shape[0] == last  # 40 = 6 * 6 + 4: the 7th holds frames 36..39
        assert codes(clips[6][:4]) == [36, 37, 38, 39]
        assert bool((clips[6][4:] == 0).all())  # padded with black frames


def test_feed_rules():
    p = _pipe()
    with pytest.raises(Exception, match="one video at a time"):
        p.feed_input("video", [np.zeros(10, np.uint8), np.zeros(10, np.uint8)])
    with pytest.raises(Exception, match="no video to decode"):
        p.run()


@pytest.mark.cuda
def test_mixed(gpu_videos):
    pytest.importorskip("PyNvVideoCodec")
    p = _pipe(device="mixed")
    p.feed_input("video", [np.fromfile(gpu_videos["h264-mp4"], np.uint8)])
    (clips,) = p.run()
    assert clips[0].is_cuda and codes(clips[1].cpu()) == [4, 5, 6, 7]
