"""Python operators against DALI's documented behaviour (nvidia/dali/ops/_operators/python_function.py and
plugin/pytorch/_torch_function.py): what the function gets (NumPy arrays, torch tensors, DLPack capsules), per
sample and per batch, several outputs, no copies of torch tensors, errors naming the operator and the sample,
and the DALI names (ops.PythonFunction, plugin.pytorch.fn.torch_python_function, TorchPythonFunction)."""

import numpy as np
import pytest
import torch

import sluice
from sluice import fn
from sluice.compat.dali import ops as dali_ops
from sluice.compat.dali import pipeline_def as dali_pipeline_def
from sluice.compat.dali.plugin import pytorch as dalitorch
from sluice.errors import PipelineError
from sluice.torch import fn as torch_fn

N = 4
_rng = np.random.default_rng(0)
IMAGES = [_rng.integers(0, 256, (4 + i % 2, 6, 3), dtype=np.uint8) for i in range(N)]
SAME_SHAPE = [_rng.integers(0, 256, (4, 6, 3), dtype=np.uint8) for _ in range(N)]


def _kw(device="cpu", **extra):
    return dict(batch_size=N, num_threads=2, device_id=0 if device == "gpu" else None, seed=1, **extra)


def _source(data, device="cpu"):
    node = fn.external_source(source=lambda: data, layout="HWC")
    return node.gpu() if device == "gpu" else node


def _run(build, device="cpu", **extra):
    @sluice.pipeline_def(**_kw(device, **extra))
    def pipe():
        return build()

    return [b.as_cpu() for b in pipe().run()]


def test_per_sample_numpy_with_several_outputs():
    seen = []

    def flip_and_mean(image):
        seen.append(type(image))
        return image[:, ::-1], np.float32(image.mean())

    flipped, mean = _run(lambda: fn.python_function(_source(IMAGES), function=flip_and_mean, num_outputs=2),
                         exec_async=False)
    assert seen == [np.ndarray] * N
    for i, img in enumerate(IMAGES):
        np.testing.assert_array_equal(flipped.at(i), img[:, ::-1])
        assert mean.at(i) == pytest.approx(img.mean(), rel=1e-6)
    assert mean.dtype == torch.float32 and mean.shape()[0] == ()


