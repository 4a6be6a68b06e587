"""debayer against OpenCV's ``cv2.demosaicing``: the CPU operator is OpenCV for each algorithm; the GPU batch kernel
(OpenCV's bilinear algorithm, also standing for DALI's NPP ``default_npp``) equals ``COLOR_Bayer*2RGB`` exactly,
borders included, for all four patterns, uint8 and uint16, ragged batches and per-sample patterns."""

import cv2
import numpy as np
import pytest

from _image_effects_data import noise_images, run_kernel, samples_of
from sluice.ops.image.debayer import debayer_gpu
from sluice.testing import run_op

PATTERNS = {(0, 0): "BG", (0, 1): "GB", (1, 0): "GR", (1, 1): "RG"}
SHAPES = [(20, 30), (17, 9), (26, 26), (8, 11)]


def _mosaics(dtype=np.uint8, seed=0):
    imgs = noise_images(SHAPES, channels=None, seed=seed)
    return [i.astype(dtype) * (257 if dtype == np.uint16 else 1) for i in imgs]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_gpu_kernel_equals_opencv_bilinear(dtype):
    raws = _mosaics(dtype)
    blues = [[0, 0], [0, 1], [1, 0], [1, 1]]
    got = run_kernel("debayer", debayer_gpu, raws, "HW", per_sample={"blue_position": blues})
    for raw, blue, out in zip(raws, blues, samples_of(got)):
        ref = cv2.demosaicing(raw, getattr(cv2, f"COLOR_Bayer{PATTERNS[tuple(blue)]}2RGB"))
        assert out.dtype == raw.dtype and out.shape == raw.shape + (3,)
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("algorithm,suffix", [("bilinear_ocv", "2RGB"), ("edgeaware_ocv", "2RGB_EA"),
                                              ("vng_ocv", "2RGB_VNG"), ("gray_ocv", "2GRAY")])
def test_cpu_operator_is_opencv(algorithm, suffix):
    raws = [r[..., None] for r in _mosaics()]  # HWC with one channel
    out = run_op("debayer", raws, layout="HWC", blue_position=[1, 0], algorithm=algorithm)
    assert out.layout() == "HWC"
    for raw, o in zip(raws, out):
        ref = cv2.demosaicing(raw[..., 0], getattr(cv2, f"COLOR_BayerGR{suffix}"))
        np.testing.assert_array_equal(o.numpy(), ref.reshape(ref.shape[0], ref.shape[1], -1))


def test_sequences_and_errors():
    frames = np.stack(_mosaics()[:1] * 3)
    out = run_op("debayer", [frames], layout="FHW", blue_position=[0, 1])[0]
    assert tuple(out.shape) == frames.shape + (3,)
    ref = cv2.demosaicing(frames[0], cv2.COLOR_BayerGB2RGB)
    np.testing.assert_array_equal(out.numpy()[2], ref)
    with pytest.raises(Exception, match="GPU only"):
        run_op("debayer", _mosaics(), layout="HW", blue_position=[0, 0], algorithm="default_npp")
    with pytest.raises(Exception, match="CPU only"):
        run_kernel("debayer", debayer_gpu, _mosaics(), "HW", blue_position=[0, 0], algorithm="vng_ocv")
    with pytest.raises(Exception, match="one channel"):
        run_op("debayer", noise_images(), layout="HWC", blue_position=[0, 0])


@pytest.mark.cuda
def test_gpu_equals_cpu():
    raws = _mosaics()
    cpu = run_op("debayer", raws, layout="HW", blue_position=[1, 1])
    gpu = run_op("debayer", raws, layout="HW", blue_position=[1, 1], device="gpu").as_cpu()
    for a, b in zip(cpu, gpu):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
