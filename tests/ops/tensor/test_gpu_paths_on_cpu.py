"""The GPU kernels of the colour, tensor and detection operators are device-agnostic torch code (the Triton
colour kernel aside, tested in test_color_triton.py): run them here on CPU tensors, on ragged batches with
per-sample arguments, and check they equal the per-sample CPU kernels. This covers the batched code paths
(grouping by shape, per-sample parameter tensors, concatenated boxes) without a GPU."""

import inspect

import numpy as np
import pytest
import torch

from sluice import types
from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext, SampleContext, get_schema

RNG = np.random.default_rng(0)
IMGS = [torch.from_numpy(RNG.integers(0, 256, s, dtype=np.uint8)) for s in ((6, 8, 3), (5, 4, 3), (6, 8, 3))]
BOXES = [torch.tensor([[0.1, 0.2, 0.5, 0.6]]), torch.zeros(0, 4), torch.tensor([[0.0, 0.1, 0.6, 0.9],
                                                                                [0.5, 0.5, 0.7, 0.8]])]
LABELS = [torch.tensor([1]), torch.zeros(0, dtype=torch.int64), torch.tensor([2, 3])]

SEQS = [torch.from_numpy(RNG.integers(0, 256, s, dtype=np.uint8)) for s in ((3, 5, 6, 3), (2, 4, 4, 3))]

CASES = [
    ("brightness_contrast", [SEQS], "FHWC", {}, dict(brightness=[[0.5, 1.0, 1.5], [2.0]])),  # per-frame values
    ("color_twist", [SEQS], "FHWC", {}, dict(hue=[[0.0, 30.0, 60.0], [10.0, -10.0]])),
    ("brightness_contrast", [IMGS], "HWC", dict(contrast=1.3), dict(brightness=[0.5, 1.0, 1.5])),
    ("brightness", [IMGS], "HWC", dict(dtype=types.FLOAT), dict(brightness_shift=[0.0, 0.1, -0.1])),
    ("contrast", [IMGS], "HWC", {}, dict(contrast=[0.0, 1.0, 2.0], contrast_center=[10.0, 128.0, 200.0])),
    ("hsv", [IMGS], "HWC", dict(value=0.9), dict(hue=[0.0, 45.0, -90.0], saturation=[1.0, 0.0, 1.5])),
    ("hue", [IMGS], "HWC", dict(image_type=types.BGR), dict(hue=[10.0, 20.0, 30.0])),
    ("saturation", [IMGS], "HWC", {}, dict(saturation=[0.2, 0.4, 2.0])),
    ("color_twist", [IMGS], "HWC", {}, dict(brightness=[0.5, 1.0, 1.2], contrast=[1.0, 0.5, 1.5])),
    ("color_space_conversion", [IMGS], "HWC", dict(image_type=types.RGB, output_type=types.YCbCr), {}),
    ("gaussian_blur", [IMGS], "HWC", {}, dict(sigma=[[0.8], [1.5], [1.0, 2.0]])),
    ("slice", [IMGS], "HWC", {}, dict(rel_start=[[0.1, 0.1], [0.0, 0.5], [0.5, 0.5]], rel_shape=[[0.5, 0.5]] * 3)),
    ("slice", [[torch.arange(n, dtype=torch.float32) for n in (30, 70, 50)]], "",
     dict(axes=[0], out_of_bounds_policy="pad", fill_values=[-1.0]), dict(start=[[-5], [0], [10]], shape=[[50]] * 3)),
    ("slice", [IMGS], "HWC", dict(start=[-1, -1], shape=[4, 4], out_of_bounds_policy="pad",
                                  fill_values=[1.0, 2.0, 3.0]), {}),
    ("one_hot", [[torch.tensor(1), torch.tensor([2]), torch.tensor(0)]], "", dict(num_classes=4, axis=-1), {}),
    ("bb_flip", [BOXES], "", dict(ltrb=True), dict(horizontal=[1, 0, 1], vertical=[0, 1, 1])),
    ("coord_flip", [[b.reshape(-1, 2) for b in BOXES]], "", dict(layout="xy"),
     dict(flip_x=[1, 0, 1], flip_y=[1, 1, 0], center_x=[0.5, 0.3, 0.1])),
    ("random_bbox_crop", [BOXES, LABELS], "", dict(scaling=[0.3, 1.0], aspect_ratio=[0.5, 2.0],
                                                   thresholds=[0.1, 0.5], num_attempts=10), {}),
]


