"""A clip's cost depends on the clip, not on the video's length (issue 24): nothing per sample reads, hashes,
copies or re-parses the whole video when the same encoded bytes are fed again."""

from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np
import pytest

from sluice import fn, pipeline_def, types
from sluice.backends.video import index as index_mod
from sluice.backends.video import prepare_clip, read_clips
from sluice.backends.video.barcode import read_barcode, write_barcode_video
from sluice.backends.video.pyav import PyAVBackend
from sluice.ops.external_source import sample_tensor


def codes(sample) -> list[int]:
    return [read_barcode(np.asarray(f)) for f in sample]


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """A video of this module only: calls are counted by content, and a thread of an earlier test's pipeline,
    still prefetching, may hash the session's videos meanwhile."""
    path = tmp_path_factory.mktemp("long") / "own.mp4"
    write_barcode_video(path, num_frames=37)  # not the session videos' 40: other bytes
    return {"h264-mp4": path}


@pytest.fixture
def counted(monkeypatch, own):
    """Counts of full-content hashes (``cache_key``) of this module's video and of containers opened on it, from
    empty in-memory indexes: an earlier test's buffer of the same bytes, freed, may have left its index under the
    address a new buffer gets, which is then found without a hash."""
    monkeypatch.setattr(index_mod, "_memory", OrderedDict())
    monkeypatch.setattr(index_mod, "_content_keys", OrderedDict())
    raw = own["h264-mp4"].read_bytes()
    counts = {"hashed": 0, "opened": 0}
    key, opener = index_mod.cache_key, index_mod.open_container

    def ours(source) -> bool:
        return not isinstance(source, (str, os.PathLike)) and bytes(index_mod.as_bytes(source)) == raw

    def cache_key(source):
        counts["hashed"] += ours(source)
        return key(source)

    def open_container(source):
        counts["opened"] += ours(source)
        return opener(source)

    monkeypatch.setattr(index_mod, "cache_key", cache_key)
    monkeypatch.setattr(index_mod, "open_container", open_container)
    return counts


def test_same_buffer_found_without_hashing_it_again(own, counted):
    data = np.frombuffer(own["h264-mp4"].read_bytes(), np.uint8)
    first = index_mod.get_index(data)
    assert counted["hashed"] == 1
    for _ in range(3):
        assert index_mod.get_index(data) is first
    assert counted["hashed"] == 1
    # another buffer with the same content: hashed once, same index
    other = data.copy()
    assert index_mod.get_index(other) is first and counted["hashed"] == 2


def test_buffer_key_is_sampled_and_sees_changes(monkeypatch):
    monkeypatch.setattr(index_mod, "SAMPLED_HASH_ABOVE", 4096)
    monkeypatch.setattr(index_mod, "_SAMPLE_EDGE", 512)
    monkeypatch.setattr(index_mod, "_SAMPLE_BLOCK", 64)
    rng = np.random.default_rng(0)
    buf = rng.integers(0, 256, 100_000, dtype=np.uint8)
    key = index_mod.buffer_key(buf)
    assert index_mod.buffer_key(buf) == key
    assert index_mod.buffer_key(buf.copy()) != key  # another address
    buf[-10] ^= 1  # the tail (an mp4's moov when it is at the end)
    assert index_mod.buffer_key(buf) != key
    buf[-10] ^= 1
    buf[3] ^= 1  # the head
    assert index_mod.buffer_key(buf) != key
    assert index_mod.buffer_key(buf[:50_000]) != index_mod.buffer_key(buf)  # the length


def test_container_on_bytes_opened_once_and_frames_right(own, counted):
    data = np.frombuffer(own["h264-mp4"].read_bytes(), np.uint8)
    backend = PyAVBackend(threads=1)
    opened = []
    for frames in ([3, 17], [30, 2], [36]):
        clip = read_clips([prepare_clip(data, frames=frames)], backend)[0]
        assert codes(clip.frames) == frames
        opened.append(counted["opened"])
    assert opened[0] <= 2 and opened[-1] == opened[0]  # (the index, then) one container reused by every request


