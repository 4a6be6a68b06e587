"""The fusion pass: [crop ->] resize -> crop_mirror_normalize on the GPU becomes one node, and that node computes
what the three operators compute one after the other (reference: the unfused CPU operators; tolerance: two grey
levels before normalisation (2 / std = 0.035) on single pixels, mean < 0.005, because the CPU resize of uint8 RGB
goes through Pillow, which rounds its intermediate pass and evaluates a sub-box in float32; on the GPU both sides
use the same float kernel and agree to fp16 rounding)."""

import numpy as np
import pytest
import torch

from sluice import fn, types
from sluice.ops.image import fused_crop_resize_normalize
from sluice.pipeline.passes import fusion
from sluice.pipeline.executor import topological_order
from sluice.pipeline.pipeline import Pipeline
from sluice.schema import BatchArgs, BatchContext
from sluice.testing import run_op

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def _imgs():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(60, 80), (75, 50), (40, 40)]]


def _graph(with_crop=True, resize_is_output=False, extra_consumer=False):
    pipe = Pipeline(batch_size=3, num_threads=1, device_id=None, seed=1, exec_async=False)
    with pipe:
        g = fn.external_source(source=lambda: _imgs(), layout="HWC").gpu()
        if with_crop:
            g = fn.crop(g, crop=(36, 36), crop_pos_x=0.25, device="gpu")
        r = fn.resize(g, resize_shorter=30, device="gpu")
        o = fn.crop_mirror_normalize(r, crop=(24, 24), mirror=fn.random.coin_flip(), mean=MEAN, std=STD,
                                     dtype=types.FLOAT, device="gpu")
        outs = [o]
        if resize_is_output:
            outs.append(r)
        if extra_consumer:
            outs.append(fn.flip(r, device="gpu"))
    return outs


def test_chain_is_fused_into_one_node():
    outs = _graph()
    nodes = topological_order(outs)
    fused = fusion.fuse(nodes, outs)
    names = [n.schema.name for n in fused]
    assert "resize" not in names and "crop" not in names and "crop_mirror_normalize" not in names
    node = next(n for n in fused if n.schema.name.startswith("_fused"))
    assert node.id == outs[0].op.id  # the fused node stands where crop_mirror_normalize stood
    assert node.const_args["has_crop"] is True and "c.mirror" in node.arg_inputs
    assert [n.schema.name for n in nodes].count("resize") == 1  # the input list is left alone


def test_not_fused_when_resize_output_is_used_elsewhere(monkeypatch):
    for outs in (_graph(resize_is_output=True), _graph(extra_consumer=True)):
        fused = fusion.fuse(topological_order(outs), outs)
        assert "resize" in [n.schema.name for n in fused]
    monkeypatch.setattr(fusion, "ENABLED", False)
    outs = _graph()
    assert "resize" in [n.schema.name for n in fusion.fuse(topological_order(outs), outs)]


@pytest.mark.parametrize("with_crop", [True, False])
def test_fused_kernel_equals_unfused_operators(with_crop):
    outs = _graph(with_crop=with_crop)
    node = next(n for n in fusion.fuse(topological_order(outs), outs) if n.schema.name.startswith("_fused"))
    imgs = _imgs()
    mirror = [1, 0, 1]
    ctx = BatchContext(node.schema.name, 3, [""] * 3, ["HWC"], torch.device("cpu"), None)
    args = BatchArgs(node.const_args, {"c.mirror": mirror}, 3)
    from sluice.pipeline.batch import Batch

    got = fused_crop_resize_normalize.fused_gpu(ctx, Batch([torch.from_numpy(i) for i in imgs], "HWC"), args=args)
    x = imgs
    if with_crop:
        x = [s.numpy() for s in run_op("crop", x, layout="HWC", crop=(36, 36), crop_pos_x=0.25).samples]
    x = [s.numpy() for s in run_op("resize", x, layout="HWC", resize_shorter=30).samples]
    ref = [run_op("crop_mirror_normalize", [s], layout="HWC", crop=(24, 24), mirror=m, mean=MEAN, std=STD)[0]
           for s, m in zip(x, mirror)]
    assert got.layout() == "CHW" and got.shape() == [(3, 24, 24)] * 3
    for a, b in zip(got.samples, ref):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2.01 / min(STD))
        assert np.abs(a.numpy() - b.numpy()).mean() < 0.005


@pytest.mark.cuda
def test_gpu_pipeline_fused_equals_unfused(monkeypatch):
    def run():
        pipe = Pipeline(batch_size=3, num_threads=1, device_id=0, seed=7, exec_async=False)
        with pipe:
            g = fn.external_source(source=lambda: _imgs(), layout="HWC").gpu()
            r = fn.resize(g, size=(32, 32), device="gpu")
            o = fn.crop_mirror_normalize(r, crop=(28, 28), mirror=fn.random.coin_flip(), mean=MEAN, std=STD,
                                         dtype=types.FLOAT16, device="gpu")
        pipe.set_outputs(o)
        (out,) = pipe.run()
        pipe.close()
        return out

    fused = run()
    monkeypatch.setattr(fusion, "ENABLED", False)
    plain = run()
    assert fused.shape() == plain.shape() == [(3, 28, 28)] * 3
    for a, b in zip(fused.samples, plain.samples):
        assert (a.float() - b.float()).abs().max().item() < 0.02


def test_fused_node_falls_back_to_unfused_kernels_for_padded_windows():
    pipe = Pipeline(batch_size=3, num_threads=1, device_id=None, seed=1, exec_async=False)
    with pipe:
        g = fn.external_source(source=lambda: _imgs(), layout="HWC").gpu()
        r = fn.resize(g, resize_shorter=20, device="gpu")
        o = fn.crop_mirror_normalize(r, crop=(24, 24), out_of_bounds_policy="pad", fill_values=[-5.0],
                                     output_layout="HWC", device="gpu")
    node = next(n for n in fusion.fuse(topological_order([o]), [o]) if n.schema.name.startswith("_fused"))
    from sluice.pipeline.batch import Batch

    imgs = _imgs()
    ctx = BatchContext(node.schema.name, 3, [""] * 3, ["HWC"], torch.device("cpu"), None)
    got = fused_crop_resize_normalize.fused_gpu(ctx, Batch([torch.from_numpy(i) for i in imgs], "HWC"),
                            args=BatchArgs(node.const_args, {}, 3))
    x = [s.numpy() for s in run_op("resize", imgs, layout="HWC", resize_shorter=20).samples]
    ref = run_op("crop_mirror_normalize", x, layout="HWC", crop=(24, 24), out_of_bounds_policy="pad",
                 fill_values=[-5.0], output_layout="HWC")
    assert got.shape() == ref.shape() == [(24, 24, 3)] * 3
    for a, b in zip(got.samples, ref.samples):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1.01)  # Pillow vs float resize: 1 grey level
        assert (a.numpy() == -5.0).any()
