"""The pipeline's runtime (issue 37): every thread and codec session a pipeline runs on is the runtime's, and
``close()`` / ``del pipe`` release them all. Threads are compared by listing ``threading.enumerate()`` before the
build and after the close, as a user checking for leaks would."""

from __future__ import annotations

import gc
import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from PIL import Image

import sluice
from sluice import fn
from sluice.runtime import Runtime, runtime_of


# ---- the runtime object -------------------------------------------------------------------------------------------
def test_each_caller_gets_its_own_pool_of_the_size_it_asks_for():
    rt = Runtime(num_threads=3)
    a, b = rt.thread_pool("decode-ahead", 2), rt.thread_pool("decode-ahead", 2)
    assert a is not b and isinstance(a, ThreadPoolExecutor)
    names = set()
    barrier = threading.Barrier(3)

    def work():
        names.add(threading.current_thread().name)
        barrier.wait(timeout=10)  # both threads of the pool run at once: the pool has the size asked for

    futures = [a.submit(work) for _ in range(2)]
    barrier.wait(timeout=10)
    [f.result() for f in futures]
    assert len(names) == 2 and all(n.startswith("sluice-decode-ahead") for n in names)
    assert rt.cpu_pool is rt.cpu_pool and rt.cpu_pool.threads == 3
    assert rt.made["pools"] == 3
    threads = rt.threads()
    assert threads and all(rt.owns(t) for t in threads) and not rt.owns()
    rt.close()
    assert not any(t.is_alive() for t in threads)
    with pytest.raises(RuntimeError, match="closed"):
        rt.thread_pool("late", 1)


def test_one_thread_means_no_cpu_pool():
    rt = Runtime(num_threads=1)
    assert rt.cpu_pool is None
    rt.close()


class _Session:
    def __init__(self, log: list, name: str):
        self.log, self.name = log, name
        log.append(("open", name))

    def close(self):
        self.log.append(("close", self.name))


def test_sessions_open_once_lazily_and_close_latest_first():
    log: list = []
    rt = Runtime()
    assert log == []
    a = rt.session("a", lambda: _Session(log, "a"))
    assert rt.session("a", lambda: _Session(log, "again")) is a
    rt.session("b", lambda: _Session(log, "b"))
    rt.session("c", lambda: object(), close=lambda s: log.append(("close", "c")))
    rt.close()
    assert log == [("open", "a"), ("open", "b"), ("close", "c"), ("close", "b"), ("close", "a")]
    rt.close()  # again: nothing
    assert log[-1] == ("close", "a") and len(log) == 5


def test_a_session_opening_holds_up_no_pool():
    """A session takes seconds to open (nvImageCodec's decoders); meanwhile the pools' new threads start."""
    rt = Runtime(num_threads=2)
    opening, release = threading.Event(), threading.Event()

    def slow_open():
        opening.set()
        release.wait(30)
        return object()

    opener = threading.Thread(target=rt.session, args=("slow", slow_open))
    opener.start()
    assert opening.wait(10)
    assert rt.cpu_pool.submit(lambda: 7).result(timeout=10) == 7  # a new pool thread, while the session opens
    release.set()
    opener.join(10)
    assert "slow" in rt.sessions()
    rt.close()


def test_close_joins_service_threads_and_a_failing_session_does_not_stop_it():
    rt = Runtime()
    stop = threading.Event()
    t = rt.start_thread("test-service", stop.wait, 30)
    assert t.name == "sluice-test-service" and t.is_alive()

    class Broken:
        def close(self):
            stop.set()
            raise ValueError("boom")

    rt.session("broken", Broken)
    rt.close()
    assert not t.is_alive() and rt.closed


def test_two_runtimes_share_nothing():
    a, b = Runtime(num_threads=2), Runtime(num_threads=2)
    assert a.cpu_pool is not b.cpu_pool
    assert a.session("nvdec", object) is not b.session("nvdec", object)
    a.close()
    b.cpu_pool.submit(lambda: None).result()  # b still works
    b.close()


def test_a_runtime_without_its_gpu_makes_no_stream():
    """Runtime.stream: refused, with what to do, on a CPU-only runtime, for another GPU's caller, and once closed
    (all checked before CUDA is touched)."""
    with pytest.raises(RuntimeError, match="no GPU .*device_id"):
        Runtime().stream("copy")
    rt = Runtime(device_id=0)
    with pytest.raises(RuntimeError, match="on cuda:0: .* for cuda:1"):
        rt.stream("copy", device=torch.device("cuda", 1))
    rt.close()
    with pytest.raises(RuntimeError, match="closed"):
        rt.stream("copy")
    assert rt.streams() == {}


