"""Each augmentation of sluice.auto_aug.augmentations against a named reference, on a ragged batch of generated
uint8 images, at chosen magnitude bins and signs: PIL.ImageOps (posterize, solarize, invert, autocontrast),
PIL.ImageEnhance (brightness, color, sharpness), OpenCV (equalizeHist; warpAffine for the shears, translations
and rotation, whose 5-bit weights differ by at most 1), and DALI's formulas in NumPy (contrast, solarize_add,
auto_contrast). Also the magnitude ranges of the three suites, as DALI has them."""

import cv2
import numpy as np
import pytest
from PIL import Image, ImageEnhance, ImageOps

import sluice
from sluice import fn, types
from sluice.auto_aug import augmentations as a
from sluice.auto_aug import auto_augment, rand_augment, trivial_augment
from sluice.auto_aug.core import augmentation, signed_bin

SIZES = [(23, 31), (40, 18), (16, 16)]
BINS = 11


def _images(smooth=False, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for h, w in SIZES:
        if smooth:  # gradients: OpenCV's 5-bit bilinear weights stay within 1 of exact interpolation
            yy, xx = np.mgrid[0:h, 0:w]
            img = np.stack([xx * 7 + 20, yy * 5 + 30, (xx + yy) * 3 + 10], 2) + rng.normal(0, 1.5, (h, w, 3))
        else:  # narrow ranges, so that equalisation and contrast stretching change them
            img = rng.integers(40, 200, (h, w, 3)) // 2 + 30
        out.append(np.clip(img, 0, 255).astype(np.uint8))
    return out


def _run(aug, images, bins, signs=None, num_bins=BINS, with_shape=False, **kwargs):
    """``aug`` on ``images`` with sample i at magnitude bin ``bins[i]`` (sign ``signs[i]``); returns arrays.
    ``with_shape``: pass the samples' shapes (a DataNode) as ``shape``."""
    @sluice.pipeline_def(batch_size=len(images), num_threads=1, device_id=None, seed=1)
    def pipe():
        x = fn.external_source(source=lambda: images, layout="HWC")
        b = fn.external_source(source=lambda: [np.int32(v) for v in bins])
        if signs is not None:
            b = signed_bin(b, random_sign=fn.external_source(source=lambda: [np.int32(v) for v in signs]))
        if with_shape:
            kwargs["shape"] = fn.shapes(x)
        return aug(x, magnitude_bin=b, num_magnitude_bins=num_bins, **kwargs)

    p = pipe()
    out = p.run()[0]
    p.close()
    return [out.at(i) for i in range(len(images))]


def _magnitude(aug, bin_, sign=0, num_bins=BINS):
    return np.linspace(*aug.mag_range, num_bins, dtype=np.float32)[bin_] * (-1) ** sign


def _close(got, ref, tol=1, share=1.0):
    diff = np.abs(got.astype(int) - ref.astype(int))
    assert diff.max() <= tol, f"max difference {diff.max()}"
    assert (diff == 0).mean() >= share, f"only {(diff == 0).mean():.3f} equal"


def _cv_warp(img, forward, fill=128):
    """OpenCV's bilinear warp by the forward matrix ``forward`` (pixel centres at +0.5, DALI's convention)."""
    inv = np.linalg.inv(np.vstack([forward, [0, 0, 1]]))[:2]
    a_, t = inv[:, :2], inv[:, 2]
    cv = np.hstack([a_, (a_ @ [0.5, 0.5] + t - 0.5)[:, None]])
    return cv2.warpAffine(img, cv, (img.shape[1], img.shape[0]), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=(fill,) * 3)


def test_shears_and_translations_match_opencv():
    images = _images(smooth=True)
    bins, signs = [3, 10, 6], [0, 1, 1]
    shape = [(h, w) for h, w in SIZES]
    for aug, forward in (
            (a.shear_x, lambda m, i: [[1, m, 0], [0, 1, 0]]),
            (a.shear_y, lambda m, i: [[1, 0, 0], [m, 1, 0]]),
            (a.translate_x_no_shape, lambda m, i: [[1, 0, m], [0, 1, 0]]),
            (a.translate_y_no_shape, lambda m, i: [[1, 0, 0], [0, 1, m]])):
        scaled = aug.augmentation(mag_range=(0, 20)) if "translate" in aug.name else aug
        out = _run(scaled, images, bins, signs)
        for i, img in enumerate(images):
            ref = _cv_warp(img, np.array(forward(_magnitude(scaled, bins[i], signs[i]), i), np.float64))
            _close(out[i], ref, share=0.9)
    # relative translations: a fraction of each sample's own width (shape per sample, a DataNode)
    out = _run(a.translate_x, images, bins, signs, with_shape=True)
    for i, img in enumerate(images):
        m = _magnitude(a.translate_x, bins[i], signs[i]) * shape[i][1]
        _close(out[i], _cv_warp(img, np.array([[1, 0, m], [0, 1, 0]], np.float64)), share=0.9)


def test_rotate_matches_opencv_about_the_centre():
    images = _images(smooth=True)
    bins, signs = [2, 5, 10], [1, 0, 0]
    out = _run(a.rotate, images, bins, signs, fill_value=0)
    for i, img in enumerate(images):
        h, w = img.shape[:2]
        m = cv2.getRotationMatrix2D(((w - 1) / 2, (h - 1) / 2), float(_magnitude(a.rotate, bins[i], signs[i])), 1.0)
        ref = cv2.warpAffine(img, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
        assert out[i].shape == img.shape  # keep_size
        _close(out[i][2:-2, 2:-2], ref[2:-2, 2:-2], share=0.9)


def test_posterize_solarize_invert_match_pil_imageops():
    images = _images()
    bins = [0, 6, 10]
    out = _run(a.posterize, images, bins)
    for i, img in enumerate(images):
        bits = int(np.clip(np.round(_magnitude(a.posterize, bins[i])), 1, 8))
        np.testing.assert_array_equal(out[i], np.asarray(ImageOps.posterize(Image.fromarray(img), bits)))
    solarize = a.solarize.augmentation(mag_range=(256, 0))
    out = _run(solarize, images, [1, 4, 8])
    for i, (img, b) in enumerate(zip(images, [1, 4, 8])):
        ref = ImageOps.solarize(Image.fromarray(img), float(_magnitude(solarize, b)))
        np.testing.assert_array_equal(out[i], np.asarray(ref))
    out = _run(a.invert, images, bins)
    for i, img in enumerate(images):
        np.testing.assert_array_equal(out[i], np.asarray(ImageOps.invert(Image.fromarray(img))))


def test_solarize_add_and_auto_contrast_match_dalis_formulas():
    images = _images()
    images[2][..., 1] = 77  # a channel of one value is left as it is
    out = _run(a.solarize_add, images, [2, 5, 10])
    for i, (img, b) in enumerate(zip(images, [2, 5, 10])):
        shift = np.uint8(_magnitude(a.solarize_add, b))
        np.testing.assert_array_equal(out[i], np.where(img < 128, img + shift, img))
    out = _run(a.auto_contrast, images, [0, 0, 0])
    for i, img in enumerate(images):
        lo, hi = img.min((0, 1)), img.max((0, 1))
        scale = np.float32(255) / np.where(hi > lo, hi - lo, 255).astype(np.float32)
        ref = np.round((img - np.where(hi > lo, lo, 0)) * scale).clip(0, 255).astype(np.uint8)
        np.testing.assert_array_equal(out[i], ref)
        _close(out[i], np.asarray(ImageOps.autocontrast(Image.fromarray(img))), share=0)  # PIL truncates
    assert out[0].min() == 0 and out[0].max() == 255


def test_enhance_operations_match_pil_and_formulas():
    images = _images()
    bins, signs = [4, 9, 1], [0, 1, 0]
    out = _run(a.brightness, images, bins, signs)
    for i, img in enumerate(images):
        f = 1 + _magnitude(a.brightness, bins[i], signs[i])
        _close(out[i], np.clip(np.round(img * np.float32(f)), 0, 255))
        _close(out[i], np.asarray(ImageEnhance.Brightness(Image.fromarray(img)).enhance(f)), share=0)  # truncates
    out = _run(a.contrast, images, bins, signs)
    for i, img in enumerate(images):
        f = np.float32(1 + _magnitude(a.contrast, bins[i], signs[i]))
        center = (img.reshape(-1, 3).mean(0) * [0.299, 0.587, 0.114]).sum()
        _close(out[i], np.clip(np.round(center + (img - center) * f), 0, 255), share=0.99)
    out = _run(a.color, images, bins, signs)
    rgb2yiq = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])
    yiq2rgb = np.array([[1.0, 0.956, 0.621], [1.0, -0.272, -0.647], [1.0, -1.107, 1.705]])
    for i, img in enumerate(images):  # DALI's saturation: I and Q scaled in YIQ space
        f = 1 + _magnitude(a.color, bins[i], signs[i])
        m = yiq2rgb @ np.diag([1.0, f, f]) @ rgb2yiq
        _close(out[i], np.clip(np.round(img @ m.T), 0, 255), share=0.9)  # the CPU kernel: cv2.transform
        # PIL blends with its own luma, and DALI's rounded YIQ constants are not exact inverses: within 3
        _close(out[i], np.asarray(ImageEnhance.Color(Image.fromarray(img)).enhance(f)), tol=3, share=0.3)
    out = _run(a.sharpness, images, bins, signs)
    for i, img in enumerate(images):
        f = 1 + _magnitude(a.sharpness, bins[i], signs[i])
        kernel = a.sharpness_kernel(f - 1)  # f * identity - (f - 1) * PIL's smoothing filter
        _close(out[i], cv2.filter2D(img, -1, kernel, borderType=cv2.BORDER_REFLECT_101), share=0.99)
        # PIL rounds the smoothed image before blending and leaves the 1-pixel border as it is: within 2
        ref = np.asarray(ImageEnhance.Sharpness(Image.fromarray(img)).enhance(f))
        _close(out[i][1:-1, 1:-1], ref[1:-1, 1:-1], tol=2, share=0.3)


