# ruff: noqa: I001, PLR0402
"""DALI's "Using DALI in PyTorch" examples (sharded pipelines under DALIGenericIterator, last-batch policies,
the legacy class API with ``size=``, ``feed_ndarray``, and the DataLoader proxy), written afresh on generated
JPEGs. The DALI code is unchanged but for the first import line; where DALI's example reads a Caffe LMDB
(``fn.readers.caffe``, not in sluice) these read the same kind of data with ``fn.readers.file``.

Reference: every output crop must equal, exactly, a 24x24 window of the Pillow decode of an image of its class
(mirrored or not), minus the mean 128 (std 1): sluice's CPU decoder equals Pillow here.
"""

import sluice.compat; sluice.compat.install()  # the one line a DALI program adds

import numpy as np
import pytest
import torch
from nvidia.dali import pipeline_def, Pipeline
import nvidia.dali.fn as fn
import nvidia.dali.ops as ops
import nvidia.dali.types as types
from nvidia.dali.plugin.pytorch import (DALIClassificationIterator, DALIGenericIterator, LastBatchPolicy,
                                        feed_ndarray)
from nvidia.dali.plugin.pytorch.experimental import proxy as dali_proxy

from dali_example_data import CLASSES, SIZES, pil_decode

CROP = 24


@pytest.fixture(scope="module")
def class_images(image_dir):
    return {label: [pil_decode(image_dir / cls / f"img{i}.jpg") for i in range(len(SIZES))]
            for label, cls in enumerate(CLASSES)}


def is_window_of(chw, images, mean=128.0):
    """Whether the normalised CHW crop is a window (possibly mirrored) of one of ``images``."""
    crop = chw.transpose(1, 2, 0) + mean
    for image in images:
        windows = np.lib.stride_tricks.sliding_window_view(image, (CROP, CROP, 3))[:, :, 0].astype(np.float32)
        for candidate in (crop, crop[:, ::-1]):
            if np.abs(windows - candidate).max(axis=(2, 3, 4)).min() <= 1e-4:
                return True
    return False


@pipeline_def
def file_pipeline(image_dir, num_gpus, shard_id, device):
    jpegs, labels = fn.readers.file(file_root=image_dir, random_shuffle=True, name="Reader", shard_id=shard_id,
                                    num_shards=num_gpus)
    images = fn.decoders.image(jpegs, device="mixed" if device == "gpu" else "cpu", output_type=types.RGB)
    images = fn.crop_mirror_normalize(images, crop_pos_x=fn.random.uniform(range=(0.0, 1.0)),
                                      crop_pos_y=fn.random.uniform(range=(0.0, 1.0)), dtype=types.FLOAT,
                                      crop=(CROP, CROP), mean=[128.0, 128.0, 128.0], std=[1.0, 1.0, 1.0],
                                      mirror=fn.random.coin_flip())
    return images, labels


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.cuda)])
def test_generic_iterator_over_sharded_pipelines(image_dir, class_images, device):
    num_gpus = 2  # two pipelines, two shards (on one GPU, or on the CPU)
    pipes = [file_pipeline(str(image_dir), num_gpus, shard, device, batch_size=2, num_threads=2,
                           device_id=0 if device == "gpu" else None, seed=10 + shard) for shard in range(num_gpus)]
    for pipe in pipes:
        pipe.build()
    loader = DALIGenericIterator(pipes, ["data", "label"], reader_name="Reader",
                                 last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)
    for epoch in range(2):
        seen = 0
        for batches in loader:
            assert len(batches) == num_gpus
            for per_pipe in batches:
                data, label = per_pipe["data"], per_pipe["label"]
                assert data.dtype == torch.float32 and data.shape[1:] == (3, CROP, CROP)
                assert data.device.type == ("cuda" if device == "gpu" else "cpu")
                for chw, lab in zip(data.cpu().numpy(), label.cpu().numpy().ravel()):
                    if device == "cpu":
                        assert is_window_of(chw, class_images[int(lab)])
                seen += len(label)
        assert seen == 6, epoch  # every sample once per epoch (PARTIAL)


@pipeline_def
def ordered_pipeline(image_dir):
    jpegs, labels = fn.readers.file(file_root=image_dir, name="Reader", pad_last_batch=True)
    return fn.decoders.image(jpegs, device="cpu"), labels