@pytest.mark.cuda
def test_each_runtime_has_its_own_streams_one_per_purpose():
    a, b = Runtime(device_id=0, name="a"), Runtime(device_id=0, name="b")
    ahead = a.stream("ahead")
    assert a.stream("ahead") is ahead and a.stream("ahead", device=torch.device("cuda", 0)) is ahead
    assert a.stream("scan", priority=-1) is not ahead and a.made["streams"] == 2
    assert b.stream("ahead") is not ahead and ahead.device == torch.device("cuda", 0)
    assert a.stream("scan", priority=-1).priority < ahead.priority  # high priority, as asked
    with pytest.raises(ValueError, match="priority"):
        a.stream("scan")
    a.close()
    assert a.streams() == {}
    with pytest.raises(RuntimeError, match="closed"):
        a.stream("ahead")
    with torch.cuda.stream(b.stream("ahead")):  # the other runtime's still work
        x = torch.ones(4, device="cuda:0") * 2
    b.stream("ahead").synchronize()
    assert x.sum().item() == 8
    b.close()


def test_a_collected_runtime_releases_its_pools():
    rt = Runtime(num_threads=2)
    pool = rt.thread_pool("gc", 1)
    pool.submit(lambda: None).result()
    threads = rt.threads()
    del rt, pool
    gc.collect()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads)


def test_runtime_of_a_spec_outside_a_pipeline():
    from types import SimpleNamespace

    spec = SimpleNamespace(num_threads=2, device_id=None)
    rt = runtime_of(spec)
    assert runtime_of(spec) is rt and rt.num_threads == 2
    mine = Runtime()
    assert runtime_of(SimpleNamespace(runtime=mine)) is mine
    rt.close()
    mine.close()


# ---- pipelines ----------------------------------------------------------------------------------------------------
def _new_threads(before: set) -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t not in before and t.is_alive())


