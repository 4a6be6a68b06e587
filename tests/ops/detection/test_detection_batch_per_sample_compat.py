"""The batch kernels of random_bbox_crop, bb_flip and box_encoder against their per-sample references on ragged
batches (1-15 boxes, some samples with none): random_bbox_crop's windows, boxes, labels and indices equal those of
``random_bbox_crop_sample`` run with each sample's generator (``BatchContext.sample_rng(i)``), with the compiled
core and with its pure-Python twin; box_encoder's core matching equals the torch matching it replaces on the CPU;
bb_flip's batch equals the kernel run sample by sample."""

import contextlib

import numpy as np
import pytest
import torch

from sluice import native
from sluice.ops.detection.bb_flip import bb_flip_kernel
from sluice.ops.detection.box_encoder import SCHEMA as ENCODER
from sluice.ops.detection.box_encoder import match_boxes
from sluice.ops.detection.random_bbox_crop import SCHEMA as CROP
from sluice.ops.detection.random_bbox_crop import random_bbox_crop_batch, random_bbox_crop_sample
from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext
from sluice.testing import run_op, run_pipeline
from sluice import fn

SSD = dict(aspect_ratio=[0.5, 2.0], thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9], scaling=[0.3, 1.0], bbox_layout="xyXY",
           allow_no_crop=True, num_attempts=1)
VARIANTS = {
    "ssd": SSD,
    "attempts": dict(SSD, num_attempts=5, allow_no_crop=False, thresholds=[0.1, 0.3], total_num_attempts=200),
    "fixed_ratio_overlap_any": dict(aspect_ratio=[1.0, 1.0], thresholds=[0.1, 0.5], scaling=[0.5, 0.9],
                                    threshold_type="overlap", all_boxes_above_threshold=False, bbox_layout="xyWH"),
    "prune_total": dict(thresholds=[0.2, 0.9], scaling=[0.3, 1.0], aspect_ratio=[0.5, 2.0], bbox_prune_threshold=0.4,
                        total_num_attempts=3, allow_no_crop=False, bbox_layout="yxYX"),
    "crop_shape_hw": dict(crop_shape=[30, 40], input_shape=[60, 80], thresholds=[0.0, 0.3], bbox_layout="yxHW",
                          shape_layout="HW"),
}


def _ragged(seed, n=24, layout="xyXY"):
    rng = np.random.default_rng(seed)
    boxes, labels = [], []
    for i in range(n):
        m = 0 if i % 7 == 3 else int(rng.integers(1, 16))
        lo = rng.uniform(0, 0.8, (m, 2))
        b = np.concatenate([lo, np.minimum(lo + rng.uniform(0.01, 0.6, (m, 2)), 1)], 1)
        if layout.startswith("yx"):
            b = b[:, [1, 0, 3, 2]]
        if layout[2:] in ("WH", "HW"):
            b[:, 2:] -= b[:, :2]
        boxes.append(torch.from_numpy(b.astype(np.float32)))
        labels.append(torch.from_numpy(rng.integers(1, 81, (m, 1)).astype(np.int32)))
    return boxes, labels


def _ctx(n, iteration=3):
    return BatchContext("random_bbox_crop", n, [""] * n, ["", ""], torch.device("cpu"), None, 987654321, iteration)