@pytest.mark.parametrize("policy, expected", [
    (LastBatchPolicy.PARTIAL, [[0, 0, 0, 1], [1, 1]]),
    (LastBatchPolicy.FILL, [[0, 0, 0, 1], [1, 1, 1, 1]]),
    (LastBatchPolicy.DROP, [[0, 0, 0, 1]]),
])
def test_last_batch_policies(image_dir, policy, expected):
    pipe = ordered_pipeline(str(image_dir), batch_size=4, num_threads=1, device_id=None)
    loader = DALIClassificationIterator(pipe, reader_name="Reader", last_batch_policy=policy,
                                        ragged_outputs=["data"])
    assert [batch[0]["label"].ravel().tolist() for batch in loader] == expected


class LegacyTrainPipeline(Pipeline):
    """The pre-1.0 style: ops classes, CoinFlip/Uniform, CMN with output_dtype/output_layout/image_type."""

    def __init__(self, batch_size, num_threads, device_id, image_dir):
        super().__init__(batch_size, num_threads, device_id, seed=12)
        self.input = ops.FileReader(file_root=image_dir, random_shuffle=True)
        self.decode = ops.ImageDecoder(device="cpu", output_type=types.RGB)
        self.cmnp = ops.CropMirrorNormalize(device="cpu", output_dtype=types.FLOAT, output_layout=types.NCHW,
                                            crop=(CROP, CROP), image_type=types.RGB, mean=[128.0, 128.0, 128.0],
                                            std=[1.0, 1.0, 1.0])
        self.coin = ops.CoinFlip(probability=0.5)
        self.uniform = ops.Uniform(range=(0.0, 1.0))

    def define_graph(self):
        jpegs, labels = self.input(name="Reader")
        images = self.decode(jpegs)
        output = self.cmnp(images, mirror=self.coin(), crop_pos_x=self.uniform(), crop_pos_y=self.uniform())
        return output, labels


def test_legacy_api_with_size(image_dir, class_images):
    with pytest.warns(DeprecationWarning) as record:
        pipe = LegacyTrainPipeline(4, 2, None, str(image_dir))
    messages = "\n".join(str(w.message) for w in record)
    for expected in ("ops.FileReader is deprecated; use ops.readers.File",
                     "ops.CropMirrorNormalize: argument 'output_dtype' is deprecated; use 'dtype'",
                     "ops.CropMirrorNormalize: argument 'image_type' is deprecated",
                     "ops.CoinFlip is deprecated; use ops.random.CoinFlip",
                     "ops.Uniform is deprecated; use ops.random.Uniform"):
        assert expected in messages
    pipe.build()
    assert pipe.epoch_size("Reader") == 6
    with pytest.warns(DeprecationWarning, match="fill_last_batch"), pytest.warns(UserWarning, match="reader_name"):
        loader = DALIClassificationIterator(pipe, size=pipe.epoch_size("Reader"), fill_last_batch=False)
    sizes = []
    for batch in loader:
        data, label = batch[0]["data"], batch[0]["label"]
        sizes.append(len(label))
        for chw, lab in zip(data.numpy(), label.numpy().ravel()):
            assert is_window_of(chw, class_images[int(lab)])
    assert sizes == [4, 2]


