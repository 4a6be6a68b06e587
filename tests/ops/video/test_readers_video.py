"""fn.readers.video: sequences checked frame by frame by their barcodes; file_list semantics; sharding; audio."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice import fn, pipeline_def, types
from sluice.backends.video.barcode import read_barcode, write_barcode_video

from video_fixtures import VFR_PTS


def codes(sample) -> list[int]:
    return [read_barcode(f) for f in sample]


def run_reader(batch_size=2, iterations=1, device="cpu", **kwargs):
    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=0 if device == "gpu" else None, seed=3)
    def pipe():
        return fn.readers.video(device=device, name="Reader", **kwargs)

    p = pipe()
    outs = [p.run() for _ in range(iterations)]
    return p, outs


def test_sequences_in_order_with_labels(videos):
    files = [str(videos["h264-mp4"]), str(videos["vp9-webm"])]
    p, outs = run_reader(batch_size=3, iterations=3, filenames=files, labels=[7, 9], sequence_length=4, stride=3,
                         step=10, enable_frame_num=True, enable_timestamps=True)
    got = []
    for video, label, frame_num, ts in outs:
        assert video.layout() == "FHWC"
        for i in range(len(video)):
            assert video[i].shape == (4, 48, 64, 3)
            start = int(frame_num[i][0])
            assert codes(video[i]) == [start, start + 3, start + 6, start + 9]
            # webm keeps a millisecond clock
            np.testing.assert_allclose(ts[i].numpy(), np.array([start, start + 3, start + 6, start + 9]) / 30,
                                       atol=1e-3)
            got.append((int(label[i][0]), start))
    # starts 0, 10, 20 (30 would need frame 39 + ... = 39: 30+9=39 < 40 -> valid) per file
    assert got[:8] == [(7, 0), (7, 10), (7, 20), (7, 30), (9, 0), (9, 10), (9, 20), (9, 30)]
    assert p.reader_meta("Reader")["epoch_size"] == 8


def test_file_list_frames_and_timestamps(videos, vfr_videos, tmp_path):
    lst = tmp_path / "list.txt"
    lst.write_text(f"{videos['h264-mp4']} 1 5 13\n{videos['mpeg4-avi']} 2\n")
    _, outs = run_reader(batch_size=2, iterations=1, file_list=str(lst), file_list_format="frames",
                         sequence_length=4, enable_frame_num=True)
    video, label, num = outs[0]
    assert codes(video[0]) == [5, 6, 7, 8] and int(label[0][0]) == 1
    assert codes(video[1]) == [9, 10, 11, 12]  # end 13 is exclusive: no room for 13..16
    # timestamps (seconds) on a VFR file: frames shown in [0.2, 0.5) are 3..10 (pts 200 .. 456 ms)
    lst.write_text(f"{vfr_videos['mp4']} 4 0.2 0.5\n")
    _, outs = run_reader(batch_size=2, iterations=1, file_list=str(lst), sequence_length=4, enable_timestamps=True)
    video, label, ts = outs[0]
    assert codes(video[0]) == [3, 4, 5, 6] and codes(video[1]) == [7, 8, 9, 10]
    np.testing.assert_allclose(ts[1].numpy(), np.array(VFR_PTS[7:11]) / 1000, atol=1e-6)


def test_file_list_seconds_and_timestamps_count_from_the_first_frame(tmp_path):
    """An MPEG-TS file's clock starts where its recorder's did (here at 10 s): file_list seconds and the
    timestamps output count from the stream's start, as DALI's reader counts them (``(pts - start_time) *
    time_base``; start and end seconds to frames by the frame rate), so "0.5 1.0" is frames 15..29, not none.
    A negative start counts from the end (DALI: ``frame_count + start``). Frames checked against PyAV's."""
    av = pytest.importorskip("av")
    path = tmp_path / "clock10s.ts"
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.options = {"g": "12", "bf": "2"}
        for i in range(40):
            from sluice.backends.video.barcode import make_frame

            frame = av.VideoFrame.from_ndarray(make_frame(i, 64, 48), format="rgb24")
            frame.pts = 300 + i  # 10 s at 1/30
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    with av.open(str(path)) as c:
        ref = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
        assert c.streams.video[0].start_time * c.streams.video[0].time_base == 10
    lst = tmp_path / "list.txt"
    lst.write_text(f"{path} 3 0.5 1.0\n")
    _, outs = run_reader(batch_size=5, iterations=1, file_list=str(lst), sequence_length=3, step=3,
                         enable_frame_num=True, enable_timestamps=True)
    video, _, num, ts = outs[0]
    assert [int(n[0]) for n in num] == [15, 18, 21, 24, 27]
    for i in range(5):
        s = 15 + 3 * i
        np.testing.assert_array_equal(video[i].numpy(), np.stack(ref[s:s + 3]))
        np.testing.assert_allclose(ts[i].numpy(), np.arange(s, s + 3) / 30, atol=1e-4)
    lst.write_text(f"{path} 3 -9 0\n")
    _, outs = run_reader(batch_size=3, iterations=1, file_list=str(lst), file_list_format="frames",
                         sequence_length=3, enable_frame_num=True)
    assert [int(n[0]) for n in outs[0][2]] == [31, 34, 37]


