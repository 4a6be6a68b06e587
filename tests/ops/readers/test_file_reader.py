"""fn.readers.file: labels, file lists, sharding over epochs, shuffling, padding, and bad paths."""

import collections

import numpy as np
import pytest

import sluice
from sluice import fn, native
from sluice.errors import ArgumentError, PipelineError


def make_tree(root, classes=3, per_class=5):
    for c in range(classes):
        d = root / f"class_{c}"
        d.mkdir(parents=True)
        for i in range(per_class):
            (d / f"img_{i}.jpg").write_bytes(np.int32(c * 100 + i).tobytes())
    return root


def value(sample):
    return int(np.frombuffer(sample.numpy().tobytes(), np.int32)[0])


def reader_pipe(batch_size=4, **kw):
    @sluice.pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, seed=7)
    def pipe():
        return fn.readers.file(name="Reader", **kw)

    return pipe()


def test_sorted_subfolders_are_labels(tmp_path):
    make_tree(tmp_path, 3, 2)
    (tmp_path / "class_1" / "notes.txt").write_text("skip me")
    p = reader_pipe(batch_size=6, file_root=str(tmp_path))
    data, labels = p.run()
    assert [value(s) for s in data] == [0, 1, 100, 101, 200, 201]
    assert labels.as_tensor().tolist() == [[0], [0], [1], [1], [2], [2]]
    assert labels.dtype.itemsize == 4 and data.source_info[2].endswith("class_1/img_0.jpg")
    assert p.epoch_size("Reader") == 6


def test_file_list_and_files(tmp_path):
    make_tree(tmp_path, 2, 2)
    lst = tmp_path / "list.txt"
    lst.write_text("class_1/img_1.jpg 5\nclass_0/img_0.jpg 9\n")
    data, labels = reader_pipe(batch_size=2, file_list=str(lst)).run()
    assert [value(s) for s in data] == [101, 0] and labels.as_tensor().flatten().tolist() == [5, 9]
    data, labels = reader_pipe(batch_size=2, file_root=str(tmp_path), files=["class_0/img_1.jpg", "class_1/img_0.jpg"],
                               labels=[3, 4]).run()
    assert [value(s) for s in data] == [1, 100] and labels.as_tensor().flatten().tolist() == [3, 4]