def _is_batch_kernel(op_class) -> bool:
    """Whether a kernel takes whole batches (``fn(ctx, *batches, args)``) rather than one sample."""
    param = inspect.signature(op_class.kernel).parameters.get("args")
    return param is not None and param.kind is inspect.Parameter.KEYWORD_ONLY


OPENCV_ON_CPU = {"gaussian_blur", "hsv", "hue", "saturation", "color_twist", "color_space_conversion"}


@pytest.mark.parametrize("op,inputs,layout,const,per_sample", CASES, ids=[c[0] for c in CASES])
def test_batch_kernel_equals_sample_kernel(op, inputs, layout, const, per_sample):
    schema = get_schema(op)
    const_args, _ = schema.validate(dict(const), lambda v: False)
    if schema.random:
        const_args["seed"] = 5
    for name in per_sample:
        const_args.pop(name, None)
    n = len(inputs[0])
    args = BatchArgs(const_args, per_sample, n)
    ctx = BatchContext(op, n, [""] * n, [layout] * len(inputs), torch.device("cpu"), None, seed=5)
    batches = [Batch(list(x), layout) for x in inputs]
    outs = schema.kernels["gpu"].kernel(ctx, *batches, args=args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    # A random batch kernel draws sample i from the batch's generator by its index: the CPU kernel then runs on the
    # whole batch (on a batch of one, every sample would be sample 0)
    whole = None
    if _is_batch_kernel(schema.kernels["cpu"]) and schema.random:
        whole = schema.kernels["cpu"].kernel(ctx, *(Batch(list(x), layout) for x in inputs), args=args)
    for i in range(n):
        if whole is not None:
            want = tuple(w[i] for w in whole) if isinstance(whole, tuple) else whole[i]
        elif _is_batch_kernel(schema.kernels["cpu"]):      # the CPU kernel on a batch of this one sample
            one = BatchArgs(const_args, {k: [v[i]] for k, v in per_sample.items()}, 1)
            ctx1 = BatchContext(op, 1, [""], [layout] * len(inputs), torch.device("cpu"), None, seed=5)
            want = schema.kernels["cpu"].kernel(ctx1, *(Batch([x[i]], layout) for x in inputs), args=one)
            want = tuple(w[0] for w in want) if isinstance(want, tuple) else want[0]
        else:
            sctx = SampleContext(op, i, "", layout, seed=5)
            want = schema.kernels["cpu"].kernel(sctx, *(x[i] for x in inputs), **args.sample(i))
        want = want if isinstance(want, tuple) else (want,)
        assert len(want) == len(outs)
        for w, o in zip(want, outs):
            assert w.shape == o[i].shape and w.dtype == o[i].dtype
            # CPU kernels that call OpenCV (fixed point / float32 for uint8): one level of tolerance there.
            atol = 1 if op in OPENCV_ON_CPU else 1e-5
            torch.testing.assert_close(o[i].double(), w.double(), atol=atol, rtol=1e-5)


DENSE = torch.from_numpy(RNG.integers(0, 256, (3, 6, 8, 3), dtype=np.uint8))


@pytest.mark.parametrize("op,const", [
    ("slice", dict(rel_start=[0.25, 0.5], rel_shape=[0.5, 0.5])),
    ("slice", dict(start=[-1, 0], shape=[4, 4], out_of_bounds_policy="pad")),
    ("hsv", dict(hue=30.0)),
    ("brightness_contrast", dict(brightness=1.5)),
    ("color_space_conversion", dict(image_type=types.RGB, output_type=types.GRAY)),
    ("gaussian_blur", dict(sigma=1.0, dtype=types.FLOAT)),
    ("normalize", dict(axes=[0, 1])),
])
def test_dense_batches_equal_per_sample(op, const):
    schema = get_schema(op)
    const_args, _ = schema.validate(dict(const), lambda v: False)
    ctx = BatchContext(op, 3, [""] * 3, ["HWC"], torch.device("cpu"), None)
    out = schema.kernels["gpu"].kernel(ctx, Batch.from_dense(DENSE, "HWC"), args=BatchArgs(const_args, {}, 3))
    for i in range(3):
        one = schema.kernels["gpu"].kernel(ctx, Batch([DENSE[i].clone()], "HWC"), args=BatchArgs(const_args, {}, 1))
        torch.testing.assert_close(out[i], one[0])
