"""DALI's DataLoader-proxy example (the DALIServer docstring's example 1, on the CPU): the Dataset hands file
paths (int8 byte arrays) to ``server.proxy``, the pipeline reads them with ``fn.io.file.read``, decodes and crops.
Also ``fn.decoders.image_slice`` with one input and slice arguments. References: Pillow decodes of the same files
(JPEG: within a few levels, both libjpeg-turbo)."""

from __future__ import annotations

import sluice.compat; sluice.compat.install()  # the one line a DALI program adds

import numpy as np
import nvidia.dali.fn as fn
import nvidia.dali.types as types
import pytest
import torch
from dali_example_data import pil_decode
from nvidia.dali import pipeline_def
from nvidia.dali.plugin.pytorch.experimental import proxy as dali_proxy


def read_filepath(path):
    return np.frombuffer(str(path).encode(), dtype=np.int8)


@pipeline_def
def rn50_train_pipe():
    rng = fn.random.coin_flip(probability=0.5)
    filepaths = fn.external_source(name="images", no_copy=True)
    jpegs = fn.io.file.read(filepaths)
    images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                           random_aspect_ratio=[0.75, 4.0 / 3.0], random_area=[0.08, 1.0])
    images = fn.resize(images, size=[24, 24], interp_type=types.INTERP_LINEAR, antialias=False)
    return fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", crop=(24, 24),
                                    mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                    std=[0.229 * 255, 0.224 * 255, 0.225 * 255], mirror=rng)


class PathFolder(torch.utils.data.Dataset):
    """What the example gets from torchvision's ImageFolder(root, transform=proxy, loader=read_filepath)."""

    def __init__(self, files, transform, loader):
        self.files, self.transform, self.loader = files, transform, loader

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, label = self.files[i]
        return self.transform(self.loader(path)), label


def test_proxy_example_with_file_paths(image_files):
    pipe = rn50_train_pipe(batch_size=3, num_threads=2, device_id=None, seed=4, prefetch_queue_depth=4)
    with dali_proxy.DALIServer(pipe) as dali_server:
        dataset = PathFolder(image_files, transform=dali_server.proxy, loader=read_filepath)
        loader = dali_proxy.DataLoader(dali_server, dataset, batch_size=3, num_workers=2, drop_last=True)
        targets = []
        for data, target in loader:
            assert data.shape == (3, 3, 24, 24) and data.dtype == torch.float32
            assert -2.2 <= float(data.min()) and float(data.max()) <= 2.7  # ImageNet-normalised pixel range
            targets += target.tolist()
    assert sorted(targets) == sorted(label for _, label in image_files)


@pipeline_def(batch_size=2, num_threads=2, device_id=None)
def sliced(files):
    paths = fn.external_source(source=lambda: [read_filepath(p) for p in files], cycle=True)
    jpegs = fn.io.file.read(paths)
    return fn.decoders.image_slice(jpegs, start=[4, 2], end=[20, 14], device="cpu"), \
        fn.decoders.image_slice(jpegs, rel_start=[0.5, 0.5], rel_shape=[0.5, 0.5], device="cpu")


def test_image_slice_with_arguments(image_files):
    files = [p for p, _ in image_files[:2]]
    absolute, relative = sliced(files).run()
    for i, path in enumerate(files):
        ref = pil_decode(path).astype(int)
        h, w = ref.shape[:2]
        assert np.abs(absolute.at(i).astype(int) - ref[2:14, 4:20]).max() <= 4
        assert np.abs(relative.at(i).astype(int) - ref[h // 2:, w // 2:]).max() <= 4


def test_io_file_read_names_a_missing_file(tmp_path):
    missing = tmp_path / "missing.jpg"
    with pytest.raises(RuntimeError, match="io.file.read.*missing.jpg"):
        sliced([missing, missing]).run()
