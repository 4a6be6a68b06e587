"""sluice.torch iterators: DALI's documented epoch table, shards over several epochs, auto_reset, len(), reset,
errors. Samples are tiny files whose single byte is their number (1..7), so every batch shows which samples it
holds; the expected values are DALI's documented table (nvidia.dali.plugin.base_iterator docstring)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from sluice import fn, pipeline_def
from sluice.errors import ArgumentError, PipelineError
from sluice.torch import (ClassificationIterator, DALIClassificationIterator, DALIGenericIterator, Iterator,
                          LastBatchPolicy)

FILL, DROP, PARTIAL = LastBatchPolicy.FILL, LastBatchPolicy.DROP, LastBatchPolicy.PARTIAL


@pytest.fixture
def seven_files(seven):
    return seven


def file_pipe(files, pad, batch_size=2, shard_id=0, num_shards=1, stick_to_shard=False, **kw):
    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=3, **kw)
    def pipe():
        data, label = fn.readers.file(files=files, pad_last_batch=pad, shard_id=shard_id, num_shards=num_shards,
                                      stick_to_shard=stick_to_shard, name="Reader")
        return data, label

    return pipe()


def values(batch, key="data"):
    return batch[key].flatten().tolist()


def one_epoch(it, key="data"):
    return [values(b[0], key) for b in it]


# DALI's table: policy, padded -> (last batch, first batch of the next epoch)
TABLE = [
    (PARTIAL, True, [7], [1, 2]),
    (PARTIAL, False, [7], [2, 3]),
    (FILL, True, [7, 7], [1, 2]),
    (FILL, False, [7, 1], [2, 3]),
    (DROP, True, [5, 6], [1, 2]),
    (DROP, False, [5, 6], [2, 3]),
]


@pytest.mark.parametrize("policy,padded,last,next_first", TABLE)
def test_dali_table_reader_name(seven_files, policy, padded, last, next_first):
    it = DALIGenericIterator(file_pipe(seven_files, padded), ["data", "label"], reader_name="Reader",
                             last_batch_policy=policy)
    epoch = one_epoch(it)
    assert epoch[-1] == last
    assert epoch[:3] == [[1, 2], [3, 4], [5, 6]]
    assert len(epoch) == (3 if policy == DROP else 4)
    it.reset()
    assert values(next(it)[0]) == next_first


@pytest.mark.parametrize("policy,padded,last,next_first", TABLE)
def test_dali_table_size(seven_files, policy, padded, last, next_first):
    """The same table with an explicit size (and last_batch_padded matching the reader)."""
    with pytest.warns(UserWarning, match="reader_name"):
        it = DALIGenericIterator(file_pipe(seven_files, padded), ["data", "label"], size=7,
                                 last_batch_policy=policy, last_batch_padded=padded)
    epoch = one_epoch(it)
    assert epoch[-1] == last
    it.reset()
    assert values(next(it)[0]) == next_first


def stream_source(padded):
    """An external_source giving the same endless stream a reader gives (padded: 1..7,7 repeated)."""
    data = ([1, 2, 3, 4, 5, 6, 7, 7] if padded else [1, 2, 3, 4, 5, 6, 7])

    def source(info):
        return np.array([data[(info.iteration * 2 + k) % len(data)] for k in range(2)], dtype=np.uint8)

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=3)
    def pipe():
        return fn.external_source(source=source, batch_info=True)

    return pipe()


@pytest.mark.parametrize("policy,padded,last,next_first", TABLE)
def test_dali_table_external_source(policy, padded, last, next_first):
    with pytest.warns(UserWarning):
        it = DALIGenericIterator(stream_source(padded), ["data"], size=7, last_batch_policy=policy,
                                 last_batch_padded=padded)
    epoch = one_epoch(it)
    assert epoch[-1] == last
    it.reset()
    assert values(next(it)[0]) == next_first


def test_external_source_end_of_data_is_the_epoch():
    """Without size or reader_name the source's StopIteration ends the epoch; the last batch is what it gives."""
    def batches():
        for start in (1, 3, 5, 7):
            yield np.arange(start, min(start + 2, 8), dtype=np.uint8)

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(source=batches)

    it = Iterator(pipe(), ["x"])
    assert one_epoch(it, "x") == [[1, 2], [3, 4], [5, 6], [7]]
    with pytest.raises(StopIteration):
        next(it)
    assert len(it) == 0  # unknown, as DALI says it
    it.reset()
    assert one_epoch(it, "x") == [[1, 2], [3, 4], [5, 6], [7]]