def test_equalize_matches_opencv_and_identity():
    images = _images()
    out = _run(a.equalize, images, [0, 0, 0])
    for i, img in enumerate(images):  # OpenCV's float scale rounds some near-halves the other way: within 1
        ref = np.stack([cv2.equalizeHist(np.ascontiguousarray(img[..., c])) for c in range(3)], -1)
        _close(out[i], ref, share=0.99)
    for got, img in zip(_run(a.identity, images, [0, 0, 0]), images):
        np.testing.assert_array_equal(got, img)


def test_suites_have_dalis_magnitude_ranges():
    trivial = {aug.name: (aug.mag_range, aug.randomly_negate) for aug in
               trivial_augment.get_trivial_augment_wide_suite()}
    assert trivial == {
        "translate_x": ((0, 32), True), "translate_y": ((0, 32), True), "shear_x": ((0, 0.99), True),
        "shear_y": ((0, 0.99), True), "rotate": ((0, 135), True), "brightness": ((0.01, 0.99), True),
        "contrast": ((0.01, 0.99), True), "color": ((0.01, 0.99), True), "sharpness": ((0.01, 0.99), True),
        "posterize": ((8, 2), False), "solarize": ((256, 0), False), "equalize": (None, False),
        "auto_contrast": (None, False), "identity": (None, False)}
    rand = {aug.name: aug.mag_range for aug in rand_augment.get_rand_augment_suite(use_shape=True)}
    assert rand["translate_x"] == (0, 100 / 224) and rand["shear_x"] == (0, 0.3) and rand["posterize"] == (8, 4)
    non_monotonic = {aug.name: aug.mag_range for aug in rand_augment.get_rand_augment_non_monotonic_suite()}
    assert non_monotonic["brightness"] == (0.1, 1.9) and non_monotonic["solarize"] == (0, 256)
    policy = auto_augment.get_image_net_policy()
    assert len(policy.sub_policies) == 25 and policy.num_magnitude_bins == 11
    assert [(aug.name, p, m) for aug, p, m in policy.sub_policies[15]] == [("rotate", 1.0, 7), ("translate_y", 0.8, 9)]
    assert policy.augmentations["translate_y"].mag_range == (0, 250)
    assert a.poster_mask_uint8(0) == 0x80 and a.poster_mask_uint8(4.2) == 0xF0 and a.poster_mask_uint8(8) == 0xFF
    np.testing.assert_allclose(a.sharpness_kernel(0.0), np.eye(3)[1:2].T @ np.eye(3)[1:2], atol=0)
    with pytest.raises(ValueError, match="0 to 127"):
        a.solarize_add_shift(128)


def test_custom_augmentation_and_its_errors():
    @augmentation(mag_range=(0, 100), mag_to_param=lambda m: np.uint8(m))
    def add(data, value):
        return data + value

    images = _images()
    out = _run(add, images, [0, 5, 10])
    for i, (img, b) in enumerate(zip(images, [0, 5, 10])):
        np.testing.assert_array_equal(out[i], img + np.uint8(10 * b))
    assert add.augmentation(name="plus").name == "plus" and add.name == "add"
    with pytest.raises(TypeError, match="already an augmentation"):
        augmentation(add)
    with pytest.raises(TypeError, match="at least two"):
        augmentation(lambda data: data)
    with pytest.raises(ValueError, match="one shape and type"):
        _run(add.augmentation(mag_to_param=lambda m: np.zeros(1 + (int(m) // 10) % 2)), images, [0, 1, 2])
    with pytest.raises(ValueError, match="magnitude_bin"):
        _run(lambda x, **kw: add(x, num_magnitude_bins=11), images, [0, 1, 2])
    with pytest.warns(Warning, match="unsigned magnitude_bin"):
        _run(a.rotate, images, [1, 2, 3])
