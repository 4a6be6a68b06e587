"""examples/lightning_datamodule.py: the DataModule gives Lightning (images, labels) batches of the right shapes,
with labels that match the class folders, and a Trainer fits on it."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

pytest.importorskip("lightning")

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "lightning_datamodule.py")


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("lightning_datamodule_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_datamodule_batches_and_fit(example, tmp_path):
    example.make_demo_data(str(tmp_path), per_class=5)
    dm = example.SluiceDataModule(str(tmp_path), batch_size=4, size=16, num_threads=1)
    dm.setup("fit")
    loader = dm.train_dataloader()
    assert len(loader) == 3  # 10 images, batches of 4, the last one partial
    batches = list(loader)
    assert [b[0].shape[0] for b in batches] == [4, 4, 2]
    assert batches[0][0].shape[1:] == (3, 16, 16) and batches[0][0].dtype == torch.float32
    labels = torch.cat([b[1] for b in batches])
    assert sorted(labels.tolist()) == [0] * 5 + [1] * 5
    # Red images (class 0) have a larger normalised red than blue channel; blue ones the opposite.
    images = torch.cat([b[0] for b in batches])
    red_minus_blue = images[:, 0].mean((1, 2)) - images[:, 2].mean((1, 2))
    assert ((red_minus_blue > 0) == (labels == 0)).all()
    trainer = example.pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False,
                                 enable_checkpointing=False, enable_progress_bar=False,
                                 enable_model_summary=False)
    trainer.fit(example.TinyNet(), dm)
    assert trainer.current_epoch == 1
