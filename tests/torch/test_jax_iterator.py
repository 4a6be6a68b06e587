"""sluice.jax: the JAX iterator gives jax.Arrays equal to the pipeline's outputs (NumPy as the reference), with
the torch iterator's epoch arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from sluice import fn, pipeline_def  # noqa: E402
from sluice.jax import DALIGenericIterator, LastBatchPolicy, to_jax  # noqa: E402


def pipe(files, shard_id=0, num_shards=1):
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def p():
        data, label = fn.readers.file(files=files, pad_last_batch=True, shard_id=shard_id, num_shards=num_shards,
                                      name="Reader")
        return data, label

    return p()


def test_arrays_and_partial_last_batch(seven):
    it = DALIGenericIterator(pipe(seven), ["data", "label"], reader_name="Reader",
                             last_batch_policy=LastBatchPolicy.PARTIAL)
    batches = list(it)
    assert all(isinstance(b["data"], jax.Array) for b in batches)
    assert [np.asarray(b["data"]).ravel().tolist() for b in batches] == [[1, 2], [3, 4], [5, 6], [7]]
    assert batches[0]["data"].dtype == np.uint8 and batches[0]["label"].dtype == np.int32


def test_several_pipelines_join_along_the_batch(seven):
    it = DALIGenericIterator([pipe(seven, 0, 2), pipe(seven, 1, 2)], ["data", "label"], reader_name="Reader",
                             last_batch_policy=LastBatchPolicy.FILL)
    first = next(it)
    assert np.asarray(first["data"]).ravel().tolist() == [1, 2, 4, 5]


def test_to_jax_matches_numpy():
    import torch

    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:]  # not contiguous
    np.testing.assert_array_equal(np.asarray(to_jax(t)), t.numpy())
    np.testing.assert_array_equal(np.asarray(to_jax(torch.tensor([True, False]))), [True, False])