def test_auto_reset_and_len_over_epochs(seven_files):
    it = DALIGenericIterator(file_pipe(seven_files, False), ["data", "label"], reader_name="Reader",
                             last_batch_policy=FILL, auto_reset="yes")
    assert len(it) == 4
    epochs = [one_epoch(it) for _ in range(3)]
    # FILL without padding: the stream goes on, so epoch 2 starts with 2 and is a batch shorter.
    assert epochs[0] == [[1, 2], [3, 4], [5, 6], [7, 1]]
    assert epochs[1] == [[2, 3], [4, 5], [6, 7]]
    assert epochs[2] == [[1, 2], [3, 4], [5, 6], [7, 1]]


@pytest.mark.parametrize("auto_reset", [True, "yes"])
def test_auto_reset_values(seven_files, auto_reset):
    it = DALIGenericIterator(file_pipe(seven_files, True), ["data", "label"], reader_name="Reader",
                             last_batch_policy=PARTIAL, auto_reset=auto_reset)
    assert [one_epoch(it) for _ in range(2)] == [[[1, 2], [3, 4], [5, 6], [7]]] * 2


def test_stop_iteration_then_reset(seven_files):
    it = DALIGenericIterator(file_pipe(seven_files, True), ["data", "label"], reader_name="Reader",
                             last_batch_policy=PARTIAL, auto_reset=False)
    assert len(one_epoch(it)) == 4
    with pytest.raises(StopIteration):
        next(it)
    with pytest.raises(StopIteration):  # stays ended until reset
        next(it)
    it.reset()
    assert values(next(it)[0]) == [1, 2]


def test_for_loop_restarts_an_ended_epoch(seven_files):
    it = DALIGenericIterator(file_pipe(seven_files, True), ["data", "label"], reader_name="Reader",
                             last_batch_policy=PARTIAL)
    assert one_epoch(it) == one_epoch(it) == [[1, 2], [3, 4], [5, 6], [7]]


def test_reset_mid_epoch_is_ignored(seven_files, caplog):
    it = DALIGenericIterator(file_pipe(seven_files, True), ["data", "label"], reader_name="Reader",
                             last_batch_policy=PARTIAL)
    next(it)
    it.reset()
    assert "ignored" in caplog.text
    assert values(next(it)[0]) == [3, 4]


def test_pipeline_reset_keeps_prefetched_reader_iterations(seven_files):
    import time

    pipe = file_pipe(seven_files, True)
    got = [pipe.run()[0].as_tensor().flatten().tolist() for _ in range(4)]
    time.sleep(0.5)  # let the prefetched iteration finish
    pipe.reset()
    got.append(pipe.run()[0].as_tensor().flatten().tolist())
    assert got == [[1, 2], [3, 4], [5, 6], [7, 7], [1, 2]]


def test_drop_reset_after_len_batches(seven_files):
    """A loop that stops after len() batches (never meeting StopIteration) still drops the partial batch."""
    it = DALIGenericIterator(file_pipe(seven_files, False), ["data", "label"], reader_name="Reader",
                             last_batch_policy=DROP)
    got = [values(next(it)[0]) for _ in range(len(it))]
    assert got == [[1, 2], [3, 4], [5, 6]]
    it.reset()
    assert values(next(it)[0]) == [2, 3]