def _epochs(num_shards, n_epochs, batch_size, **kw):
    """Samples each shard yields per epoch, taking ceil(shard/bs) batches per epoch as an iterator would."""
    seen = [collections.Counter() for _ in range(n_epochs)]
    for shard in range(num_shards):
        p = reader_pipe(batch_size=batch_size, shard_id=shard, num_shards=num_shards, **kw)
        meta = p.reader_meta("Reader")
        for epoch in range(n_epochs):
            s = shard if meta["stick_to_shard"] else (shard + epoch) % num_shards
            n = meta["epoch_size"]
            size = (s + 1) * n // num_shards - s * n // num_shards  # real samples; padding is not counted
            taken = 0
            padded = meta["epoch_size_padded"] // num_shards if meta["pad_last_batch"] else size
            batches = -(-padded // batch_size)
            for _ in range(batches):
                data, _ = p.run()
                for sample in data:
                    if taken < size:
                        seen[epoch][value(sample)] += 1
                    taken += 1
            if not meta["pad_last_batch"] and size % batch_size:
                break  # without padding, batches cross epochs: only the first epoch is aligned
    return seen


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("stick", [False, True])
def test_sharding_each_sample_once_per_epoch(tmp_path, pad, stick):
    make_tree(tmp_path, 3, 5)  # 15 samples over 4 shards: 3, 4, 4, 4
    everything = {c * 100 + i for c in range(3) for i in range(5)}
    seen = _epochs(4, 3, 2, file_root=str(tmp_path), pad_last_batch=pad, stick_to_shard=stick)
    # Without padding a shard of odd size ends mid-batch, so only the first epoch is batch-aligned.
    for counter in seen if pad else seen[:1]:
        assert set(counter) == everything
        assert all(v == 1 for v in counter.values())


def test_shard_sizes_follow_dali(tmp_path):
    make_tree(tmp_path, 1, 10)
    sizes = []
    for shard in range(3):
        p = reader_pipe(batch_size=10, file_root=str(tmp_path), shard_id=shard, num_shards=3, stick_to_shard=True)
        data, _ = p.run()
        sizes.append(len({value(s) for s in data}))
    assert sizes == [3, 3, 4]  # floor((id+1)N/S) - floor(id N/S)


def test_pad_last_batch_repeats_last_sample(tmp_path):
    make_tree(tmp_path, 1, 5)
    p = reader_pipe(batch_size=2, file_root=str(tmp_path), pad_last_batch=True)
    got = [[value(s) for s in p.run()[0]] for _ in range(4)]
    assert got == [[0, 1], [2, 3], [4, 4], [0, 1]]
    p = reader_pipe(batch_size=2, file_root=str(tmp_path))
    got = [[value(s) for s in p.run()[0]] for _ in range(4)]
    assert got == [[0, 1], [2, 3], [4, 0], [1, 2]]


def test_shuffle_after_epoch_is_a_shared_permutation(tmp_path):
    make_tree(tmp_path, 2, 6)
    orders = []
    for shard in range(2):
        p = reader_pipe(batch_size=6, file_root=str(tmp_path), shuffle_after_epoch=True, shard_id=shard,
                        num_shards=2, stick_to_shard=False)
        orders.append([[value(s) for s in p.run()[0]] for _ in range(4)])
    # epoch e: shard 0 reads half (e % 2), shard 1 the other half of the same permutation
    for e in range(2):
        both = orders[0][e] + orders[1][e]
        assert sorted(both) == sorted({c * 100 + i for c in range(2) for i in range(6)})
    assert orders[0][0] != orders[0][2]  # a new permutation each epoch


def test_random_shuffle_is_seeded_and_complete(tmp_path):
    make_tree(tmp_path, 2, 8)
    a = [[value(s) for s in reader_pipe(8, file_root=str(tmp_path), random_shuffle=True, initial_fill=4).run()[0]]
         for _ in range(1)]
    p = reader_pipe(8, file_root=str(tmp_path), random_shuffle=True, initial_fill=4)
    epoch = [value(s) for _ in range(2) for s in p.run()[0]]
    assert sorted(epoch) == sorted(c * 100 + i for c in range(2) for i in range(8))
    assert epoch != sorted(epoch) and epoch[:8] == a[0]


@pytest.mark.parametrize("kw", [dict(), dict(random_shuffle=True, initial_fill=4), dict(shuffle_after_epoch=True),
                                dict(num_shards=2, shard_id=1, pad_last_batch=True)])
def test_peeking_at_the_next_batch_leaves_the_order_alone(kw):
    """A reader that starts the next batch's work ahead (readers.video) asks for it with peek_indices: the same
    samples next_indices then returns, across epoch ends, with or without shuffling."""
    from sluice.ops.readers._sharding import SampleOrder, ShardingArgs

    args = dict(dict(random_shuffle=False, initial_fill=1024, shuffle_after_epoch=False, num_shards=1, shard_id=0,
                     stick_to_shard=False, pad_last_batch=False), **kw)
    order = SampleOrder(11, ShardingArgs.from_args("fn.readers.file", args, 4, 5))
    taken = []
    for _ in range(9):  # three epochs and more, batches crossing their ends
        peeked = order.peek_indices(4)
        assert order.peek_indices(4) == peeked
        got = order.next_indices(4)
        assert got == peeked
        taken += got
    assert {e for _, e in taken} >= {0, 1, 2}


def test_bad_paths_are_named(tmp_path):
    with pytest.raises(ArgumentError, match=r"file_root '.*nope' does not exist"):
        reader_pipe(file_root=str(tmp_path / "nope")).build()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArgumentError, match="no files found"):
        reader_pipe(file_root=str(tmp_path / "empty")).build()
    with pytest.raises(PipelineError, match=r"cannot read '.*missing.jpg'"):
        reader_pipe(batch_size=1, files=[str(tmp_path / "missing.jpg")]).run()
    for k in range(40):  # one unreadable file among many: the error names its sample and file
        (tmp_path / f"f{k}.bin").write_bytes(bytes([k]))
    files = [str(tmp_path / f"f{k}.bin") for k in range(40)]
    files[37] = str(tmp_path / "gone.bin")
    with pytest.raises(PipelineError, match=r"on sample 37 \(file '.*gone.bin'\).*cannot read"):
        reader_pipe(batch_size=40, files=files).run()
    with pytest.raises(ArgumentError, match="shard_id must be in"):
        reader_pipe(files=["a"], shard_id=3, num_shards=2).build()


