"""Checks of sluice.jax, run in their own process by test_jax_iterator.py (JAX's threads must not live in the
test process, which forks DataLoader workers). The JAX arrays are compared with NumPy.

Run directly: ``python tests/torch/jax_iterator_check.py``.
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np


def seven_files() -> list[str]:
    root = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sluice_jax_")  # the test gives its tmp_path
    paths = []
    for i in range(1, 8):
        path = os.path.join(root, f"{i}.bin")
        with open(path, "wb") as f:
            f.write(bytes([i]))
        paths.append(path)
    return paths


def pipe(files, shard_id=0, num_shards=1):
    from sluice import fn, pipeline_def

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def p():
        data, label = fn.readers.file(files=files, pad_last_batch=True, shard_id=shard_id, num_shards=num_shards,
                                      name="Reader")
        return data, label

    return p()


def check_arrays_and_partial_last_batch(files):
    import jax

    from sluice.jax import DALIGenericIterator, LastBatchPolicy

    it = DALIGenericIterator(pipe(files), ["data", "label"], reader_name="Reader",
                             last_batch_policy=LastBatchPolicy.PARTIAL)
    batches = list(it)
    assert all(isinstance(b["data"], jax.Array) for b in batches)
    assert [np.asarray(b["data"]).ravel().tolist() for b in batches] == [[1, 2], [3, 4], [5, 6], [7]]
    assert batches[0]["data"].dtype == np.uint8 and batches[0]["label"].dtype == np.int32


def check_several_pipelines_join_along_the_batch(files):
    from sluice.jax import DALIGenericIterator, LastBatchPolicy

    it = DALIGenericIterator([pipe(files, 0, 2), pipe(files, 1, 2)], ["data", "label"], reader_name="Reader",
                             last_batch_policy=LastBatchPolicy.FILL)
    assert np.asarray(next(it)["data"]).ravel().tolist() == [1, 2, 4, 5]


def check_to_jax_matches_numpy():
    import torch

    from sluice.jax import to_jax

    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:]  # not contiguous
    np.testing.assert_array_equal(np.asarray(to_jax(t)), t.numpy())
    np.testing.assert_array_equal(np.asarray(to_jax(torch.tensor([True, False]))), [True, False])


def main() -> int:
    files = seven_files()
    check_arrays_and_partial_last_batch(files)
    check_several_pipelines_join_along_the_batch(files)
    check_to_jax_matches_numpy()
    print("OK jax iterator")
    return 0


if __name__ == "__main__":
    sys.exit(main())