def test_batch_processing_gets_lists_and_may_return_one_array():
    def batched(images, scale):
        assert isinstance(images, list) and len(images) == N and isinstance(images[0], np.ndarray)
        return [img // 2 for img in images], np.stack([np.float32(s) * 2 for s in scale])

    half, doubled = _run(lambda: fn.python_function(
        _source(IMAGES), fn.external_source(source=lambda: [np.float32(i) for i in range(N)]),
        function=batched, batch_processing=True, num_outputs=2))
    for i, img in enumerate(IMAGES):
        np.testing.assert_array_equal(half.at(i), img // 2)
    assert doubled.as_tensor().tolist() == [0.0, 2.0, 4.0, 6.0]


def test_calls_keep_their_order_and_run_without_outputs():
    calls = []

    def count(image):
        calls.append(int(image[0, 0, 0]))

    @sluice.pipeline_def(**_kw(exec_async=False, exec_pipelined=False))
    def pipe():
        images = _source(IMAGES)
        fn.python_function(images, function=count, num_outputs=0)  # unused: preserved, as in DALI
        return images

    p = pipe()
    p.run()
    p.run()
    assert calls == [int(img[0, 0, 0]) for img in IMAGES] * 2


def test_torch_function_gets_views_and_its_tensor_is_the_batch():
    """No copies: the samples the function gets are views of one buffer, and a batch tensor it returns is the
    pipeline's output itself."""
    made = {}

    def flip_batch(images):
        assert all(isinstance(x, torch.Tensor) for x in images)
        made["storages"] = {x.untyped_storage().data_ptr() for x in images}
        made["out"] = torch.stack(images).flip(2)
        return made["out"]

    @sluice.pipeline_def(**_kw(exec_async=False))
    def pipe():
        dense = fn.external_source(source=lambda: np.stack(SAME_SHAPE), layout="HWC")  # one buffer
        return torch_fn.torch_python_function(dense, function=flip_batch, batch_processing=True)

    out = pipe().run()[0]
    assert len(made["storages"]) == 1
    assert out.dense is not None and out.dense.data_ptr() == made["out"].data_ptr()
    for i, img in enumerate(SAME_SHAPE):
        np.testing.assert_array_equal(out.at(i), img[:, ::-1])


def test_torch_function_per_sample_and_dlpack():
    def per_sample(x):
        assert isinstance(x, torch.Tensor)
        return x.float().mean(dim=-1)

    def capsules(xs):
        assert all(type(x).__name__ == "PyCapsule" for x in xs)
        return [torch.from_dlpack(x) + 1 for x in xs]

    gray, plus = _run(lambda: (torch_fn.torch_python_function(_source(IMAGES), function=per_sample),
                               fn.dl_tensor_python_function(_source(IMAGES), function=capsules)))
    for i, img in enumerate(IMAGES):
        np.testing.assert_allclose(gray.at(i), img.astype(np.float32).mean(-1), rtol=1e-6)
        np.testing.assert_array_equal(plus.at(i), img + 1)


def test_errors_name_the_operator_and_the_sample():
    def fail_on_tall(image):
        if image.shape[0] == 5:
            raise ValueError("too tall")
        return image

    with pytest.raises(PipelineError, match=r"fn.python_function \(device 'cpu'\) on sample 1.*ValueError: too tall"):
        _run(lambda: fn.python_function(_source(IMAGES), function=fail_on_tall))
    with pytest.raises(PipelineError, match=r"fn.torch_python_function.*must return a tuple"):
        _run(lambda: torch_fn.torch_python_function(_source(IMAGES), function=lambda x: x, num_outputs=2)[0])
    with pytest.raises(PipelineError, match="output 0 has 1 samples for a batch of 4"):
        _run(lambda: fn.python_function(_source(IMAGES), function=lambda xs: [xs[0]], batch_processing=True))


def test_dali_names():
    def flip(image):
        return image[::-1]

    @dali_pipeline_def(**_kw())
    def pipe():
        images = _source(IMAGES)
        a = dali_ops.PythonFunction(flip)(images)  # DALI's class takes the function positionally
        b = dali_ops.DLTensorPythonFunction(lambda xs: [torch.from_dlpack(x) for x in xs])(images)
        c = dalitorch.fn.torch_python_function(images, function=lambda x: x.flip(0))
        d = dalitorch.TorchPythonFunction(function=lambda xs: [x.flip(0) for x in xs], batch_processing=True)(images)
        return a, b, c, d

    a, b, c, d = pipe().run()
    for i, img in enumerate(IMAGES):
        for out in (a, c, d):
            np.testing.assert_array_equal(out.at(i), img[::-1])
        np.testing.assert_array_equal(b.at(i), img)


def test_python_function_in_a_conditional_branch():
    sizes = []

    def brightness(image):
        return np.float32(image.mean())

    def record(images):
        sizes.append(len(images))
        return [img[:, ::-1] for img in images]

    @sluice.pipeline_def(enable_conditionals=True, **_kw(exec_async=False))
    def pipe():
        images = _source(IMAGES)
        if fn.python_function(images, function=brightness) > 127.5:
            images = fn.python_function(images, function=record, batch_processing=True)
        return images

    out = pipe().run()[0]
    bright = [img.mean() > 127.5 for img in IMAGES]
    assert sizes == [sum(bright)]
    for i, img in enumerate(IMAGES):
        np.testing.assert_array_equal(out.at(i), img[:, ::-1] if bright[i] else img)


def test_torchvision_v2_transform_as_batched_torch_function():
    v2 = pytest.importorskip("torchvision.transforms.v2")
    transform = v2.Compose([v2.RandomHorizontalFlip(p=1.0), v2.ToDtype(torch.float32, scale=True)])

    def apply(images):
        return transform(torch.stack(images).permute(0, 3, 1, 2))

    out = _run(lambda: torch_fn.torch_python_function(_source(SAME_SHAPE), function=apply,
                                                      batch_processing=True))[0]
    want = torch.from_numpy(np.stack(SAME_SHAPE)).permute(0, 3, 1, 2).flip(-1).float() / 255
    torch.testing.assert_close(out.as_tensor(), want)


def test_samples_that_are_rows_of_one_tensor_make_a_dense_batch_without_a_copy(device):
    """DALI's batch functions return ``list(batch_tensor)``: those rows become the dense batch they are views of
    (no per-sample path downstream); samples that are not such rows stay a list, with the same values."""
    made = {}

    def rows(xs):
        made["out"] = torch.stack(xs).flip(1).contiguous()
        return list(made["out"])

    def not_rows(xs):
        return [x.flip(0).clone() for x in xs]

    def build():
        images = _source(SAME_SHAPE, device)
        return tuple(torch_fn.torch_python_function(images, function=f, batch_processing=True, device=device)
                     for f in (rows, not_rows))

    a, b = _run(build, device, exec_async=False)
    assert a.dense is not None and b.dense is None
    if device == "cpu":  # on the GPU _run hands out a host copy
        assert a.dense.data_ptr() == made["out"].data_ptr()
    for i, img in enumerate(SAME_SHAPE):  # NumPy's flip, both ways
        np.testing.assert_array_equal(a.as_cpu().at(i), img[::-1])
        np.testing.assert_array_equal(b.as_cpu().at(i), img[::-1])


@pytest.mark.cuda
def test_gpu_functions_get_cuda_tensors_on_the_pipeline_stream():
    kinds = []

    def per_sample(x):
        kinds.append((type(x), x.device.type))
        return x.flip(0)

    def batch(xs):
        return torch.stack(xs).flip(1)

    def build():
        images = _source(SAME_SHAPE, "gpu")
        return (fn.python_function(images, function=per_sample, device="gpu"),
                torch_fn.torch_python_function(images, function=batch, batch_processing=True, device="gpu"),
                fn.dl_tensor_python_function(images, function=lambda xs: [torch.from_dlpack(x) for x in xs],
                                             device="gpu"))

    a, b, c = _run(build, "gpu", exec_async=False)
    assert kinds == [(torch.Tensor, "cuda")] * N
    for i, img in enumerate(SAME_SHAPE):
        np.testing.assert_array_equal(a.at(i), img[::-1])
        np.testing.assert_array_equal(b.at(i), img[::-1])
        np.testing.assert_array_equal(c.at(i), img)


@pytest.mark.cuda
def test_gpu_torch_function_output_is_not_copied():
    made = {}

    def keep(xs):
        made["out"] = torch.stack(xs) * 2
        return made["out"]

    @sluice.pipeline_def(**_kw("gpu", exec_async=False))
    def pipe():
        return torch_fn.torch_python_function(_source(SAME_SHAPE, "gpu"), function=keep, batch_processing=True,
                                              device="gpu")

    out = pipe().run()[0]
    assert out.device == "gpu" and out.dense.data_ptr() == made["out"].data_ptr()