def test_one_buffer_reads_a_batch_back_to_back(tmp_path, caplog):
    """For a GPU consumer the batch is read into one (page-locked) buffer: the same bytes, the samples lie back to
    back in order, and contiguous_bytes finds that stretch; samples read apart, or out of order, have none."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    import sluice.ops.readers.file as file_mod
    from sluice.ops.readers.file import contiguous_bytes, read_files

    rng = np.random.default_rng(0)
    sizes = [0, 1, 700, 5, 0, 4096, 33] * 7
    paths = []
    for k, n in enumerate(sizes):
        (tmp_path / f"f{k}.bin").write_bytes(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        paths.append(str(tmp_path / f"f{k}.bin"))
    with ThreadPoolExecutor(3) as pool:
        plain = read_files(paths, pool)
        one = read_files(paths, pool, one_buffer=True)
    assert [t.numpy().tobytes() for t in one] == [t.numpy().tobytes() for t in plain]
    assert [t.numel() for t in one] == sizes
    region = contiguous_bytes(one)
    assert region is not None and region.numpy().tobytes() == b"".join(t.numpy().tobytes() for t in plain)
    assert contiguous_bytes(one[3:9]).numpy().tobytes() == b"".join(t.numpy().tobytes() for t in plain[3:9])
    assert contiguous_bytes(plain[1:4]) is None          # separate allocations
    assert contiguous_bytes([one[3], one[2]]) is None    # out of order
    assert contiguous_bytes([one[2], one[5]]) is None    # a gap
    assert contiguous_bytes([]) is None
    whole = torch.arange(64, dtype=torch.uint8)
    assert contiguous_bytes([whole[:8], whole[8:40:2]]) is None      # a strided sample
    assert contiguous_bytes([whole[:8], whole[8:8], whole[8:20]]).tolist() == list(range(20))  # an empty one
    assert contiguous_bytes([whole[60:], torch.arange(4, dtype=torch.uint8)]) is None  # past the first storage
    # pin=True without a usable GPU: ordinary memory, a warning once, the same bytes.
    file_mod._pinning_failed = False
    if not torch.cuda.is_available():
        with caplog.at_level("WARNING"):
            pinned = read_files(paths, None, pin=True, device_id=0)
        assert [t.numpy().tobytes() for t in pinned] == [t.numpy().tobytes() for t in plain]
        assert "cannot page-lock" in caplog.text
        assert not file_mod.is_page_locked_buffer(contiguous_bytes(pinned))
        file_mod._pinning_failed = False
    else:
        pinned = read_files(paths, None, pin=True, device_id=0)
        region = contiguous_bytes(pinned)
        assert region.is_pinned() and file_mod.is_page_locked_buffer(region)
        assert not file_mod.is_page_locked_buffer(contiguous_bytes(one))


def test_one_buffer_names_a_missing_file_and_closes_the_rest(tmp_path):
    """A missing file among many fails the batch naming its sample and file; the files opened before are closed."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from sluice.errors import SampleError
    from sluice.ops.readers.file import read_files

    paths = []
    for k in range(50):
        (tmp_path / f"f{k}.bin").write_bytes(bytes([k]) * (k + 1))
        paths.append(str(tmp_path / f"f{k}.bin"))
    paths[37] = str(tmp_path / "gone.bin")
    fd_dir = "/proc/self/fd"
    before = len(os.listdir(fd_dir)) if os.path.isdir(fd_dir) else None
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            with pytest.raises(SampleError, match=r"cannot read '.*gone.bin'") as err:
                read_files(paths, pool, one_buffer=True)
            assert (err.value.index, err.value.source) == (37, paths[37])
    if before is not None:
        assert len(os.listdir(fd_dir)) == before


