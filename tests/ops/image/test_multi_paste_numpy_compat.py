"""fn.multi_paste against NumPy slice assignment (in_ids mosaics with per-sample anchors, shapes and output sizes,
relative forms, several inputs without in_ids, later pastes covering earlier ones, dtype) and
fn.segmentation.select_masks against DALI's documented example and NumPy selections."""

import numpy as np
import pytest
import torch

from sluice import fn, types
from sluice.schema import get_schema
from sluice.testing import run_op, run_pipeline

RNG = np.random.default_rng(8)
IMGS = [RNG.integers(1, 256, s, dtype=np.uint8) for s in ((20, 30, 3), (16, 16, 3), (25, 18, 3))]


def _reference(imgs, ids, in_anchors, shapes, out_anchors, out_size):
    out = np.zeros(tuple(out_size) + (imgs[0].shape[2],), imgs[0].dtype)
    for k, src in enumerate(ids):
        (iy, ix), (h, w), (oy, ox) = in_anchors[k], shapes[k], out_anchors[k]
        out[oy:oy + h, ox:ox + w] = imgs[src][iy:iy + h, ix:ix + w]
    return out


def _mosaic_args():
    ids = [np.array([0, 1, 2], np.int32), np.array([2], np.int32), np.array([1, 1], np.int32)]
    in_anchors = [np.array([[0, 0], [2, 3], [5, 1]], np.int32), np.array([[0, 0]], np.int32),
                  np.array([[0, 0], [4, 4]], np.int32)]
    shapes = [np.array([[10, 12], [8, 8], [9, 9]], np.int32), np.array([[25, 18]], np.int32),
              np.array([[16, 16], [6, 6]], np.int32)]
    out_anchors = [np.array([[0, 0], [4, 6], [10, 10]], np.int32), np.array([[1, 2]], np.int32),
                   np.array([[0, 0], [10, 10]], np.int32)]  # pastes overlap: the later wins
    sizes = [np.array([20, 22], np.int32), np.array([30, 20], np.int32), np.array([16, 16], np.int32)]
    return ids, in_anchors, shapes, out_anchors, sizes


def _run(device="cpu"):
    ids, ia, sh, oa, sz = _mosaic_args()

    def build():
        src = fn.external_source(source=lambda: IMGS, layout="HWC", cycle=True)
        src = src.gpu() if device == "gpu" else src
        nodes = [fn.external_source(source=lambda v=v: v, cycle=True) for v in (ids, ia, sh, oa, sz)]
        return fn.multi_paste(src, in_ids=nodes[0], in_anchors=nodes[1], shapes=nodes[2], out_anchors=nodes[3],
                              output_size=nodes[4], device=device)

    (out,) = run_pipeline(build, batch_size=3, device_id=0 if device == "gpu" else None)
    return out


def test_multi_paste_mosaic_equals_numpy():
    out = _run()
    ids, ia, sh, oa, sz = _mosaic_args()
    assert out.layout() == "HWC"
    for i in range(3):
        ref = _reference(IMGS, ids[i].tolist(), ia[i].tolist(), sh[i].tolist(), oa[i].tolist(), sz[i].tolist())
        np.testing.assert_array_equal(out[i].numpy(), ref)


def test_multi_paste_several_inputs_relative_forms_and_dtype():
    a = [np.full((8, 8, 1), 10, np.uint8), np.full((8, 8, 1), 20, np.uint8)]
    b = [np.full((8, 8, 1), 200, np.uint8), np.full((8, 8, 1), 250, np.uint8)]
    out = run_op("multi_paste", a, b, layout="HWC", shapes_rel=[0.5, 0.5, 0.5, 0.5],
                 out_anchors_rel=[0.0, 0.0, 0.5, 0.5], dtype=types.FLOAT)
    assert out[0].dtype == torch.float32 and tuple(out[0].shape) == (8, 8, 1)
    ref = np.zeros((8, 8), np.float32)
    ref[:4, :4] = 10
    ref[4:, 4:] = 200
    np.testing.assert_array_equal(out[0].numpy()[..., 0], ref)
    assert float(out[1][5, 5, 0]) == 250
    with pytest.raises(Exception, match="out of its bounds"):
        run_op("multi_paste", a, layout="HWC", in_ids=[0], in_anchors=[4, 4], shapes=[6, 6])
    with pytest.raises(Exception, match="give output_size"):
        run_op("multi_paste", IMGS, layout="HWC", in_ids=[0])


def test_multi_paste_kernel_on_cpu_tensors_is_the_gpu_kernel():
    schema = get_schema("multi_paste")
    assert schema.kernels["cpu"].kernel is schema.kernels["gpu"].kernel


@pytest.mark.cuda
def test_multi_paste_gpu_equals_cpu():
    c, g = _run("cpu"), _run("gpu").as_cpu()
    for a, b in zip(c, g):
        assert torch.equal(a, b)


# ---- select_masks -------------------------------------------------------------------------------------------------
def test_select_masks_dali_example_and_reindex():
    polygons = np.array([[0, 0, 3], [1, 3, 7], [2, 7, 10]], np.int32)
    vertices = np.arange(20, dtype=np.float32).reshape(10, 2)
    ids = np.array([2, 0], np.int32)
    p, v = run_op("segmentation.select_masks", [ids], [polygons], [vertices])
    assert p[0].tolist() == [[2, 0, 3], [0, 3, 6]]
    np.testing.assert_array_equal(v[0].numpy(), np.concatenate([vertices[7:10], vertices[0:3]]))
    p, _ = run_op("segmentation.select_masks", [ids], [polygons], [vertices], reindex_masks=True)
    assert p[0].tolist() == [[0, 0, 3], [1, 3, 6]]
    with pytest.raises(Exception, match="not present"):
        run_op("segmentation.select_masks", [np.array([5], np.int32)], [polygons], [vertices])
    with pytest.raises(Exception, match="duplicated"):
        run_op("segmentation.select_masks", [np.array([1, 1], np.int32)], [polygons], [vertices])
    with pytest.raises(Exception, match="out of the 10 vertices"):
        run_op("segmentation.select_masks", [np.array([1], np.int32)], [np.array([[1, 3, 12]], np.int32)],
               [vertices])