@pytest.mark.parametrize("core", [True, False], ids=["core", "python_twin"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_random_bbox_crop_batch_equals_per_sample_reference(name, core):
    kw = VARIANTS[name]
    boxes, labels = _ragged(7, layout=kw["bbox_layout"])
    args = {a.name: a.default for a in CROP.args.values()}
    args.update(kw, output_bbox_indices=True)
    n = len(boxes)
    if core and not native.available():
        pytest.skip("needs the compiled core")
    with contextlib.nullcontext() if core else native.fallback():
        assert native.available() is core
        anchor, shape, out, lab, idx = random_bbox_crop_batch(_ctx(n), Batch(boxes), Batch(labels),
                                                              args=BatchArgs(args, {}, n))
    hw = kw.get("shape_layout") == "HW"
    crop_shape = kw.get("crop_shape")
    input_shape = kw.get("input_shape")
    if hw and crop_shape:
        crop_shape, input_shape = crop_shape[::-1], input_shape[::-1]
    cropped = 0
    ref_kw = {k: v for k, v in kw.items() if k not in ("shape_layout", "crop_shape", "input_shape")}
    for i in range(n):
        crop, ref_boxes, keep, no_crop = random_bbox_crop_sample(
            boxes[i].numpy(), _ctx(n).sample_rng(i), crop_shape=crop_shape, input_shape=input_shape, **ref_kw)
        cropped += not no_crop
        ref_anchor, ref_shape = crop[:2], crop[2:] - crop[:2]
        if crop_shape:
            ref_anchor, ref_shape = ref_anchor * np.asarray(input_shape, float), np.asarray(crop_shape, float)
        if hw:
            ref_anchor, ref_shape = ref_anchor[::-1], ref_shape[::-1]
        np.testing.assert_array_equal(anchor[i].numpy(), ref_anchor.astype(np.float32))
        np.testing.assert_array_equal(shape[i].numpy(), ref_shape.astype(np.float32))
        np.testing.assert_array_equal(out[i].numpy(), ref_boxes.astype(np.float32).reshape(-1, 4))
        np.testing.assert_array_equal(lab[i].numpy(), labels[i].numpy()[keep])
        np.testing.assert_array_equal(idx[i].numpy(), keep.astype(np.int32))
    assert 0 < cropped  # windows were drawn, so the comparison covers the cropping, not only "no crop"


def test_random_bbox_crop_batch_of_empty_and_boxless_samples():
    args = {a.name: a.default for a in CROP.args.values()}
    args.update(SSD)
    empty = [torch.zeros((0, 4)), torch.zeros((0, 4))]
    anchor, shape, out = random_bbox_crop_batch(_ctx(2), Batch(empty), args=BatchArgs(args, {}, 2))
    assert [tuple(s.shape) for s in out.samples] == [(0, 4), (0, 4)]
    assert (shape.as_tensor() > 0).all()
    assert all(len(b) == 0 for b in random_bbox_crop_batch(_ctx(0), Batch([]), args=BatchArgs(args, {}, 0)))


def test_random_bbox_crop_in_a_pipeline_repeats_with_the_seed():
    boxes, labels = _ragged(3, n=8)
    runs = [run_op("random_bbox_crop", [b.numpy() for b in boxes], [lab.numpy() for lab in labels], seed=s, **SSD)
            for s in (5, 5, 6)]
    for a, b in zip(runs[0], runs[1]):
        assert all(torch.equal(x, y) for x, y in zip(a.samples, b.samples))
    assert any(not torch.equal(x, y) for x, y in zip(runs[0][0].samples, runs[2][0].samples))


def test_bb_flip_batch_equals_per_sample_kernel():
    boxes, _ = _ragged(11)
    flags = [i % 3 == 0 for i in range(len(boxes))]
    data = [b.numpy() for b in boxes]
    (out,) = run_pipeline(lambda: fn.bb_flip(fn.external_source(source=lambda: data), ltrb=True,
                                             horizontal=fn.external_source(source=lambda: [np.int32(f) for f in flags]),
                                             vertical=1), batch_size=len(data))
    for b, f, o in zip(boxes, flags, out.samples):
        torch.testing.assert_close(o, bb_flip_kernel(b, torch.tensor(f), torch.tensor(1), ltrb=True), rtol=0, atol=0)
    assert not torch.equal(out.samples[0], boxes[0])


def _anchors(k=300):
    rng = np.random.default_rng(2)
    lo = rng.uniform(0, 0.9, (k, 2))
    anchors = np.concatenate([lo, np.minimum(lo + rng.uniform(0.02, 0.5, (k, 2)), 1)], 1).astype(np.float32)
    anchors[7] = anchors[3]  # equal anchors: ties go to the last, as the torch reference's
    return anchors


def _encoder_inputs(label_dtype=torch.int32):
    boxes, labels = _ragged(5, n=20)
    boxes[4] = torch.cat([boxes[4], boxes[4][:1]])  # a repeated box: ties between boxes
    labels[4] = torch.cat([labels[4], labels[4][:1] + 1])
    return boxes, [lab.to(label_dtype) for lab in labels]


@pytest.mark.skipif(not native.available(), reason="needs the compiled core")
@pytest.mark.parametrize("threads", [0, 3])
def test_box_encoder_core_encoding_equals_torch_encoding(threads):
    """The core's matching and offset=False rows and labels against the torch matching and encoding, to the bit."""
    from sluice.ops.detection.box_encoder import encode_boxes

    boxes, labels = _encoder_inputs()
    anchors = _anchors()
    n = len(boxes)
    counts = torch.tensor([len(b) for b in boxes])
    padded = torch.zeros(n, int(counts.max()), 4)
    padded_labels = torch.zeros(n, int(counts.max()), dtype=torch.int32)
    for i, (b, lab) in enumerate(zip(boxes, labels)):
        padded[i, :len(b)], padded_labels[i, :len(b)] = b, lab.reshape(-1)
    pool = native.core().WorkerPool(threads) if threads else None
    try:
        out, out_labels, matched = native.detection.encode_boxes(torch.cat(boxes).numpy(), torch.cat(labels).numpy(),
                                                                 counts.numpy(), anchors, 0.5, pool=pool)
    finally:
        if pool is not None:
            pool.close()
    ref_best, ref_matched = match_boxes(padded, counts, torch.from_numpy(anchors), 0.5)
    ref_out, ref_labels = encode_boxes(padded, counts, padded_labels, torch.from_numpy(anchors), criteria=0.5)
    np.testing.assert_array_equal(matched, ref_matched.numpy())
    assert matched.sum() > n  # boxes were matched, beyond each box's forced anchor
    assert out.dtype == np.float32 and out_labels.dtype == np.int32
    assert torch.equal(torch.from_numpy(out), ref_out) and torch.equal(torch.from_numpy(out_labels), ref_labels)
    assert (out_labels[3] == 0).all() and not matched[3].any()  # sample 3 has no boxes


@pytest.mark.skipif(not native.available(), reason="needs the compiled core")
@pytest.mark.parametrize("label_dtype", [torch.int32, torch.int64, torch.float32, torch.uint8])
@pytest.mark.parametrize("offset", [False, True])
def test_box_encoder_cpu_kernel_equals_its_torch_kernel(offset, label_dtype):
    """The operator's CPU kernel (the core's encoding) against its GPU kernel's code run on the CPU (torch matching
    and encoding), to the bit, on ragged batches held as samples and as a padded batch (not back to back)."""
    boxes, labels = _encoder_inputs(label_dtype)
    anchors = _anchors()
    n = len(boxes)
    args = {a.name: a.default for a in ENCODER.args.values()}
    args.update(anchors=anchors.ravel().tolist(), criteria=0.5, offset=offset, scale=300.0,
                means=[0.1, -0.2, 0.05, 0.0] if offset else [0.0] * 4, stds=[0.1, 0.1, 0.2, 0.2])
    ctx = BatchContext("box_encoder", n, [""] * n, ["", ""], torch.device("cpu"), None)
    shapes = np.array([b.shape for b in boxes])
    padded = torch.zeros(n, int(shapes[:, 0].max()), 4)
    for i, b in enumerate(boxes):
        padded[i, :len(b)] = b
    ref = ENCODER.kernels["gpu"].kernel(ctx, Batch(boxes), Batch(labels), args=BatchArgs(args, {}, n))
    for held in (Batch(boxes), Batch.from_padded(padded, shapes)):
        got = ENCODER.kernels["cpu"].kernel(ctx, held, Batch(labels), args=BatchArgs(args, {}, n))
        for g, r in zip(got, ref):
            assert g.dtype == r.dtype and torch.equal(g.as_tensor(), r.as_tensor())
    assert (ref[1].as_tensor() != 0).sum() > n
