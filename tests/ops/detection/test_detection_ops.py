"""bb_flip, coord_flip and random_bbox_crop as pipeline operators. The boxes must stay consistent with the image:
an image carries a painted rectangle, and after random_bbox_crop + fn.slice the rectangle's pixels in the crop
must lie where the output box says (within a pixel of rounding)."""

import numpy as np
import pytest
import torch

from sluice import fn
from sluice.pipeline.pipeline import Pipeline
from sluice.testing import run_op

H, W = 60, 80
BOX = (0.25, 0.2, 0.6, 0.7)  # l, t, r, b (normalised)


def _painted():
    img = np.zeros((H, W, 3), np.uint8)
    img[round(BOX[1] * H):round(BOX[3] * H), round(BOX[0] * W):round(BOX[2] * W)] = 255
    return img


def _crop_pipeline(device, seed, **kw):
    pipe = Pipeline(batch_size=4, num_threads=2, device_id=0 if device == "gpu" else None, seed=seed,
                    exec_async=False)
    with pipe:
        images = fn.external_source(source=lambda: [_painted()] * 4, layout="HWC", cycle=True)
        boxes = fn.external_source(source=lambda: [np.array([BOX], np.float32)] * 4, cycle=True)
        labels = fn.external_source(source=lambda: [np.array([7], np.int32)] * 4, cycle=True)
        anchor, shape, out_boxes, out_labels = fn.random_bbox_crop(boxes, labels, device=device, **kw)
        crops = fn.slice(images, anchor, shape, out_of_bounds_policy="trim_to_shape", device=device)
        pipe.set_outputs(crops, anchor, shape, out_boxes, out_labels)
    return pipe


SSD = dict(aspect_ratio=[0.5, 2.0], thresholds=[0.1, 0.3, 0.5], scaling=[0.3, 1.0], allow_no_crop=False,
           num_attempts=50, bbox_layout="xyXY")


def test_boxes_stay_on_the_painted_rectangle():
    pipe = _crop_pipeline("cpu", 11, **SSD)
    for _ in range(3):
        crops, _, shapes, boxes, labels = pipe.run()
        for crop, s, b, lab in zip(crops, shapes, boxes, labels):
            crop = crop.numpy()
            assert crop.shape[0] == pytest.approx(s[1].item() * H, abs=1)
            assert crop.shape[1] == pytest.approx(s[0].item() * W, abs=1)
            if len(b) == 0:
                continue
            assert lab.tolist() == [7]
            left, top, right, bottom = b[0].tolist()
            ys, xs = np.nonzero(crop[..., 0])
            h, w = crop.shape[:2]
            assert xs.min() == pytest.approx(left * w, abs=1.5) and xs.max() + 1 == pytest.approx(right * w, abs=1.5)
            assert ys.min() == pytest.approx(top * h, abs=1.5)
            assert ys.max() + 1 == pytest.approx(bottom * h, abs=1.5)
    pipe.close()


def test_output_count_follows_inputs_and_indices():
    boxes = [np.array([[0.1, 0.1, 0.4, 0.4], [0.5, 0.5, 0.9, 0.9]], np.float32)]
    assert len(run_op("random_bbox_crop", boxes)) == 3
    assert len(run_op("random_bbox_crop", boxes, [np.array([1, 2])])) == 4
    anchor, shape, out, idx = run_op("random_bbox_crop", boxes, output_bbox_indices=True)
    assert idx[0].tolist() == [0, 1]  # allow_no_crop with thresholds [0]: either option keeps both centres


def test_shape_layout_hw_and_fixed_crop_shape():
    boxes = [np.array([[0.0, 0.0, 1.0, 1.0]], np.float32)]
    anchor, shape, _ = run_op("random_bbox_crop", boxes, crop_shape=[40, 30], input_shape=[80, 60],
                              allow_no_crop=False, thresholds=[0.0])
    assert shape[0].tolist() == [40.0, 30.0]
    assert 0 <= anchor[0][0].item() <= 40 and 0 <= anchor[0][1].item() <= 30
    anchor, shape, _ = run_op("random_bbox_crop", boxes, scaling=[0.5, 0.5], aspect_ratio=[0.1, 10],
                              allow_no_crop=False, shape_layout="HW")
    assert shape[0].tolist() == [0.5, 0.5]


