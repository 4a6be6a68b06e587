"""fn.box_encoder against a NumPy transcription of the SSD reference encoder (MLPerf's ``Encoder.encode``, which
DALI's operator follows, with the offsets of eq. 2 of the SSD paper and DALI's ``scale``), and fn.bbox_paste
against DALI's documented formulas, on generated ragged batches (samples with 0, 1 and many boxes)."""

import numpy as np
import pytest
import torch

from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext, get_schema
from sluice.testing import run_op

RNG = np.random.default_rng(39)


def _random_ltrb(m, rng=RNG):
    lo = rng.uniform(0.0, 0.7, (m, 2))
    wh = rng.uniform(0.05, 0.3, (m, 2))
    return np.concatenate([lo, np.minimum(lo + wh, 1.0)], 1).astype(np.float32)


def _anchors():
    """SSD-like default boxes on a 4x4 and a 2x2 grid with two aspect ratios each (40 anchors)."""
    rows = []
    for fm, s in ((4, 0.2), (2, 0.45)):
        for i in range(fm):
            for j in range(fm):
                cx, cy = (j + 0.5) / fm, (i + 0.5) / fm
                for w, h in ((s, s), (s * 1.4, s / 1.4)):
                    rows.append([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
    return np.clip(np.array(rows, np.float32), 0, 1)


def _iou(a, b):
    lo = np.maximum(a[:, None, :2], b[None, :, :2])
    hi = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), -1)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def _reference(boxes, labels, dboxes, criteria=0.5, offset=False, scale=1.0, means=(0, 0, 0, 0), stds=(1, 1, 1, 1)):
    """MLPerf SSD's Encoder.encode in NumPy (ties cannot occur on these random boxes)."""
    a = len(dboxes)
    to_cwh = lambda x: np.concatenate([(x[:, :2] + x[:, 2:]) / 2, x[:, 2:] - x[:, :2]], 1)  # noqa: E731
    labels_out = np.zeros(a, np.int32)
    bboxes_out = dboxes.astype(np.float64).copy()
    if len(boxes):
        ious = _iou(boxes.astype(np.float64), dboxes.astype(np.float64))  # (M, A)
        best_dbox_ious, best_dbox_idx = ious.max(0), ious.argmax(0)
        best_bbox_idx = ious.argmax(1)
        best_dbox_ious[best_bbox_idx] = 2.0
        best_dbox_idx[best_bbox_idx] = np.arange(len(boxes))
        masks = best_dbox_ious > criteria
        labels_out[masks] = labels[best_dbox_idx[masks]]
        bboxes_out[masks] = boxes[best_dbox_idx[masks]]
    else:
        masks = np.zeros(a, bool)
    out = to_cwh(bboxes_out)
    if not offset:
        return out, labels_out
    d = to_cwh(dboxes.astype(np.float64)) * scale
    b = out * scale
    enc = np.concatenate([((b[:, :2] - d[:, :2]) / d[:, 2:] - np.array(means[:2])) / np.array(stds[:2]),
                          (np.log(b[:, 2:] / d[:, 2:]) - np.array(means[2:])) / np.array(stds[2:])], 1)
    enc[~masks] = 0
    return enc, labels_out


COUNTS = (3, 0, 1, 7)


def _batch():
    boxes = [_random_ltrb(m) for m in COUNTS]
    labels = [RNG.integers(1, 80, m).astype(np.int32) for m in COUNTS]
    return boxes, labels


@pytest.mark.parametrize("kw", [dict(), dict(criteria=0.3),
                                dict(offset=True, scale=300.0, stds=[0.1, 0.1, 0.2, 0.2]),
                                dict(offset=True, means=[0.1, -0.2, 0.05, 0.0], stds=[0.5, 0.5, 2.0, 2.0])],
                         ids=["plain", "criteria", "ssd_offsets", "means"])
def test_box_encoder_equals_ssd_reference(kw):
    anchors = _anchors()
    boxes, labels = _batch()
    out_boxes, out_labels = run_op("box_encoder", boxes, labels, anchors=anchors.reshape(-1).tolist(), **kw)
    assert out_boxes.dense is not None and out_boxes.as_tensor().shape == (4, len(anchors), 4)
    for b, lab, got_b, got_l in zip(boxes, labels, out_boxes, out_labels):
        ref_b, ref_l = _reference(b, lab, anchors, **kw)
        np.testing.assert_array_equal(got_l.numpy(), ref_l)
        np.testing.assert_allclose(got_b.numpy(), ref_b, rtol=1e-4, atol=1e-4)
    assert (out_labels[1].numpy() == 0).all()  # no boxes: background everywhere
    assert (out_labels[2].numpy() > 0).sum() >= 1  # one box is matched to at least its best anchor


def test_every_box_gets_its_best_anchor_even_below_criteria():
    anchors = np.array([[0.0, 0.0, 0.5, 0.5], [0.5, 0.5, 1.0, 1.0]], np.float32)
    box = np.array([[0.0, 0.0, 0.9, 0.2]], np.float32)  # IoU with anchor 0 far below 0.5
    out_boxes, out_labels = run_op("box_encoder", [box], [np.array([5], np.int32)], anchors=anchors.reshape(-1))
    np.testing.assert_array_equal(out_labels[0].numpy(), [5, 0])
    np.testing.assert_allclose(out_boxes[0].numpy(), [[0.45, 0.1, 0.9, 0.2], [0.75, 0.75, 0.5, 0.5]], atol=1e-6)