def _settled(before: set, seconds: float = 10.0) -> list[str]:
    deadline = time.monotonic() + seconds
    while _new_threads(before) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _new_threads(before)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Images (JPEG and PNG) in two class folders, and, where PyAV is installed, two small videos."""
    root = tmp_path_factory.mktemp("runtime_data")
    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (root / "images" / label).mkdir(parents=True)
        for i in range(6):
            img = Image.fromarray(rng.integers(0, 255, (24 + i, 32, 3), np.uint8))
            buf = io.BytesIO()
            img.save(buf, "JPEG" if i % 2 else "PNG")
            (root / "images" / label / f"{i}.{'jpg' if i % 2 else 'png'}").write_bytes(buf.getvalue())
    videos = []
    try:
        import av  # noqa: F401

        from sluice.backends.video.barcode import write_barcode_video
    except ImportError:
        pass
    else:
        for i in range(2):
            path = root / f"v{i}.mp4"
            write_barcode_video(path, "libx264", num_frames=24, width=160, height=144)  # NVDEC takes this size
            videos.append(str(path))
    return root, videos


def _pipeline(root, videos, seed: int):
    @sluice.pipeline_def(batch_size=4, num_threads=3, device_id=None, seed=seed, prefetch_queue_depth=2)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=str(root / "images"), random_shuffle=True)
        images = fn.decoders.image(jpegs, device="cpu")
        images = fn.resize(images, resize_x=16, resize_y=16)
        if not videos:
            return images, labels
        clips, vlabels = fn.readers.video(filenames=videos, sequence_length=4, stride=2, random_shuffle=True)
        return images, labels, clips, vlabels

    return pipe()


@pytest.fixture
def video_threads(monkeypatch, tmp_path):
    # the CPU video reader's jobs in the hybrid backend's threads (the threads are what this file is about; its
    # worker processes are tests/pipeline/test_process_lifetime.py's)
    monkeypatch.setattr("sluice.backends.video.hybrid.CPU_PROCESSES", False)
    monkeypatch.setenv("SLUICE_VIDEO_INDEX_DIR", str(tmp_path / "video_index"))


def _run(pipe, n: int = 3) -> None:
    for _ in range(n):
        out = pipe.run()
        assert len(out[0]) == 4 and out[0][0].shape == (16, 16, 3)
        if len(out) > 2:
            assert tuple(out[2][0].shape) == (4, 144, 160, 3)


def test_close_leaves_no_thread_and_the_next_pipeline_works(data, video_threads):
    root, videos = data
    before = set(threading.enumerate())
    pipe = _pipeline(root, videos, 1)
    pipe.build()
    rt = pipe.executor.runtime
    _run(pipe)
    assert rt.made["threads"] >= 2  # the stage threads, the CPU pool's
    assert {name.split("_")[0] for name in _new_threads(before)} >= {"sluice-cpu", "sluice-video-cpu"}
    pipe.close()
    assert rt.closed and _new_threads(before) == []  # at once: close() joins them
    again = _pipeline(root, videos, 1)  # the next pipeline works after close()
    _run(again, 2)
    again.close()
    assert _new_threads(before) == []


def test_train_and_val_alive_together_then_closed(data, video_threads):
    root, videos = data
    before = set(threading.enumerate())
    train, val = _pipeline(root, videos, 1), _pipeline(root, videos, 2)
    train.build()
    val.build()
    assert train.executor.runtime is not val.executor.runtime
    assert train.executor.pool is not val.executor.pool
    for _ in range(2):
        _run(train, 1)
        _run(val, 1)
    train.close()
    _run(val, 1)  # val untouched by train's close
    assert not val.executor.runtime.closed
    val.close()
    assert _new_threads(before) == []


def test_a_dropped_pipeline_leaves_no_thread(data, video_threads):
    root, videos = data
    before = set(threading.enumerate())
    pipe = _pipeline(root, videos, 3)
    _run(pipe, 2)
    del pipe
    gc.collect()
    assert _settled(before) == []


@pytest.mark.cuda
def test_gpu_pipeline_close_leaves_no_thread_and_memory(data):
    """Mixed image decoding (nvImageCodec's decoders and the decoder's GPU-path and decode-ahead pools, opened
    through the runtime) and a GPU video reader (NVDEC and the hybrid backend, per pipeline): nothing is left after
    close(), and a train and a val pipeline share no session."""

    root, videos = data

    def build(seed):
        @sluice.pipeline_def(batch_size=4, num_threads=3, device_id=0, seed=seed)
        def pipe():
            jpegs, labels = fn.readers.file(file_root=str(root / "images"), random_shuffle=True)
            images = fn.decoders.image(jpegs, device="mixed")
            outs = [fn.resize(images, resize_x=16, resize_y=16), labels]
            if videos:
                clips, _ = fn.readers.video(device="gpu", filenames=videos, sequence_length=4, stride=2)
                outs.append(clips)
            return tuple(outs)

        return pipe()

    torch.cuda.synchronize()
    allocated = torch.cuda.memory_allocated(0)
    before = set(threading.enumerate())
    train, val = build(1), build(2)
    for _ in range(3):
        for pipe in (train, val):
            out = pipe.run()
            assert out[0][0].is_cuda
    del pipe
    sessions = [set(map(id, x.executor.runtime.sessions().values())) for x in (train, val)]
    assert sessions[0] and not sessions[0] & sessions[1]
    keys = set(train.executor.runtime.sessions())
    assert any(k[0] == "image decoder" for k in keys)
    if videos:
        assert {("nvdec", 0), ("video hybrid", 0)} <= keys
    train.close()
    val.run()
    val.close()
    assert _new_threads(before) == []
    del train, val, out
    gc.collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated(0) - allocated < 64 << 20


def test_a_pipeline_that_fails_to_build_leaves_no_thread(data, video_threads, tmp_path):
    root, videos = data
    if not videos:
        pytest.skip("needs PyAV")
    before = set(threading.enumerate())

    @sluice.pipeline_def(batch_size=2, num_threads=3, device_id=None, seed=0)
    def pipe():
        clips, _ = fn.readers.video(filenames=videos, sequence_length=2)  # indexes its files on the CPU pool
        missing, _ = fn.readers.file(file_root=str(tmp_path / "missing"))
        return clips, missing

    p = pipe()
    with pytest.raises(Exception, match="missing") as failure:
        p.build()
    assert _new_threads(before) == []  # at once, not when the failure (whose frames hold the executor) is dropped
    del failure
