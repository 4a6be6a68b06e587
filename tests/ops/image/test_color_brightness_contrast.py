"""brightness_contrast / brightness / contrast against DALI's documented formula, evaluated in NumPy float64:
``out = brightness_shift * max_out + brightness * (contrast_center + contrast * (in - contrast_center))``.
Tolerance: exact after rounding for uint8 (+-1 where float32 and float64 round a .5 differently), 1e-6 for
float32."""

import numpy as np
import pytest
import torch

from sluice.ops.image.brightness_contrast import brightness_contrast_kernel


def _reference(x, b, s, c, cc, max_out):
    return s * max_out + b * (cc + c * (x.astype(np.float64) - cc))


def _image(seed=0, shape=(6, 7, 3)):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


@pytest.mark.parametrize("b,s,c", [(1.0, 0.0, 1.0), (1.3, 0.1, 0.7), (0.5, -0.2, 2.0), (-1.0, 1.0, 1.0)])
def test_uint8_matches_formula(b, s, c):
    img = _image()
    out = brightness_contrast_kernel(torch.from_numpy(img)[None], torch.tensor([b]), torch.tensor([s]),
                                     torch.tensor([c]), None)[0].numpy()
    ref = np.clip(np.round(_reference(img, b, s, c, 128.0, 255.0)), 0, 255)
    assert out.dtype == np.uint8
    assert np.abs(out.astype(int) - ref).max() <= 1


def test_negative_image_is_exact():
    img = _image(1)
    out = brightness_contrast_kernel(torch.from_numpy(img)[None], torch.tensor([-1.0]), torch.tensor([1.0]),
                                     torch.tensor([1.0]), None)[0].numpy()
    np.testing.assert_array_equal(out, 255 - img)


def test_float_input_uses_half_center_and_unit_range():
    x = np.random.default_rng(2).random((5, 4, 3)).astype(np.float32)
    out = brightness_contrast_kernel(torch.from_numpy(x)[None], torch.tensor([1.2]), torch.tensor([0.1]),
                                     torch.tensor([0.5]), None)[0].numpy()
    np.testing.assert_allclose(out, _reference(x, 1.2, 0.1, 0.5, 0.5, 1.0), atol=1e-6)


def test_per_sample_params_and_dtype_change():
    imgs = torch.from_numpy(np.stack([_image(3), _image(4)]))
    out = brightness_contrast_kernel(imgs, torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.0]),
                                     torch.tensor([0.0, 1.0]), torch.tensor([100.0, 0.0]), torch.float32)
    assert out.dtype == torch.float32
    assert torch.all(out[0] == 100.0)  # contrast 0: every pixel becomes the centre
    np.testing.assert_allclose(out[1].numpy(), imgs[1].numpy() * 2.0)  # no clamping for float output


def test_saturates_uint8():
    img = np.full((2, 2, 3), 200, np.uint8)
    out = brightness_contrast_kernel(torch.from_numpy(img)[None], torch.tensor([2.0]), torch.tensor([0.0]),
                                     torch.tensor([1.0]), None)
    assert int(out.max()) == 255


@pytest.mark.cuda
def test_cuda_equals_cpu():
    imgs = torch.from_numpy(np.stack([_image(5), _image(6)]))
    args = (torch.tensor([1.3, 0.7]), torch.tensor([0.05, -0.1]), torch.tensor([1.5, 0.8]), None)
    cpu = brightness_contrast_kernel(imgs, *args)
    gpu = brightness_contrast_kernel(imgs.cuda(), *args).cpu()
    assert (cpu.int() - gpu.int()).abs().max() <= 1


@pytest.mark.parametrize("params", [(1.3, 0.05, 0.7, None, None), (0.5, -0.2, 2.0, 100.0, None),
                                    (1.5, 0.0, 1.0, None, None), (-1.0, 1.0, 1.0, None, None)])
def test_cpu_lookup_table_equals_kernel(params):
    """The CPU operator looks uint8 pixels up in a table; it must hold exactly the kernel's values (ties too)."""
    from sluice.ops.image.brightness_contrast import uint8_table

    b, s, c, cc, _ = params
    x = torch.arange(256, dtype=torch.uint8)
    want = brightness_contrast_kernel(x[None], torch.tensor([b]), torch.tensor([s]), torch.tensor([c]),
                                      None if cc is None else torch.tensor([cc]))[0]
    np.testing.assert_array_equal(uint8_table(*params), want.numpy())
