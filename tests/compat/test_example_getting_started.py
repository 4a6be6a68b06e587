# ruff: noqa: I001, PLR0402
"""DALI's "Getting started" tutorial (file reader, decoder, shuffling, augmentations, GPU and hybrid decoding),
written afresh on generated JPEGs. The DALI code is unchanged but for the first import line.

Reference: Pillow decodes the same files (sluice's CPU decoder agrees with it exactly here: both are
libjpeg-turbo); NumPy's rot90 is the reference rotation. nvJPEG may differ from libjpeg by a few levels:
tolerance 8 on the GPU.
"""

import sluice.compat; sluice.compat.install()  # the one line a DALI program adds

import numpy as np
import pytest
from nvidia.dali import pipeline_def
from nvidia.dali.pipeline import Pipeline
import nvidia.dali.fn as fn
import nvidia.dali.ops as ops
import nvidia.dali.types as types
from nvidia.dali.tensors import TensorListCPU, TensorListGPU

from dali_example_data import pil_decode, psnr


@pipeline_def
def simple_pipeline(image_dir):
    jpegs, labels = fn.readers.file(file_root=image_dir)
    images = fn.decoders.image(jpegs, device="cpu")
    return images, labels


def test_simple_pipeline(image_dir, image_files):
    pipe = simple_pipeline(str(image_dir), batch_size=4, num_threads=1, device_id=None)
    pipe.build()
    images, labels = pipe.run()
    assert isinstance(images, TensorListCPU) and not isinstance(images, TensorListGPU)
    assert not images.is_dense_tensor()  # the images differ in size
    assert labels.is_dense_tensor()
    assert np.array(labels.as_tensor()).ravel().tolist() == [0, 0, 0, 1]
    for j in range(4):
        np.testing.assert_array_equal(images.at(j), pil_decode(image_files[j][0]))
    images, labels = pipe.run()  # the reader goes on into the next epoch
    assert np.array(labels.as_tensor()).ravel().tolist() == [1, 1, 0, 0]


@pipeline_def
def shuffled_pipeline(image_dir):
    jpegs, labels = fn.readers.file(file_root=image_dir, random_shuffle=True, initial_fill=21)
    images = fn.decoders.image(jpegs, device="cpu")
    return images, labels


def _decoded_with_labels(pipe, iterations):
    out = []
    for _ in range(iterations):
        images, labels = pipe.run()
        out += [(images.at(j), int(labels.at(j)[0])) for j in range(len(images))]
    return out


def test_random_shuffle_keeps_pairs_and_is_seeded(image_dir, image_files):
    first = _decoded_with_labels(shuffled_pipeline(str(image_dir), batch_size=3, num_threads=2, device_id=None,
                                                   seed=1234), 4)
    again = _decoded_with_labels(shuffled_pipeline(str(image_dir), batch_size=3, num_threads=2, device_id=None,
                                                   seed=1234), 4)
    references = [(pil_decode(path), label) for path, label in image_files]
    for (image, label), (image2, label2) in zip(first, again):
        assert label == label2 and np.array_equal(image, image2)
        assert any(label == ref_label and image.shape == ref.shape and np.array_equal(image, ref)
                   for ref, ref_label in references)


@pipeline_def
def rotated_pipeline(image_dir):
    jpegs, labels = fn.readers.file(file_root=image_dir)
    images = fn.decoders.image(jpegs, device="cpu")
    rotated = fn.rotate(images, angle=90.0, fill_value=0)
    angle = fn.random.uniform(range=(-10.0, 10.0))
    randomly_rotated = fn.rotate(images, angle=angle, fill_value=0)
    return rotated, randomly_rotated, angle, labels


def test_augmentations(image_dir, image_files):
    pipe = rotated_pipeline(str(image_dir), batch_size=3, num_threads=2, device_id=None, seed=7)
    rotated, randomly_rotated, angle, _ = pipe.run()
    for j in range(3):
        ref = pil_decode(image_files[j][0])
        np.testing.assert_array_equal(rotated.at(j), np.rot90(ref, 1))  # counter-clockwise, as DALI
        a = np.deg2rad(float(angle.at(j)))
        h, w = ref.shape[:2]
        assert -10 <= float(angle.at(j)) <= 10
        # the output holds the whole rotated image: its bounding box (DALI rounds to keep the centre's parity)
        expect_w, expect_h = abs(w * np.cos(a)) + abs(h * np.sin(a)), abs(w * np.sin(a)) + abs(h * np.cos(a))
        out_h, out_w = randomly_rotated.at(j).shape[:2]
        assert abs(out_w - expect_w) <= 2 and abs(out_h - expect_h) <= 2


class LegacySimplePipeline(Pipeline):
    """The tutorial as DALI 0.x wrote it: operators made in __init__, connected in define_graph."""

    def __init__(self, batch_size, num_threads, device_id, image_dir):
        super().__init__(batch_size, num_threads, device_id, seed=12)
        self.input = ops.FileReader(file_root=image_dir)
        self.decode = ops.ImageDecoder(device="cpu", output_type=types.RGB)
        self.rotate = ops.Rotate(angle=90.0)

    def define_graph(self):
        jpegs, labels = self.input()
        images = self.decode(jpegs)
        return self.rotate(images), labels


def test_legacy_class_pipeline(image_dir, image_files):
    with pytest.warns(DeprecationWarning) as record:
        pipe = LegacySimplePipeline(2, 1, None, str(image_dir))
    messages = " ".join(str(w.message) for w in record)
    assert "ops.FileReader is deprecated; use ops.readers.File" in messages
    assert "ops.ImageDecoder is deprecated; use ops.decoders.Image" in messages
    pipe.build()
    images, labels = pipe.run()
    assert np.array(labels.as_tensor()).ravel().tolist() == [0, 0]
    for j in range(2):
        np.testing.assert_array_equal(images.at(j), np.rot90(pil_decode(image_files[j][0]), 1))


@pipeline_def
def gpu_pipeline(image_dir):
    jpegs, labels = fn.readers.file(file_root=image_dir, random_shuffle=False)
    decoded_on_cpu = fn.decoders.image(jpegs, device="cpu")
    rotated_on_gpu = fn.rotate(decoded_on_cpu.gpu(), angle=90.0, fill_value=0)
    hybrid = fn.decoders.image(jpegs, device="mixed")
    return rotated_on_gpu, hybrid, labels


@pytest.mark.cuda
def test_gpu_and_hybrid_decoding(image_dir, image_files):
    pipe = gpu_pipeline(str(image_dir), batch_size=3, num_threads=2, device_id=0)
    pipe.build()
    rotated, hybrid, labels = pipe.run()
    assert isinstance(rotated, TensorListGPU) and isinstance(hybrid, TensorListGPU)
    assert isinstance(labels, TensorListCPU)
    for j in range(3):
        ref = pil_decode(image_files[j][0])
        assert np.abs(rotated.as_cpu().at(j).astype(int) - np.rot90(ref, 1)).max() <= 1  # float sin/cos on GPU
        decoded = hybrid.as_cpu().at(j)
        assert decoded.shape == ref.shape
        assert psnr(decoded, ref) >= 28, psnr(decoded, ref)  # nvJPEG vs libjpeg-turbo chroma upsampling
