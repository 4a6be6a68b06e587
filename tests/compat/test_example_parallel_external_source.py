# ruff: noqa: I001, PLR0402
"""DALI's "Parallel external source" example (a per-sample callable run in worker processes, reading encoded
files and their labels), written afresh on generated JPEGs. The DALI code is unchanged but for the first
import line.

Reference: Pillow decodes the files (sluice's CPU decoder equals it here); the epoch ends with StopIteration
as DALI's does when the callable raises it.
"""

import sluice.compat; sluice.compat.install()  # the one line a DALI program adds

import numpy as np
from nvidia.dali import pipeline_def
import nvidia.dali.fn as fn
import nvidia.dali.types as types

from dali_example_data import pil_decode


class ExternalInputCallable:
    def __init__(self, batch_size, files):
        self.batch_size = batch_size
        self.files = [(str(path), label) for path, label in files]
        self.full_iterations = len(self.files) // batch_size

    def __call__(self, sample_info):
        sample_idx = sample_info.idx_in_epoch
        if sample_info.iteration >= self.full_iterations:
            raise StopIteration  # only full batches, as in DALI's example
        path, label = self.files[sample_idx]
        encoded = np.fromfile(path, dtype=np.uint8)
        return encoded, np.int32([label])


def test_parallel_external_source(image_files):
    batch_size = 2

    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, py_num_workers=2, py_start_method="fork")
    def parallel_pipeline():
        jpegs, labels = fn.external_source(source=ExternalInputCallable(batch_size, image_files), num_outputs=2,
                                           batch=False, parallel=True, dtype=[types.UINT8, types.INT32])
        decode = fn.decoders.image(jpegs, device="cpu")
        return decode, labels

    pipe = parallel_pipeline()
    pipe.build()
    for epoch in range(2):
        seen = []
        try:
            while True:
                images, labels = pipe.run()
                seen += [(images.at(j), int(labels.at(j)[0])) for j in range(len(images))]
        except StopIteration:
            pipe.reset()
        assert len(seen) == len(image_files), epoch
        for (image, label), (path, ref_label) in zip(seen, image_files):
            assert label == ref_label
            np.testing.assert_array_equal(image, pil_decode(path))
    pipe.close()