@pytest.mark.parametrize("preceding, first, stop", [(False, 16, 30), (True, 15, 31)])
def test_file_list_seconds_round_as_dali(videos, tmp_path, preceding, first, stop):
    """file_list seconds to frames as DALI's reader rounds them (30 fps, "0.51 1.01"): the frames wholly inside the
    window, start * fps rounded up and end * fps down (16..29); with ``file_list_include_preceding_frame``, also
    the frames the window's ends cut, start down and end up (15..30)."""
    lst = tmp_path / "list.txt"
    lst.write_text(f"{videos['h264-mp4']} 0 0.51 1.01\n")
    p, outs = run_reader(batch_size=20, iterations=1, file_list=str(lst), sequence_length=1, enable_frame_num=True,
                         file_list_include_preceding_frame=preceding)
    assert p.epoch_size("Reader") == stop - first
    assert [int(n[0]) for n in outs[0][2]][:stop - first] == list(range(first, stop))


def test_pad_sequences_and_sharding(videos):
    files = [str(videos["h264-mp4"])]
    _, outs = run_reader(batch_size=5, filenames=files, sequence_length=16, step=16, pad_sequences=True,
                         enable_timestamps=True)
    video, _, ts = outs[0]
    assert codes(video[2][:8]) == list(range(32, 40))
    assert (video[2][8:] == 0).all() and (ts[2][8:] == -1).all()
    p0, o0 = run_reader(batch_size=2, filenames=files, sequence_length=2, step=2, num_shards=2, shard_id=1,
                        enable_frame_num=True)
    assert [int(x[0]) for x in o0[0][2]] == [20, 22]
    assert p0.reader_meta("Reader")["number_of_shards"] == 2


def test_resize_on_read(videos):
    _, outs = run_reader(batch_size=1, filenames=[str(videos["h264-mp4"])], sequence_length=2, resize_x=128,
                         resize_y=96)
    video = outs[0][0]
    assert video[0].shape == (2, 96, 128, 3)
    assert codes(video[0]) == [0, 1]
    _, outs = run_reader(batch_size=1, filenames=[str(videos["h264-mp4"])], sequence_length=2, resize_y=24,
                         dtype=types.FLOAT, normalized=True)
    video = outs[0][0]
    assert video[0].shape == (2, 24, 32, 3) and video[0].dtype == torch.float32 and float(video[0].max()) <= 1.0


def test_video_resize_reader(videos):
    @pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=3)
    def pipe():
        return fn.readers.video_resize(filenames=[str(videos["h264-mp4"])], sequence_length=3, resize_shorter=24,
                                       interp_type=types.INTERP_NN, enable_frame_num=True)

    video, label, num = pipe().run()
    assert video[1].shape == (3, 24, 32, 3) and int(num[1][0]) == 3
    # nearest-neighbour halving keeps the barcode blocks: scaled back up, they read as before
    assert codes(video[1].repeat_interleave(2, 1).repeat_interleave(2, 2)) == [3, 4, 5]