def test_classification_iterator_and_labels(tmp_path):
    for cls in ("a", "b"):
        (tmp_path / cls).mkdir()
        for i in range(2):
            (tmp_path / cls / f"{i}.jpg").write_bytes(bytes([i]))

    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def pipe():
        return fn.readers.file(file_root=str(tmp_path), name="Reader")

    it = ClassificationIterator(pipe(), reader_name="Reader")
    assert DALIClassificationIterator is ClassificationIterator
    batch = next(it)[0]
    assert set(batch) == {"data", "label"}
    assert batch["label"].dtype == torch.int32
    assert batch["label"].flatten().tolist() == [0, 0, 1, 1]


def shard_pipes(files, n_shards, pad, stick=False, batch_size=2):
    return [file_pipe(files, pad, batch_size=batch_size, shard_id=s, num_shards=n_shards, stick_to_shard=stick)
            for s in range(n_shards)]


@pytest.mark.parametrize("policy", [PARTIAL, FILL, DROP])
@pytest.mark.parametrize("pad", [True, False])
def test_shards_over_three_epochs(seven_files, policy, pad):
    """7 samples over 2 shards (sizes 3 and 4) that move to the next shard every epoch: every pipeline returns
    the same number of batches; with padding, PARTIAL covers every sample exactly once per epoch (FILL too, plus
    the padding). Without padding a shard reads into the next epoch's shard, so (as in DALI, whose docs ask for
    pad_last_batch with shards) an epoch may skip or repeat a sample; only the batch counts agree."""
    pipes = shard_pipes(seven_files, 2, pad)
    it = DALIGenericIterator(pipes, ["data", "label"], reader_name="Reader", last_batch_policy=policy,
                             auto_reset=True)
    for epoch in range(3):
        n_expected = len(it)
        batches = list(it)
        assert len(batches) == n_expected
        assert all(len(b) == 2 for b in batches)
        seen = [v for b in batches for d in b for v in values(d)]
        if policy == PARTIAL and pad:
            assert sorted(seen) == list(range(1, 8)), (epoch, seen)
        elif policy == FILL and pad:
            assert set(seen) == set(range(1, 8)) and len(seen) == 8
        elif policy == DROP:
            assert len(seen) == len(set(seen)) == 4  # one full batch per shard (the smaller shard holds 3)


def test_shards_partial_sizes_per_epoch(seven_files):
    """Shard 0 holds 1..3 and shard 1 holds 4..7; next epoch they swap, so the pipeline that returned 3 samples
    returns 4 and the other 3."""
    it = DALIGenericIterator(shard_pipes(seven_files, 2, False), ["data", "label"], reader_name="Reader",
                             last_batch_policy=PARTIAL, auto_reset=True)
    e1 = list(it)
    assert [[values(b[i]) for b in e1] for i in range(2)] == [[[1, 2], [3]], [[4, 5], [6, 7]]]
    e2 = list(it)
    p0 = [v for b in e2 for v in values(b[0])]
    p1 = [v for b in e2 for v in values(b[1])]
    assert len(p0) == 4 and len(p1) == 3


def test_stick_to_shard(seven_files):
    it = DALIGenericIterator(shard_pipes(seven_files, 2, True, stick=True), ["data", "label"],
                             reader_name="Reader", last_batch_policy=PARTIAL, auto_reset=True)
    for _ in range(3):
        e = list(it)
        assert [v for b in e for v in values(b[0])] == [1, 2, 3]
        assert [v for b in e for v in values(b[1])] == [4, 5, 6, 7]


def test_pipeline_error_reaches_next():
    def source(i):
        if i == 2:
            raise ValueError("broken sample 5")
        return np.zeros((2, 3), np.float32)

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(source=source, name="src")

    it = DALIGenericIterator(pipe(), ["x"])
    next(it)
    next(it)
    with pytest.raises(PipelineError, match="broken sample 5"):
        next(it)


def test_ragged_outputs(tmp_path):
    def source():
        return [np.zeros(2, np.float32), np.zeros(3, np.float32)]

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(source=source, cycle=True)

    with pytest.raises(PipelineError, match="ragged_outputs=\\['x'\\]"):
        next(DALIGenericIterator(pipe(), ["x"]))
    batch = next(DALIGenericIterator(pipe(), ["x"], ragged_outputs=["x"]))[0]
    assert [t.shape[0] for t in batch["x"]] == [2, 3]