@pytest.mark.cuda
def test_gpu_pipeline_reads_its_batches_into_page_locked_memory(tmp_path):
    """A reader feeding GPU operators reads each batch into one page-locked buffer; the mixed decoders take the
    fast paths on it (the audio rows copied straight from it, the image scan check copying it whole) and give
    what the CPU decoders give."""
    import io

    import simplejpeg
    import soundfile
    import torch

    from sluice import pipeline_def, types

    rng = np.random.default_rng(3)
    wavs, jpgs = [], []
    for k in range(6):
        buf = io.BytesIO()
        soundfile.write(buf, (rng.standard_normal(800 + 37 * k) * 0.2).astype(np.float32), 8000, format="WAV",
                        subtype="PCM_16")
        (tmp_path / f"a{k}.wav").write_bytes(buf.getvalue())
        wavs.append(str(tmp_path / f"a{k}.wav"))
        yy, xx = np.mgrid[0:48 + 8 * k, 0:64]
        img = np.stack([xx * 3, yy * 2, (xx + yy + 20 * k) % 256], axis=2).clip(0, 255).astype(np.uint8)
        (tmp_path / f"i{k}.jpg").write_bytes(simplejpeg.encode_jpeg(img, quality=90))
        jpgs.append(str(tmp_path / f"i{k}.jpg"))

    @pipeline_def(batch_size=6, num_threads=2, device_id=0, seed=1)
    def pipe():
        a, _ = fn.readers.file(files=wavs, name="Audio")
        i, _ = fn.readers.file(files=jpgs, name="Images")
        mixed_audio, _ = fn.decoders.audio(a, device="mixed", dtype=types.FLOAT)
        cpu_audio, _ = fn.decoders.audio(a, dtype=types.FLOAT)
        return (a.gpu(), mixed_audio, cpu_audio.gpu(), fn.decoders.image(i, device="mixed"),
                fn.decoders.image(i).gpu())

    p = pipe()
    p.build()
    assert p._executor.operator("Audio").pin_outputs and p._executor.operator("Images").pin_outputs
    for _ in range(2):
        raw, mixed_audio, cpu_audio, mixed_img, cpu_img = p.run()
        for k in range(6):
            assert raw[k].cpu().numpy().tobytes() == open(wavs[k], "rb").read()
            torch.testing.assert_close(mixed_audio[k], cpu_audio[k], rtol=0, atol=0)
            diff = (mixed_img[k].int() - cpu_img[k].int()).abs()
            assert diff.float().mean() < 3.0   # nvJPEG vs libjpeg-turbo on a smooth picture


def test_a_file_that_grew_since_its_size_was_taken_is_read_whole(tmp_path, monkeypatch):
    """A file written to between the size query and the read is not cut at its old size (no silent loss): each
    read asks for one spare byte, and a file found longer is read again whole, in both reading paths."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from sluice.ops.readers.file import read_file, read_files

    data = [bytes(range(256)) * 3, b"12345", bytes(range(256)) * 40, b""]
    paths = []
    for k, d in enumerate(data):
        (tmp_path / f"g{k}.bin").write_bytes(d)
        paths.append(str(tmp_path / f"g{k}.bin"))
    real = os.fstat

    def older(fd):  # the sizes the files had 10 bytes ago
        st = real(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid,
                               max(0, st.st_size - 10), st.st_atime, st.st_mtime, st.st_ctime))

    monkeypatch.setattr(os, "fstat", older)
    assert read_file(paths[0]).numpy().tobytes() == data[0]
    assert read_file(paths[1]).numpy().tobytes() == data[1]     # "empty" when its size was taken
    with ThreadPoolExecutor(2) as pool:
        for one_buffer in (False, True):
            got = read_files(paths, pool, one_buffer=one_buffer)
            assert [t.numpy().tobytes() for t in got] == data, one_buffer


@pytest.mark.skipif(not native.available(), reason="the compiled core (its block cache) is not built")
def test_a_cpu_batch_buffer_is_reused_once_the_batch_is_gone(tmp_path):
    """A CPU pipeline's batch bytes come from the core's block cache: once no view of a batch is left its block
    serves the next one, instead of fresh memory page-faulted every batch (benchmarks/audio_cpu_decode.py)."""
    from sluice.ops.readers.file import _read_into_one_buffer

    paths = []
    for i in range(4):
        paths.append(str(tmp_path / f"{i}.bin"))
        with open(paths[-1], "wb") as f:
            f.write(bytes([i]) * (600 << 10))
    first = _read_into_one_buffer(paths, None, pin=False, device_id=None)
    where = first[0].data_ptr()
    kept = first[2]
    del first
    second = _read_into_one_buffer(paths, None, pin=False, device_id=None)
    assert second[0].data_ptr() != where  # a sample of the first batch is still held
    assert kept.unique().tolist() == [2] and [s.unique().tolist() for s in second] == [[0], [1], [2], [3]]
    blocks = {where, second[0].data_ptr()}
    del kept, second
    third = _read_into_one_buffer(paths, None, pin=False, device_id=None)
    assert third[0].data_ptr() in blocks and [s.unique().tolist() for s in third] == [[0], [1], [2], [3]]