def test_box_encoder_batch_kernel_on_cpu_tensors_matches_per_sample_runs():
    """The kernel the GPU runs, on CPU tensors: the padded batch equals each sample encoded alone."""
    anchors = _anchors()
    boxes, labels = _batch()
    schema = get_schema("box_encoder")
    kernel = schema.kernels["gpu"].kernel
    args = BatchArgs(schema.validate(dict(anchors=anchors.reshape(-1).tolist(), offset=True), lambda v: False)[0],
                     {}, len(boxes))
    ctx = BatchContext("box_encoder", len(boxes), [""] * 4, ["", ""], torch.device("cpu"), None)
    ob, ol = kernel(ctx, Batch([torch.from_numpy(b) for b in boxes]), Batch([torch.from_numpy(x) for x in labels]),
                    args=args)
    for i, (b, lab) in enumerate(zip(boxes, labels)):
        ref_b, ref_l = _reference(b, lab, anchors, offset=True)
        np.testing.assert_allclose(ob[i].numpy(), ref_b, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(ol[i].numpy(), ref_l)


def test_box_encoder_errors_name_the_problem():
    with pytest.raises(Exception, match="anchors"):
        run_op("box_encoder", [_random_ltrb(2)], [np.ones(2, np.int32)], anchors=[0.0, 0.0, 1.0])
    with pytest.raises(Exception, match="labels"):
        run_op("box_encoder", [_random_ltrb(2)], [np.ones(3, np.int32)], anchors=[0.0, 0.0, 1.0, 1.0])


@pytest.mark.cuda
def test_box_encoder_gpu_equals_cpu():
    anchors = _anchors().reshape(-1).tolist()
    boxes, labels = _batch()
    kw = dict(anchors=anchors, offset=True, scale=300.0, stds=[0.1, 0.1, 0.2, 0.2])
    cb, cl = run_op("box_encoder", boxes, labels, **kw)
    gb, gl = run_op("box_encoder", boxes, labels, device="gpu", **kw)
    torch.testing.assert_close(gb.as_cpu().as_tensor(), cb.as_tensor(), rtol=1e-5, atol=1e-5)
    assert torch.equal(gl.as_cpu().as_tensor(), cl.as_tensor())


# ---- bbox_paste -------------------------------------------------------------------------------------------------
def _paste_reference(b, ratio, px, py, ltrb):
    scale = 1 / ratio
    ox, oy = px * (ratio - 1) / ratio, py * (ratio - 1) / ratio
    out = b.astype(np.float64).copy()
    out[:, 0] = b[:, 0] * scale + ox
    out[:, 1] = b[:, 1] * scale + oy
    out[:, 2] = b[:, 2] * scale + (ox if ltrb else 0)
    out[:, 3] = b[:, 3] * scale + (oy if ltrb else 0)
    return out


@pytest.mark.parametrize("ltrb", [True, False])
def test_bbox_paste_equals_dali_formula_per_sample_args(ltrb):
    boxes = [_random_ltrb(m) for m in COUNTS]
    ratios = [np.float32(r) for r in (1.0, 2.0, 3.5, 1.25)]
    pxs = [np.float32(p) for p in (0.0, 0.3, 1.0, 0.5)]
    pys = [np.float32(p) for p in (1.0, 0.7, 0.0, 0.5)]
    from sluice import fn
    from sluice.testing import run_pipeline

    def build():
        b = fn.external_source(source=lambda: boxes, cycle=True)
        r = fn.external_source(source=lambda: ratios, cycle=True)
        x = fn.external_source(source=lambda: pxs, cycle=True)
        y = fn.external_source(source=lambda: pys, cycle=True)
        return fn.bbox_paste(b, ratio=r, paste_x=x, paste_y=y, ltrb=ltrb)

    (out,) = run_pipeline(build, batch_size=4)
    for b, r, px, py, got in zip(boxes, ratios, pxs, pys, out):
        assert got.shape == b.shape
        np.testing.assert_allclose(got.numpy(), _paste_reference(b, r, px, py, ltrb), atol=1e-6)
        if ltrb and got.numel():  # boxes inside [0, 1] stay there, even pasted at the far corner
            assert got.numpy().min() >= 0 and got.numpy().max() <= 1


def test_bbox_paste_keeps_boxes_inside_at_the_far_corner():
    from sluice.ops.detection.bbox_paste import paste_offsets

    ratio = np.array([3.0, 7.0, 1.1], np.float32)
    scale, ofs = paste_offsets(ratio, np.ones(3, np.float32))
    assert ((scale + ofs).astype(np.float32) <= 1).all()
    out = run_op("bbox_paste", [np.array([[0.0, 0.0, 1.0, 1.0]], np.float32)], ratio=3.0, paste_x=1.0, paste_y=1.0,
                 ltrb=True)
    assert float(out[0].max()) <= 1.0


def test_bbox_paste_rejects_bad_input():
    with pytest.raises(Exception, match="rows of 4"):
        run_op("bbox_paste", [np.zeros((2, 3), np.float32)], ratio=2.0)
    with pytest.raises(Exception, match="ratio"):
        run_op("bbox_paste", [np.zeros((2, 4), np.float32)], ratio=0.5)


@pytest.mark.cuda
def test_bbox_paste_gpu_equals_cpu():
    boxes = [_random_ltrb(m) for m in COUNTS]
    c = run_op("bbox_paste", boxes, ratio=2.5, paste_x=0.2, paste_y=0.9, ltrb=True)
    g = run_op("bbox_paste", boxes, ratio=2.5, paste_x=0.2, paste_y=0.9, ltrb=True, device="gpu").as_cpu()
    for a, b in zip(c, g):
        torch.testing.assert_close(b, a)
