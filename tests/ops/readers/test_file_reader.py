"""fn.readers.file: labels, file lists, sharding over epochs, shuffling, padding, and bad paths."""

import collections

import numpy as np
import pytest

import sluice
from sluice import fn
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
