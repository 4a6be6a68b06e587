"""The side-by-side rows benchmarks/torch_function_side_by_side.py and benchmarks/conditional_side_by_side.py (DALI
programs run with DALI and with sluice, issue 36) build and run on the CPU through sluice's mirror of DALI's module
tree (sluice.compat.dali), on a few generated JPEGs."""

import importlib.util
import os
import sys

import numpy as np
import pytest
import torch

cv2 = pytest.importorskip("cv2")

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
BASE = "sluice.compat.dali"
# crop_mirror_normalize of a 0 pixel, per channel (what rotate's fill becomes)
BLACK = [-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225]


def _program(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCHMARKS, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def jpegs(tmp_path):
    rng = np.random.default_rng(0)
    for i in range(8):
        folder = tmp_path / f"class{i % 2}"
        folder.mkdir(exist_ok=True)
        image = rng.integers(60, 200, (240 + 8 * i, 260 + 4 * i, 3), dtype=np.uint8)
        cv2.imwrite(str(folder / f"{i}.jpg"), image)
    return str(tmp_path)


def _check(images, labels, n):
    assert images.as_tensor().shape == (n, 3, 224, 224) and images.dtype == torch.float32
    assert sorted(labels.as_tensor().reshape(-1).tolist()) == [0] * (n // 2) + [1] * (n // 2)


def test_torch_function_program_runs_the_batch_function(jpegs):
    """The function gets the batch as a list of HWC uint8 samples (224 x 224 after resize and crop), and what it
    returns is what crop_mirror_normalize gets: an inverting transform gives the negated-and-shifted output."""
    program = _program("torch_function_side_by_side")
    seen = []

    def invert(batch):
        seen.append((tuple(batch.shape), batch.dtype))
        return 255 - batch

    plain = program.build(BASE, jpegs, batch_size=8, num_threads=2, device="cpu",
                          augment=program.batch_function(lambda b: b))()
    inverted = program.build(BASE, jpegs, batch_size=8, num_threads=2, device="cpu",
                             augment=program.batch_function(invert))()
    (a, labels), (b, _) = plain.run(), inverted.run()
    plain.close()
    inverted.close()
    _check(a, labels, 8)
    assert seen == [((8, 3, 224, 224), torch.uint8)]
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255
    # (255 - x - mean) / std == (255 - 2 mean) / std - (x - mean) / std
    torch.testing.assert_close(b.as_tensor(), (255 - 2 * mean) / std - a.as_tensor(), atol=1e-4, rtol=0)


def test_torch_function_program_with_torchvision(jpegs):
    pytest.importorskip("torchvision.transforms.v2")
    pipe = _program("torch_function_side_by_side").build(BASE, jpegs, batch_size=8, num_threads=2, device="cpu")()
    images, labels = pipe.run()
    pipe.close()
    _check(images, labels, 8)


def test_conditional_program_takes_every_branch_and_repeats_with_the_seed(jpegs):
    program = _program("conditional_side_by_side")
    outputs = []
    for _ in range(2):
        pipe = program.build(BASE, jpegs, batch_size=8, num_threads=2, seed=3, device="cpu")()
        images, labels = pipe.run()
        pipe.close()
        _check(images, labels, 8)
        outputs.append(images.as_tensor())
    torch.testing.assert_close(outputs[0], outputs[1], atol=0, rtol=0)
    # rotated samples have fill (0) in a corner; the others (hsv, flip) keep the image's pixels there
    corners = outputs[0][:, :, 0, 0]
    rotated = torch.isclose(corners, torch.tensor(BLACK), atol=1e-3).all(dim=1)
    assert 0 < int(rotated.sum()) < 8


def test_conditional_row_prints_its_result_line(jpegs, monkeypatch, capsys):
    """The row's command line (--cpu) runs a warm-up epoch and the timed batches through DALIGenericIterator."""
    program = _program("conditional_side_by_side")
    monkeypatch.setattr(sys, "argv", ["conditional_side_by_side.py", "sluice", jpegs, "--cpu", "--batch-size", "4",
                                      "--threads", "2", "--iters", "3"])
    program.main()
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("RESULT conditional sluice") and "img/s shape=(4, 3, 224, 224)" in line


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["torch_function_side_by_side", "conditional_side_by_side"])
def test_programs_run_on_the_gpu(jpegs, name):
    """The rows as the benchmark runs them: mixed decoder, the augmentations and the batch function on the GPU
    (the torch_function row with an identity batch function where torchvision is missing)."""
    program = _program(name)
    extra = {}
    if name.startswith("torch") and importlib.util.find_spec("torchvision") is None:
        extra["augment"] = program.batch_function(lambda b: b)
    outputs = []
    for _ in range(2):
        pipe = program.build(BASE, jpegs, batch_size=8, num_threads=2, seed=3, device="gpu", **extra)()
        images, labels = pipe.run()
        pipe.close()
        _check(images, labels, 8)
        assert images.as_tensor().is_cuda
        outputs.append(images.as_tensor())
    if name.startswith("conditional"):
        torch.testing.assert_close(outputs[0], outputs[1], atol=0, rtol=0)