def test_feed_ndarray(image_dir):
    pipe = LegacyTrainPipeline(4, 2, None, str(image_dir))
    images, labels = pipe.run()
    target = torch.empty((4, 3, CROP, CROP), dtype=torch.float32)
    assert feed_ndarray(images, target) is target
    torch.testing.assert_close(target, images.as_tensor(), rtol=0, atol=0)
    with pytest.raises(ValueError, match="element type"):
        feed_ndarray(labels, torch.empty(4, 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="shapes differ"):
        feed_ndarray(images, torch.empty((4, 3, CROP, CROP + 1)))


@pytest.mark.cuda
def test_feed_ndarray_on_a_stream(image_dir):
    pipe = LegacyTrainPipeline(4, 2, 0, str(image_dir))
    images, _ = pipe.run()
    gpu_images = images.as_tensor().cuda()
    target = torch.empty_like(gpu_images)
    stream = torch.cuda.Stream()
    gpu_batch = images.to("cuda")
    stream.wait_stream(torch.cuda.current_stream())  # the copy to the GPU above ran on the current stream
    feed_ndarray(gpu_batch, target, cuda_stream=stream.cuda_stream)
    stream.synchronize()
    torch.testing.assert_close(target, gpu_images, rtol=0, atol=0)


@pipeline_def
def proxy_pipeline(device):
    encoded = fn.external_source(name="images", no_copy=True)
    images = fn.decoders.image(encoded, device="mixed" if device == "gpu" else "cpu")
    return fn.resize(images, resize_x=16, resize_y=16)


class FileDataset(torch.utils.data.Dataset):
    def __init__(self, files, transform):
        self.files = files
        self.transform = transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, label = self.files[i]
        return self.transform(np.fromfile(path, dtype=np.uint8)), label


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.cuda)])
def test_proxy_dataloader(image_files, device):
    pipe = proxy_pipeline(device, batch_size=3, num_threads=2, device_id=0 if device == "gpu" else None)
    with dali_proxy.DALIServer(pipe, deterministic=True) as dali_server:
        dataset = FileDataset(image_files, transform=dali_server.proxy)
        loader = dali_proxy.DataLoader(dali_server, dataset, batch_size=3, num_workers=1, shuffle=False)
        labels = []
        for images, label in loader:
            assert images.shape == (3, 16, 16, 3) and images.dtype == torch.uint8
            assert images.device.type == ("cuda" if device == "gpu" else "cpu")
            labels += label.tolist()
    assert labels == [label for _, label in image_files]


@pipeline_def
def create_dali_pipeline(data_dir, crop, size, shard_id, num_shards, dali_cpu=False, is_training=True):
    """The training/validation pipeline of DALI's PyTorch ImageNet (ResNet-50) example, written afresh."""
    images, labels = fn.readers.file(file_root=data_dir, shard_id=shard_id, num_shards=num_shards,
                                     random_shuffle=is_training, pad_last_batch=True, name="Reader")
    dali_device = "cpu" if dali_cpu else "gpu"
    decoder_device = "cpu" if dali_cpu else "mixed"
    device_memory_padding = 211025920 if decoder_device == "mixed" else 0
    host_memory_padding = 140544512 if decoder_device == "mixed" else 0
    if is_training:
        images = fn.decoders.image_random_crop(images, device=decoder_device, output_type=types.RGB,
                                               device_memory_padding=device_memory_padding,
                                               host_memory_padding=host_memory_padding,
                                               preallocate_width_hint=5980 if decoder_device == "mixed" else 0,
                                               preallocate_height_hint=6430 if decoder_device == "mixed" else 0,
                                               random_aspect_ratio=[0.8, 1.25], random_area=[0.1, 1.0],
                                               num_attempts=100)
        images = fn.resize(images, device=dali_device, resize_x=crop, resize_y=crop,
                           interp_type=types.INTERP_TRIANGULAR)
        mirror = fn.random.coin_flip(probability=0.5)
    else:
        images = fn.decoders.image(images, device=decoder_device, output_type=types.RGB)
        images = fn.resize(images, device=dali_device, size=size, mode="not_smaller",
                           interp_type=types.INTERP_TRIANGULAR)
        mirror = False
    images = fn.crop_mirror_normalize(images.gpu() if not dali_cpu else images, dtype=types.FLOAT,
                                      output_layout="CHW", crop=(crop, crop),
                                      mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                      std=[0.229 * 255, 0.224 * 255, 0.225 * 255], mirror=mirror)
    labels = labels.gpu() if not dali_cpu else labels
    return images, labels


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("is_training", [True, False])
def test_imagenet_example_pipeline(image_dir, device, is_training):
    pipe = create_dali_pipeline(batch_size=4, num_threads=2, device_id=0 if device == "gpu" else None, seed=12,
                                data_dir=str(image_dir), crop=16, size=20, dali_cpu=device == "cpu",
                                is_training=is_training, shard_id=0, num_shards=1)
    pipe.build()
    loader = DALIClassificationIterator(pipe, reader_name="Reader", last_batch_policy=LastBatchPolicy.PARTIAL,
                                        auto_reset=True)
    batches = list(loader)
    assert [len(b[0]["label"]) for b in batches] == [4, 2]
    data = batches[0][0]["data"]
    assert data.shape == (4, 3, 16, 16) and data.dtype == torch.float32
    assert data.device.type == ("cuda" if device == "gpu" else "cpu")
    assert -2.2 <= float(data.min()) and float(data.max()) <= 2.7  # ImageNet-normalised pixel range
