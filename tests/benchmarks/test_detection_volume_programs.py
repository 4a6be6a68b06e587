"""benchmarks/ssd_side_by_side.py (SSD300's COCO training pipeline) and benchmarks/nnunet_side_by_side.py (nnU-Net's
3-D training loader): their ``make`` writes a data set the programs read, and each program's ``--cpu`` variant runs
one batch through sluice with the outputs the training code expects."""

import importlib
import json
import os

import numpy as np
import pytest
import torch

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")


@pytest.fixture
def bench(monkeypatch):
    """The benchmarks folder importable (make's worker processes find its functions by module name)."""
    monkeypatch.syspath_prepend(BENCH)
    return importlib.import_module


def test_ssd_default_boxes_are_ssd300s(bench):
    boxes = bench("ssd_side_by_side").dboxes300_ltrb()
    assert boxes.shape == (8732, 4) and boxes.dtype == np.float32
    # the first: the 38 x 38 map's first cell (centre 4/300), size 21/300; the last: the 1 x 1 map's (h, w) box of
    # aspect 2, centre 0.5, w = 0.87 / sqrt(2), h = 0.87 * sqrt(2) clamped to 1
    np.testing.assert_allclose(boxes[0], [4 / 300 - 0.035, 4 / 300 - 0.035, 4 / 300 + 0.035, 4 / 300 + 0.035],
                               atol=1e-6)
    w = 0.87 / np.sqrt(2)
    np.testing.assert_allclose(boxes[-1], [0.5 - w / 2, 0.0, 0.5 + w / 2, 1.0], atol=1e-6)


def test_ssd_make_and_one_cpu_batch(tmp_path, bench):
    ssd = bench("ssd_side_by_side")
    ssd.make(str(tmp_path), count=8, processes=2)
    with open(tmp_path / "annotations" / "instances_train2017.json") as f:
        doc = json.load(f)
    assert len(doc["images"]) == 8 and len(os.listdir(tmp_path / "train2017")) == 8
    assert {a["category_id"] for a in doc["annotations"]} <= set(ssd.COCO_IDS)
    assert all(1 <= sum(a["image_id"] == im["id"] for a in doc["annotations"]) <= 15 for im in doc["images"])
    pipe = ssd.build("sluice", str(tmp_path), batch=4, threads=2, fp16=True, cpu=True)()
    pipe.build()
    images, boxes, labels = (o.as_tensor() for o in pipe.run())
    pipe.close()
    assert images.shape == (4, 3, 300, 300) and images.dtype == torch.float16
    assert boxes.shape == (4, 8732, 4) and boxes.dtype == torch.float32
    assert labels.shape == (4, 8732) and not labels.dtype.is_floating_point
    assert 0 < int((labels > 0).sum()) and int(labels.max()) <= 80       # matched anchors, labels remapped to 1..80
    assert float(boxes[..., 2:].min()) >= 0 and float(boxes[..., :2].max()) <= 1  # [cx, cy, w, h] in [0, 1]


def test_nnunet_make_and_one_cpu_batch(tmp_path, bench):
    nn = bench("nnunet_side_by_side")
    nn.make(str(tmp_path), count=4, size=(40, 48, 48), processes=2)
    imgs = sorted(str(p) for p in tmp_path.glob("*_x.npy"))
    lbls = sorted(str(p) for p in tmp_path.glob("*_y.npy"))
    assert len(imgs) == len(lbls) == 4
    x, y = np.load(imgs[0]), np.load(lbls[0])
    assert x.dtype == np.float32 and y.dtype == np.uint8 and x.shape == y.shape and x.shape[0] == 1
    assert 32 <= x.shape[1] <= 48 and set(np.unique(y)) - {0, 1, 2} == set() and y.any()
    pipe = nn.build("sluice", imgs, lbls, batch=2, threads=2, patch=[32, 32, 32], cpu=True)()
    pipe.build()
    img, lbl = (o.as_tensor() for o in pipe.run())
    pipe.close()
    assert img.shape == (2, 1, 32, 32, 32) and img.dtype == torch.float32
    assert lbl.shape == (2, 1, 32, 32, 32) and lbl.dtype == torch.uint8
    assert set(torch.unique(lbl).tolist()) <= {0, 1, 2}
    fg = lbl > 0
    if fg.any():  # image and label stay paired: the objects are brighter (+1.5 in make) than their surroundings
        assert float(img[fg].mean() - img[~fg].mean()) > 0.3
