"""fn.segmentation.random_object_bbox against scikit-image's connected components (``measure.label`` with face
connectivity, ``regionprops`` boxes), fn.segmentation.random_mask_pixel against NumPy's foreground masks, and
fn.roi_random_crop against DALI's documented ranges, on generated 2-D and 3-D label maps of different shapes."""

import numpy as np
import pytest
import torch
from skimage import measure

from sluice import fn
from sluice.schema import get_schema
from sluice.testing import run_op, run_pipeline


def _label_map(shape, seed):
    """Rectangular blobs of classes 1..3 (some touching only at a corner: separate blobs under face connectivity)."""
    rng = np.random.default_rng(seed)
    out = np.zeros(shape, np.uint8)
    for _ in range(6):
        lo = [int(rng.integers(0, s - 2)) for s in shape]
        ext = [int(rng.integers(1, max(2, s // 3))) for s in shape]
        out[tuple(slice(a, a + e) for a, e in zip(lo, ext))] = rng.integers(1, 4)
    out[(0,) * len(shape)] = 2  # a corner pixel
    out[(1,) * len(shape)] = 2  # diagonal neighbour: another blob with face connectivity
    return out


MAPS2D = [_label_map(s, i) for i, s in enumerate(((20, 30), (32, 17), (9, 40)))]
MAPS3D = [_label_map(s, 10 + i) for i, s in enumerate(((8, 12, 10), (6, 9, 14)))]


def _skimage_boxes(mask):
    lab = measure.label(mask, connectivity=1)
    nd = mask.ndim
    return {tuple(r.bbox) for r in measure.regionprops(lab)} if lab.max() else set(), nd


@pytest.mark.parametrize("maps", [MAPS2D, MAPS3D], ids=["2d", "3d"])
@pytest.mark.parametrize("fmt", ["anchor_shape", "start_end", "box"])
def test_random_object_bbox_returns_a_connected_blob_of_its_class(maps, fmt):
    outs = run_op("segmentation.random_object_bbox", maps, format=fmt, output_class=True, iterations=3)
    for i, m in enumerate(maps):
        nd = m.ndim
        if fmt == "box":
            box = outs[0][i].numpy()
            start, end = box[:nd], box[nd:]
            cls = int(outs[1][i])
        else:
            a, b = outs[0][i].numpy(), outs[1][i].numpy()
            start, end = (a, a + b) if fmt == "anchor_shape" else (a, b)
            cls = int(outs[2][i])
        assert outs[0][i].dtype == torch.int32
        assert cls in (1, 2, 3)
        boxes, _ = _skimage_boxes(m == cls)
        assert tuple(start.tolist()) + tuple(end.tolist()) in boxes


def test_random_object_bbox_draws_every_blob_and_class_weights_select_classes():
    m = MAPS2D[0]
    seen = set()
    for seed in range(40):
        a, s = run_op("segmentation.random_object_bbox", [m], seed=seed)
        seen.add(tuple(a[0].tolist()) + tuple((a[0] + s[0]).tolist()))
    every = set()
    for c in (1, 2, 3):
        every |= _skimage_boxes(m == c)[0]
    assert seen == every
    for seed in range(5):  # only class 3 has weight
        a, s, c = run_op("segmentation.random_object_bbox", [m], classes=[1, 2, 3], class_weights=[0, 0, 1],
                         output_class=True, seed=seed)
        assert int(c[0]) == 3
        assert tuple(a[0].tolist()) + tuple((a[0] + s[0]).tolist()) in _skimage_boxes(m == 3)[0]


def test_random_object_bbox_k_largest_threshold_and_background():
    m = np.zeros((20, 20), np.int32)
    m[0:2, 0:2] = 1  # small
    m[5:15, 5:12] = 1  # large
    m[17:19, 17:20] = 1  # small
    for seed in range(6):
        a, s = run_op("segmentation.random_object_bbox", [m], k_largest=1, seed=seed)
        assert a[0].tolist() == [5, 5] and s[0].tolist() == [10, 7]
        a, s = run_op("segmentation.random_object_bbox", [m], threshold=[3, 3], seed=seed)
        assert a[0].tolist() == [5, 5]
    # no blob passes the threshold: the whole input, class = background
    a, s, c = run_op("segmentation.random_object_bbox", [m], threshold=[11, 11], output_class=True)
    assert a[0].tolist() == [0, 0] and s[0].tolist() == [20, 20] and int(c[0]) == 0
    # foreground_prob=0: the whole input
    a, s = run_op("segmentation.random_object_bbox", [m], foreground_prob=0.0)
    assert s[0].tolist() == [20, 20]
    # class 0 as a foreground class moves the background below it
    a, s, c = run_op("segmentation.random_object_bbox", [np.zeros((4, 4), np.uint8)], classes=[0],
                     output_class=True)
    assert a[0].tolist() == [0, 0] and s[0].tolist() == [4, 4] and int(c[0]) == 0
    a, s, c = run_op("segmentation.random_object_bbox", [np.ones((4, 4), np.uint8)], classes=[5],
                     output_class=True)
    assert s[0].tolist() == [4, 4] and int(c[0]) == 0


def test_random_object_bbox_ignore_class_and_errors():
    m = MAPS2D[1]
    every = set()
    for c in (1, 2, 3):
        every |= _skimage_boxes(m == c)[0]
    for seed in range(5):
        b = run_op("segmentation.random_object_bbox", [m], ignore_class=True, format="box", seed=seed)
        assert tuple(b[0].tolist()) in every
    with pytest.raises(Exception, match="ignore_class"):
        run_op("segmentation.random_object_bbox", [m], ignore_class=True, output_class=True)
    with pytest.raises(Exception, match="unsupported input type"):
        run_op("segmentation.random_object_bbox", [m.astype(np.float32)])


def test_random_object_bbox_same_seed_same_boxes():
    a = run_op("segmentation.random_object_bbox", MAPS3D, format="box", seed=7)
    b = run_op("segmentation.random_object_bbox", MAPS3D, format="box", seed=7)
    assert torch.equal(a.as_tensor(), b.as_tensor())


# ---- random_mask_pixel ------------------------------------------------------------------------------------------
def test_object_boxes_in_the_mask_box_equal_skimage_in_order():
    """object_boxes labels only the box around the mask: the boxes of skimage's labelling of the whole map, in
    its order (first pixel, row-major), for blobs away from and touching the borders, and empty masks."""
    from sluice.ops.segmentation.random_object_bbox import object_boxes

    rng = np.random.default_rng(3)
    for shape in ((40, 50, 30), (17, 33), (1, 9, 1)):
        for _ in range(4):
            mask = np.zeros(shape, bool)
            for _ in range(int(rng.integers(1, 5))):
                lo = [int(rng.integers(0, s)) for s in shape]
                mask[tuple(slice(a, a + int(rng.integers(1, 6))) for a in lo)] = True
            lab = measure.label(mask, connectivity=1)
            assert object_boxes(mask).tolist() == [list(r.bbox) for r in measure.regionprops(lab)]  # label order
        assert object_boxes(np.zeros(shape, bool)).shape == (0, 2 * len(shape))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.uint16, bool])
def test_present_labels_equal_numpy_unique(dtype):
    from sluice.ops.segmentation.random_object_bbox import present_labels

    rng = np.random.default_rng(4)
    for lo, hi in ((0, 3), (0, 2), (5, 60), (-3, 4), (0, 200), (-1000, 30000)):
        info = np.iinfo(dtype) if dtype is not bool else None
        if info is not None and (lo < info.min or hi > info.max):
            continue
        data = rng.integers(lo, hi, (20, 30, 11)).astype(dtype) if dtype is not bool else rng.random((9, 9)) < 0.3
        data.reshape(-1)[::7] = data.reshape(-1)[0]  # gaps in the range: values absent between min and max
        assert present_labels(data) == [int(v) for v in np.unique(data)]
    assert present_labels(np.zeros((0, 4), np.uint8)) == []


@pytest.mark.parametrize("maps", [MAPS2D, MAPS3D], ids=["2d", "3d"])
def test_random_mask_pixel_lands_on_the_foreground(maps):
    for seed in range(4):
        pos = run_op("segmentation.random_mask_pixel", maps, foreground=1, value=2, seed=seed)
        assert pos.as_tensor().dtype == torch.int64
        for m, p in zip(maps, pos):
            assert m[tuple(p.tolist())] == 2
        pos = run_op("segmentation.random_mask_pixel", maps, foreground=1, threshold=1.5, seed=seed)
        for m, p in zip(maps, pos):
            assert m[tuple(p.tolist())] > 1.5


def test_random_mask_pixel_is_uniform_over_the_foreground():
    m = np.zeros((6, 7), np.uint8)
    fg = [(0, 0), (2, 3), (5, 6)]
    for y, x in fg:
        m[y, x] = 1
    counts = {}
    for seed in range(8):
        pos = run_op("segmentation.random_mask_pixel", [m] * 30, foreground=1, seed=seed)
        for p in pos:
            counts[tuple(p.tolist())] = counts.get(tuple(p.tolist()), 0) + 1
    assert set(counts) == set(fg)
    assert min(counts.values()) > 50  # 240 draws over 3 pixels


def test_random_mask_pixel_without_foreground_draws_anywhere_inside():
    maps = [np.zeros((5, 9), np.uint8), np.zeros((12, 3), np.uint8)]
    for foreground in (0, 1):  # no foreground pixel: any pixel
        pos = run_op("segmentation.random_mask_pixel", maps, foreground=foreground, iterations=2)
        for m, p in zip(maps, pos):
            assert (p.numpy() >= 0).all() and (p.numpy() < np.array(m.shape)).all()
    # a value out of the type's range has no foreground either
    pos = run_op("segmentation.random_mask_pixel", maps, foreground=1, value=300)
    assert (pos[1].numpy() < np.array([12, 3])).all()
    with pytest.raises(Exception, match="value and threshold"):
        run_op("segmentation.random_mask_pixel", maps, value=1, threshold=0.5)


def test_random_mask_pixel_batch_kernel_is_the_gpu_one():
    schema = get_schema("segmentation.random_mask_pixel")
    assert schema.kernels["cpu"].kernel is schema.kernels["gpu"].kernel


@pytest.mark.cuda
def test_random_mask_pixel_gpu_equals_cpu():
    for kw in (dict(foreground=1, value=3), dict(foreground=1), dict(foreground=0)):
        c = run_op("segmentation.random_mask_pixel", MAPS3D, seed=3, **kw)
        g = run_op("segmentation.random_mask_pixel", MAPS3D, seed=3, device="gpu", **kw).as_cpu()
        assert torch.equal(c.as_tensor(), g.as_tensor())


# ---- roi_random_crop --------------------------------------------------------------------------------------------
def test_roi_random_crop_ranges():
    for seed in range(10):
        # crop smaller than the ROI: inside it; larger: contains it, and stays inside the input
        (out,) = run_pipeline(lambda: fn.roi_random_crop(crop_shape=[4, 30], roi_start=[10, 5], roi_end=[20, 15],
                                                         in_shape=[40, 32]), batch_size=3, seed=seed)
        for s in out:
            y, x = s.tolist()
            assert 10 <= y <= 16
            assert 0 <= x <= 2 and x <= 5 and x + 30 >= 15
    (out,) = run_pipeline(lambda: fn.roi_random_crop(crop_shape=[5], roi_start=[3], roi_shape=[5]), batch_size=2)
    assert out.as_tensor().tolist() == [[3], [3]]
    vol = np.zeros((10, 12, 14), np.uint8)
    for seed in range(5):
        out = run_op("roi_random_crop", [vol, vol[:8]], crop_shape=[8, 4, 4], roi_start=[0, 2, 2],
                     roi_end=[4, 10, 10], seed=seed)
        for s, shape in zip(out, ((10, 12, 14), (8, 12, 14))):
            d, h, w = s.tolist()
            assert 0 <= d <= shape[0] - 8 and 2 <= h <= 6 and 2 <= w <= 6
    with pytest.raises(Exception, match="roi_end or roi_shape"):
        run_pipeline(lambda: fn.roi_random_crop(crop_shape=[4], roi_start=[0]), batch_size=1)
    with pytest.raises(Exception, match="larger than the input"):
        run_op("roi_random_crop", [vol], crop_shape=[11, 1, 1], roi_start=[0, 0, 0], roi_shape=[1, 1, 1])