def test_argument_errors(seven_files):
    p = file_pipe(seven_files, True)
    with pytest.raises(ArgumentError, match="distinct"):
        DALIGenericIterator(p, ["a", "a"], reader_name="Reader")
    with pytest.raises(ArgumentError, match="auto_reset"):
        DALIGenericIterator(p, ["a", "b"], reader_name="Reader", auto_reset="maybe")
    with pytest.raises(ArgumentError, match="not both"):
        DALIGenericIterator(p, ["a", "b"], reader_name="Reader", size=7)
    with pytest.raises(ArgumentError, match="last_batch_policy"):
        DALIGenericIterator(p, ["a", "b"], reader_name="Reader", last_batch_policy="fill")
    with pytest.raises(ArgumentError, match="no reader named"):
        DALIGenericIterator(p, ["a", "b"], reader_name="Nope")
    it = DALIGenericIterator(p, ["only_one"], reader_name="Reader")
    with pytest.raises(ArgumentError, match="2 outputs"):
        next(it)


@pytest.mark.cuda
def test_cuda_outputs_stay_on_gpu(seven_files):
    @pipeline_def(batch_size=2, num_threads=1, device_id=0)
    def pipe():
        data, label = fn.readers.file(files=seven_files, pad_last_batch=True, name="Reader")
        return data.gpu(), label

    it = DALIGenericIterator(pipe(), ["data", "label"], reader_name="Reader", last_batch_policy=PARTIAL)
    batches = list(it)
    assert batches[0][0]["data"].is_cuda and not batches[0][0]["label"].is_cuda
    assert [b[0]["data"].flatten().tolist() for b in batches] == [[1, 2], [3, 4], [5, 6], [7]]


def test_several_pipelines_with_size_partial(seven_files):
    """size counts the samples of all pipelines together (DALI): 2 pipelines x batch 2, size 7 -> the second step
    returns 2 samples from the first pipeline (its shard 1..3 continues into the next shard) and 1 from
    the second."""
    pipes = [file_pipe(seven_files, False, shard_id=s, num_shards=2) for s in range(2)]
    with pytest.warns(UserWarning):
        it = DALIGenericIterator(pipes, ["data", "label"], size=7, last_batch_policy=PARTIAL)
    assert len(it) == 2
    steps = list(it)
    assert [[values(d) for d in step] for step in steps] == [[[1, 2], [4, 5]], [[3, 4], [6]]]


def test_prepare_first_batch_false_runs_nothing_until_next():
    calls = []

    def source(i):
        calls.append(i)
        return np.zeros((2, 1), np.float32)

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(source=source)

    lazy = DALIGenericIterator(pipe(), ["x"], prepare_first_batch=False)
    import time
    time.sleep(0.3)
    assert calls == []
    next(lazy)
    assert calls[0] == 0
    eager = DALIGenericIterator(pipe(), ["x"])
    deadline = time.monotonic() + 10
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(calls) >= 3  # the eager iterator's pipeline started on its own
    assert eager is not None


def test_reader_error_names_the_file(numbered_files):
    files = numbered_files(6)
    it = DALIGenericIterator(file_pipe(files, True, prefetch_queue_depth=1), ["data", "label"],
                             reader_name="Reader", prepare_first_batch=False)
    next(it)
    os.remove(files[4])
    with pytest.raises(PipelineError, match="004.bin"):
        for _ in range(3):
            next(it)


@pytest.mark.parametrize("policy,padded,last,next_first", TABLE[::2])
def test_dali_table_synchronous_pipeline(seven_files, policy, padded, last, next_first):
    it = DALIGenericIterator(file_pipe(seven_files, padded, exec_async=False), ["data", "label"],
                             reader_name="Reader", last_batch_policy=policy)
    assert one_epoch(it)[-1] == last
    it.reset()
    assert values(next(it)[0]) == next_first