def test_audio_of_the_clip_window(video_dir):
    path = video_dir / "av.mkv"
    write_barcode_video(path, "libx264", num_frames=30, fps=10, audio="pcm_s16le", audio_rate=8000)
    _, outs = run_reader(batch_size=2, filenames=[str(path)], sequence_length=5, stride=2, step=10,
                         enable_audio=True, enable_frame_num=True)
    video, _, num, audio = outs[0]
    for i in range(2):
        start = int(num[i][0])
        # frames start .. start+8 at 10 fps: the window is [start/10, (start+9)/10) s
        first, count = start * 800, 9 * 800
        expected = (np.arange(first, first + count) % 32000 - 16000) / 32768.0
        assert audio[i].shape == (count, 1)
        np.testing.assert_allclose(audio[i][:, 0].numpy(), expected, atol=1e-6)


def test_reader_errors(tmp_path, videos):
    with pytest.raises(Exception, match="no video files found"):
        run_reader(file_root=str(tmp_path), sequence_length=2)
    bad = tmp_path / "bad.txt"
    bad.write_text("a.mp4 x\n")
    with pytest.raises(Exception, match=r"line 1 of .*bad.txt.* non-numeric label"):
        run_reader(file_list=str(bad), sequence_length=2)
    with pytest.raises(Exception, match="no file has 41 frames"):
        run_reader(filenames=[str(videos["h264-mp4"])], sequence_length=41)
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"\0" * 100)
    with pytest.raises(Exception, match="broken.mp4"):
        run_reader(filenames=[str(broken)], sequence_length=2)


@pytest.mark.cuda
def test_gpu_reader(gpu_videos):
    pytest.importorskip("PyNvVideoCodec")
    files = [str(gpu_videos["h264-mp4"]), str(gpu_videos["hevc-mkv"])]
    _, outs = run_reader(batch_size=4, device="gpu", filenames=files, sequence_length=8, stride=2, step=8,
                         enable_frame_num=True, resize_x=32, resize_y=24)
    video, label, num = outs[0]
    assert video[0].is_cuda and video[0].shape == (8, 24, 32, 3) and label[0].is_cuda
    _, outs = run_reader(batch_size=4, device="gpu", filenames=files, sequence_length=8, stride=2, step=8,
                         enable_frame_num=True)
    video, label, num = outs[0]
    for i in range(4):
        s = int(num[i][0])
        assert codes(video[i]) == list(range(s, s + 16, 2))
    assert isinstance(video[0], torch.Tensor)


def test_class_folders_and_checkpoint(videos, tmp_path):
    import shutil

    for cls, name in (("cats", "h264-mp4"), ("dogs", "vp9-webm")):
        (tmp_path / cls).mkdir()
        shutil.copy(videos[name], tmp_path / cls)

    @pipeline_def(batch_size=3, num_threads=2, device_id=None, seed=3, enable_checkpointing=True)
    def pipe():
        return fn.readers.video(file_root=str(tmp_path), sequence_length=2, step=5, random_shuffle=True,
                                initial_fill=4, enable_frame_num=True, name="Reader")

    p = pipe()
    first = p.run()
    state = p.checkpoint()
    second = p.run()
    for out in (first, second):  # sorted class folders are the labels
        for path, label in zip(out[0].source_info, out[1]):
            assert int(label[0]) == (0 if "/cats/" in path else 1), path
    restored = pipe(checkpoint=state)
    again = restored.run()
    assert [int(x[0]) for x in again[2]] == [int(x[0]) for x in second[2]]
    assert [int(x[0]) for x in again[1]] == [int(x[0]) for x in second[1]]


def _ready_workers(backend) -> list:
    """The pids of the backend's worker processes, once they are all ready (a forked worker's pid is known then)."""
    import time

    deadline = time.monotonic() + 30
    while not all(w.poll_ready() for w in backend._workers) and time.monotonic() < deadline:
        time.sleep(0.01)
    return [w.pid for w in backend._workers]