def test_bb_flip_and_coord_flip_with_per_sample_flags():
    flags = [np.int32(1), np.int32(0)]
    boxes = [np.array([[0.1, 0.2, 0.5, 0.6]], np.float32)] * 2
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, exec_async=False)
    with pipe:
        b = fn.external_source(source=lambda: boxes, cycle=True)
        f = fn.external_source(source=lambda: flags, cycle=True)
        pts = fn.external_source(source=lambda: [x.reshape(2, 2) for x in boxes], cycle=True)
        pipe.set_outputs(fn.bb_flip(b, ltrb=True, horizontal=f), fn.coord_flip(pts, layout="xy", flip_x=f))
    flipped, points = pipe.run()
    pipe.close()
    np.testing.assert_allclose(flipped[0].numpy(), [[0.5, 0.2, 0.9, 0.6]], atol=1e-6)
    np.testing.assert_allclose(flipped[1].numpy(), boxes[1], atol=1e-6)
    np.testing.assert_allclose(points[0].numpy(), [[0.9, 0.2], [0.5, 0.6]], atol=1e-6)


def test_bad_box_shapes_are_clear_errors():
    with pytest.raises(Exception, match="M x 4"):
        run_op("random_bbox_crop", [np.zeros((2, 5), np.float32)])
    with pytest.raises(Exception, match="labels for"):
        run_op("random_bbox_crop", [np.zeros((2, 4), np.float32)], [np.array([1, 2, 3])])


@pytest.mark.cuda
def test_gpu_equals_cpu():
    cpu = _crop_pipeline("cpu", 5, **SSD).run()
    gpu = _crop_pipeline("gpu", 5, **SSD).run()
    for c_batch, g_batch in zip(cpu, gpu):
        for c, g in zip(c_batch, g_batch.as_cpu()):
            torch.testing.assert_close(c, g)
    boxes = [np.array([[0.1, 0.2, 0.5, 0.6], [0.0, 0.1, 0.3, 0.9]], np.float32), np.zeros((0, 4), np.float32)]
    for op, kw in (("bb_flip", dict(ltrb=True, vertical=1)), ("coord_flip", dict(layout="xy", flip_y=1))):
        data = boxes if op == "bb_flip" else [b.reshape(-1, 2) for b in boxes]
        c = run_op(op, data, **kw)
        g = run_op(op, data, device="gpu", **kw).as_cpu()
        for x, y in zip(c, g):
            torch.testing.assert_close(x, y)


def test_bb_flip_with_random_coin_flip_node():
    box = np.array([[0.1, 0.2, 0.5, 0.6]], np.float32)
    pipe = Pipeline(batch_size=8, num_threads=2, device_id=None, seed=4, exec_async=False)
    with pipe:
        b = fn.external_source(source=lambda: [box] * 8, cycle=True)
        flip = fn.random.coin_flip()
        pipe.set_outputs(flip, fn.bb_flip(b, ltrb=True, horizontal=flip))
    flips, out = pipe.run()
    pipe.close()
    for f, o in zip(flips, out):
        want = [[0.5, 0.2, 0.9, 0.6]] if int(f) else box
        np.testing.assert_allclose(o.numpy(), want, atol=1e-6)
    assert len({int(f) for f in flips}) == 2  # both outcomes occur in 8 draws with this seed


def test_flip_and_bb_flip_keep_boxes_on_the_rectangle():
    """fn.flip on the image and fn.bb_flip on its boxes, driven by the same coin flips, stay consistent."""
    pipe = Pipeline(batch_size=6, num_threads=2, device_id=None, seed=9, exec_async=False)
    with pipe:
        images = fn.external_source(source=lambda: [_painted()] * 6, layout="HWC", cycle=True)
        boxes = fn.external_source(source=lambda: [np.array([BOX], np.float32)] * 6, cycle=True)
        h, v = fn.random.coin_flip(), fn.random.coin_flip()
        pipe.set_outputs(fn.flip(images, horizontal=h, vertical=v), fn.bb_flip(boxes, ltrb=True, horizontal=h,
                                                                               vertical=v))
    images, boxes = pipe.run()
    pipe.close()
    for img, b in zip(images, boxes):
        ys, xs = np.nonzero(img.numpy()[..., 0])
        left, top, right, bottom = b[0].tolist()
        np.testing.assert_allclose([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1],
                                   [left * W, top * H, right * W, bottom * H], atol=1e-3)
    assert len({tuple(np.round(b[0].numpy(), 4)) for b in boxes}) > 1  # some samples were flipped
