# ruff: noqa: I001, PLR0402
"""DALI's "External source operator" example (an iterator of encoded JPEGs and labels feeding the decoder),
written afresh on generated JPEGs, in the fn form and in the legacy form (ops.ExternalSource, iter_setup,
feed_input). The DALI code is unchanged but for the first import line.

Reference: Pillow decodes the files; brightness_contrast is checked against DALI's formula
out = brightness * (contrast_center + contrast * (in - contrast_center)) computed with NumPy (tolerance 1
level, for rounding).
"""

import sluice.compat; sluice.compat.install()  # the one line a DALI program adds

import numpy as np
import pytest
from nvidia.dali import pipeline_def, Pipeline
import nvidia.dali.fn as fn
import nvidia.dali.ops as ops
import nvidia.dali.types as types
from nvidia.dali.plugin.pytorch import DALIGenericIterator

from dali_example_data import pil_decode, psnr


class ExternalInputIterator:
    """Batches of (encoded file, label), cycling over the files, as the DALI example's iterator."""

    def __init__(self, batch_size, files):
        self.batch_size = batch_size
        self.files = list(files)

    def __iter__(self):
        self.i = 0
        self.n = len(self.files)
        return self

    def __next__(self):
        batch, labels = [], []
        for _ in range(self.batch_size):
            path, label = self.files[self.i]
            with open(path, "rb") as f:
                batch.append(np.frombuffer(f.read(), dtype=np.uint8))
            labels.append(np.array([label], dtype=np.uint8))
            self.i = (self.i + 1) % self.n
        return batch, labels


def expected_contrast(image, contrast=2.0, center=128.0):
    return np.clip(np.round(center + contrast * (image.astype(np.float64) - center)), 0, 255)


def _check(images, labels, files, start):
    for j in range(len(images)):
        path, label = files[(start + j) % len(files)]
        ref = pil_decode(path)
        assert int(labels.at(j)[0]) == label
        assert np.abs(images.at(j).astype(np.float64) - expected_contrast(ref)).max() <= 1


@pipeline_def
def external_source_pipeline(eii, device):
    jpegs, labels = fn.external_source(source=eii, num_outputs=2, dtype=types.UINT8)
    decode = fn.decoders.image(jpegs, device="mixed" if device == "gpu" else "cpu")
    enhance = fn.brightness_contrast(decode, contrast=2)
    return enhance, labels


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.cuda)])
def test_external_source(image_files, device):
    eii = ExternalInputIterator(4, image_files)
    pipe = external_source_pipeline(eii, device, batch_size=4, num_threads=2,
                                    device_id=0 if device == "gpu" else None)
    pipe.build()
    for it in range(3):
        images, labels = pipe.run()
        if device == "gpu":
            images = images.as_cpu()  # nvJPEG vs libjpeg-turbo (chroma upsampling), then doubled by the contrast
            for j in range(4):
                ref = expected_contrast(pil_decode(image_files[(4 * it + j) % 6][0]))
                assert psnr(images.at(j), ref) >= 24, psnr(images.at(j), ref)
        else:
            _check(images, labels, image_files, 4 * it)


class ExternalSourcePipeline(Pipeline):
    def __init__(self, batch_size, eii, num_threads, device_id, **kwargs):
        super().__init__(batch_size, num_threads, device_id, seed=12, **kwargs)
        self.input = ops.ExternalSource()
        self.input_label = ops.ExternalSource()
        self.decode = ops.decoders.Image(device="cpu", output_type=types.RGB)
        self.contrast = ops.BrightnessContrast(device="cpu", contrast=2)
        self.iterator = iter(eii)

    def define_graph(self):
        self.jpegs = self.input()
        self.labels = self.input_label()
        images = self.decode(self.jpegs)
        return self.contrast(images), self.labels

    def iter_setup(self):
        images, labels = next(self.iterator)
        self.feed_input(self.jpegs, images)
        self.feed_input(self.labels, labels)


@pytest.mark.parametrize("executor", [{}, {"exec_async": False, "exec_pipelined": False}])
def test_legacy_feed_input(image_files, executor):
    pipe = ExternalSourcePipeline(4, ExternalInputIterator(4, image_files), 2, None, **executor)
    pipe.build()
    for it in range(3):
        images, labels = pipe.run()
        _check(images, labels, image_files, 4 * it)


class ResizedExternalSourcePipeline(ExternalSourcePipeline):
    def __init__(self, batch_size, eii, num_threads, device_id):
        super().__init__(batch_size, eii, num_threads, device_id)
        self.resize = ops.Resize(device="cpu", resize_x=16, resize_y=16, image_type=types.RGB)

    def define_graph(self):
        images, labels = super().define_graph()
        return self.resize(images), labels


def test_legacy_feed_input_with_iterator_size(image_files):
    with pytest.warns(DeprecationWarning, match="ops.Resize: argument 'image_type' is deprecated and ignored"):
        pipe = ResizedExternalSourcePipeline(3, ExternalInputIterator(3, image_files), 2, None)
    with pytest.warns(UserWarning, match="reader_name"):
        loader = DALIGenericIterator(pipe, ["data", "label"], size=6)
    batches = list(loader)
    assert [b[0]["label"].ravel().tolist() for b in batches] == [[0, 0, 0], [1, 1, 1]]
    assert batches[0][0]["data"].shape == (3, 16, 16, 3)
    loader.reset()
    assert sum(len(b[0]["label"]) for b in loader) == 6