def test_cpu_reader_decodes_in_worker_processes_and_ends_them(videos, monkeypatch):
    """The CPU reader's PyAV work runs in worker processes (the default outside these tests), giving the same
    frames as in threads; closing the pipeline ends them."""
    import os

    files = [str(videos["h264-mp4"]), str(videos["hevc-mkv"])]
    kwargs = dict(batch_size=3, iterations=2, filenames=files, sequence_length=5, stride=2, step=7,
                  enable_frame_num=True)
    _, threads = run_reader(**kwargs)
    monkeypatch.setattr("sluice.backends.video.hybrid.CPU_PROCESSES", True)
    p, procs = run_reader(**kwargs)
    backend = p.executor.operator("Reader").backend
    from sluice.backends.video import cpu_worker

    # the fork server, the workers it forked
    pids = [backend._group[0].server_pid(cpu_worker.__file__)] + _ready_workers(backend)
    assert backend.cpu_processes and None not in pids and len(pids) > 1 and backend.last_stats["cpu"]["jobs"] > 0
    for (va, _, fa), (vb, _, fb) in zip(threads, procs):
        assert [int(f[0]) for f in fa] == [int(f[0]) for f in fb]
        for i in range(len(va)):
            assert torch.equal(va[i], vb[i]) and codes(vb[i]) == list(range(int(fb[i][0]), int(fb[i][0]) + 10, 2))
    p.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_cpu_reader_restarts_a_worker_killed_between_batches(videos, monkeypatch):
    """A decoder process killed between batches is started again and its request redone: the next batches come
    whole and right (issue 20)."""
    import os
    import signal
    import time

    monkeypatch.setattr("sluice.backends.video.hybrid.CPU_PROCESSES", True)
    files = [str(videos["h264-mp4"]), str(videos["hevc-mkv"])]
    p, outs = run_reader(batch_size=3, iterations=1, filenames=files, sequence_length=4, stride=2, step=5,
                         enable_frame_num=True)
    try:
        backend = p.executor.operator("Reader").backend
        pids = _ready_workers(backend)
        assert pids and None not in pids
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.0)
        for _ in range(4):
            video, _, frame_num = p.run()
            for i in range(len(video)):
                start = int(frame_num[i][0])
                assert codes(video[i]) == [start, start + 2, start + 4, start + 6]
        restarted = {w.pid for w in backend._workers if w.restarts}  # a worker given no job since keeps its dead one
        assert restarted and not set(pids) & restarted
    finally:
        p.close()


def test_the_next_batch_is_decoded_ahead_and_used(videos, monkeypatch):
    """Each run submits the batch after it to the backend before waiting for its own, and the next run uses that
    decoding (one submission a batch, not two); shuffled batches crossing epoch ends come out right. A reader
    sent to another place in its order (a checkpoint loaded into it) cancels the batch decoded ahead for the old
    place and decodes the right one."""
    from sluice.backends.video.hybrid import HybridBackend

    files = [str(videos["h264-mp4"]), str(videos["hevc-mkv"])]

    @pipeline_def(batch_size=3, num_threads=2, device_id=None, seed=5, exec_async=False)
    def pipe():
        return fn.readers.video(filenames=files, sequence_length=4, stride=3, step=9, random_shuffle=True,
                                initial_fill=3, enable_frame_num=True, name="Reader")

    submitted, cancelled = [], []
    submit = HybridBackend.submit_batch

    def counted(self, requests):
        pending = submit(self, requests)
        submitted.append(pending)
        cancel = pending.cancel
        pending.cancel = lambda: (cancelled.append(pending), cancel())
        return pending

    monkeypatch.setattr(HybridBackend, "submit_batch", counted)
    p = pipe()
    reader = p.executor.operator("Reader")
    runs = 2 * len(reader.samples) // 3 + 2  # past two epoch ends
    outs, orders = [], []
    for _ in range(runs):
        orders.append(reader.state_dict())
        outs.append(p.run())
        assert reader._ahead is not None and reader._ahead[0] == reader.peek_samples()
    assert len(submitted) == runs + 1 and not cancelled
    for video, _, num in outs:
        for i in range(len(video)):
            s = int(num[i][0])
            assert codes(video[i]) == list(range(s, s + 12, 3))
    reader.load_state_dict(orders[1])  # back to the second batch
    stale = submitted[-1]
    again = p.run()
    assert cancelled == [stale]
    assert [int(x[0]) for x in again[2]] == [int(x[0]) for x in outs[1][2]]
    for i in range(len(again[0])):
        assert torch.equal(again[0][i], outs[1][0][i])
    p.close()
    assert cancelled[-1] is submitted[-1]  # closing the pipeline cancels the batch decoded ahead