def test_buffer_reader_reads_and_seeks_without_copying_whole(videos):
    raw = videos["h264-mp4"].read_bytes()
    reader = index_mod.BufferReader(np.frombuffer(raw, np.uint8))
    assert reader.read(8) == raw[:8] and reader.tell() == 8
    assert reader.seek(-4, 2) == len(raw) - 4 and reader.read() == raw[-4:] and reader.read(5) == b""
    assert reader.seek(2) == 2 and reader.read(3) == raw[2:5]


def test_readonly_array_of_bytes_copied_once_for_its_life():
    raw = bytes(range(256)) * 10
    frozen = np.frombuffer(raw, np.uint8)
    t = sample_tensor(frozen)
    assert sample_tensor(frozen) is t and np.array_equal(t.numpy(), frozen)
    writable = np.arange(10, dtype=np.uint8)
    assert sample_tensor(writable).data_ptr() == writable.ctypes.data  # shared, as ever
    view = writable.view()
    view.flags.writeable = False  # read-only, but its memory may change: copied each time
    assert sample_tensor(view) is not sample_tensor(view)


def test_readonly_copies_kept_within_a_budget(monkeypatch):
    from sluice.ops import external_source as es

    monkeypatch.setattr(es, "FROZEN_COPIES_BYTES", 2500)
    arrays = [np.frombuffer(bytes([k]) * 1000, np.uint8) for k in range(4)]
    first = [sample_tensor(a) for a in arrays]
    assert sample_tensor(arrays[3]) is first[3] and sample_tensor(arrays[0]) is not first[0]  # the oldest went
    assert es._frozen_bytes <= 2500
    del arrays, first
    assert es._frozen_bytes == 0 and not es._FROZEN_COPIES


def test_external_source_feeding_one_file_every_iteration(own, counted):
    data = np.frombuffer(own["h264-mp4"].read_bytes(), np.uint8)  # read-only, as the DALI programs make it
    want = [[0, 10, 20], [5, 6, 36], [12, 1, 30]]

    @pipeline_def(batch_size=3, num_threads=2, device_id=None, prefetch_queue_depth=1)
    def pipe():
        enc = fn.external_source(name="enc", dtype=types.UINT8, ndim=1, no_copy=True)
        fr = fn.external_source(name="fr", dtype=types.INT32, ndim=1)
        return fn.decoders.video(enc, device="cpu", frames=fr)

    p = pipe()
    p.build()
    try:
        for _ in range(3):
            p.feed_input("enc", [data] * 3)
            p.feed_input("fr", [np.array(w, np.int32) for w in want])
            (out,) = p.run()
            assert [codes(out[i]) for i in range(3)] == want
    finally:
        p.close()
    assert counted["hashed"] == 1  # the first sample of the first batch; found by its buffer since
    assert counted["opened"] <= 1 + 2  # the index, then one container per pipeline thread


def test_index_built_once_when_every_sample_asks_at_once(videos, monkeypatch, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    data = np.frombuffer(videos["h264-mp4"].read_bytes(), np.uint8)
    index_mod._memory.clear()
    monkeypatch.setenv("SLUICE_VIDEO_INDEX_DIR", str(tmp_path))
    builds, build = [], index_mod.build_index
    monkeypatch.setattr(index_mod, "build_index", lambda *a, **k: builds.append(1) or build(*a, **k))
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: index_mod.get_index(data), range(16)))
    assert len(builds) == 1 and all(g is got[0] for g in got)


def test_containers_a_thread_kept_are_closed_when_it_ends(videos):
    """A thread's cached containers are closed when the thread ends, not left to a garbage collection (a
    container over bytes is in a reference cycle): one collected in a forked child (a DataLoader worker) would wait
    there forever for FFmpeg decoder threads that fork did not copy."""
    import threading

    data = np.fromfile(videos["h264-mp4"], dtype=np.uint8)
    kept = []

    def read():
        with index_mod.reusable_container(data, "test") as container:
            container.seek(0)
            kept.append(container)

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    with pytest.raises(AssertionError, match="not open"):
        kept[0].seek(0)  # closed, with no garbage collection