def test_relative_paths_reach_the_backend_resolved(videos, tmp_path, monkeypatch):
    """file_list entries (DALI: as written, relative to the working directory, not to the list's folder) and
    relative filenames are made absolute when the reader is built: the backend gets the same absolute paths on
    every device, whatever the working directory when it decodes (the GPU backend's CPU worker processes keep the
    folder they started in; here the process moves away after the build)."""
    import shutil

    from sluice.backends.video.pyav import PyAVBackend
    from sluice.ops.readers.video import VideoReader

    (tmp_path / "test_videos").mkdir()
    (tmp_path / "lists").mkdir()
    (tmp_path / "elsewhere").mkdir()
    for name in ("a", "b"):
        shutil.copy(videos["h264-mp4"], tmp_path / "test_videos" / f"{name}.mp4")
    (tmp_path / "lists" / "file_list.txt").write_text("./test_videos/a.mp4 0\ntest_videos/b.mp4 1\n")
    expected = [str(tmp_path / "test_videos" / f"{name}.mp4") for name in ("a", "b")]

    class Recorder:  # PyAV, noting the sources it is handed
        device = "cpu"

        def __init__(self):
            self.cpu, self.sources = PyAVBackend(), []

        def decode(self, source, index, frames):
            self.sources.append(source)
            return self.cpu.decode(source, index, frames)

    backends = []
    monkeypatch.setattr(VideoReader, "_backend", lambda self, spec: backends.append(Recorder()) or backends[-1])
    monkeypatch.chdir(tmp_path)
    for kwargs in ({"file_list": "lists/file_list.txt"}, {"filenames": ["./test_videos/a.mp4", "test_videos/b.mp4"],
                                                          "labels": [0, 1]}):
        @pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=3)
        def pipe():
            return fn.readers.video(name="Reader", sequence_length=4, step=40, **kwargs)

        p = pipe()
        p.build()
        monkeypatch.chdir(tmp_path / "elsewhere")
        video, label = p.run()
        monkeypatch.chdir(tmp_path)
        assert sorted(set(backends[-1].sources)) == expected
        assert video.source_info == expected and [int(x[0]) for x in label] == [0, 1]
        assert [codes(v) for v in video] == [[0, 1, 2, 3]] * 2


def test_worker_processes_get_absolute_paths(videos, tmp_path, monkeypatch):
    """A relative path handed to the hybrid backend opens the file the caller's working directory names, not the
    one its CPU worker processes started in (they outlive a pipeline: the GPU backend is the process's)."""
    import shutil
    import time

    from sluice.backends.video import prepare_clip, read_clips
    from sluice.backends.video.hybrid import HybridBackend

    (tmp_path / "started_here").mkdir()
    (tmp_path / "now_here").mkdir()
    shutil.copy(videos["h264-mp4"], tmp_path / "now_here" / "clip.mp4")
    monkeypatch.chdir(tmp_path / "started_here")
    backend = HybridBackend(sessions=0, cpu_workers=1, cpu_processes=True, output_device="cpu")
    try:
        backend.start_workers()
        deadline = time.monotonic() + 30
        while not all(w.poll_ready() for w in backend._workers) and time.monotonic() < deadline:
            time.sleep(0.01)
        monkeypatch.chdir(tmp_path / "now_here")
        clip = read_clips([prepare_clip("clip.mp4", frames=[3, 9])], backend)[0]
        assert codes(clip.frames) == [3, 9]
        assert backend._workers and not backend._workers[0].fresh  # decoded in the worker process
    finally:
        backend.close()
