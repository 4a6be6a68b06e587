"""The image codec wrappers (sluice.backends.image) against Pillow, the reference decoder.

Tolerances: lossless formats are compared exactly; CPU JPEG (libjpeg-turbo through simplejpeg) against Pillow
(also libjpeg-turbo, same islow IDCT and fancy upsampling) within 1 level; conversions to GRAY/YCbCr within 1 level
(rounding of the BT.601 weights).
"""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image, ImageOps

from image_fixtures import (FORMATS_LOSSLESS, cmyk_jpeg, corrupt_jpeg, encode, pattern, reference_rgb,
                            with_orientation)
from sluice.backends.image import (ImageDecodeError, SplitScheduler, apply_orientation, decode, jpeg_header, probe,
                                   roi_in_stored, set_max_image_pixels, get_max_image_pixels, sniff_format)

IMG = pattern(24, 40)


def _max_diff(a: np.ndarray, b: np.ndarray) -> int:
    assert a.shape == b.shape, (a.shape, b.shape)
    return int(np.abs(a.astype(np.int32) - b.astype(np.int32)).max())


@pytest.mark.parametrize("name", sorted(FORMATS_LOSSLESS))
def test_lossless_formats_exact(name):
    fmt, opts = FORMATS_LOSSLESS[name]
    data = encode(IMG, fmt, **opts)
    assert sniff_format(data) == ("pnm" if name == "ppm" else name)
    out = decode(data, output_type="RGB")
    assert out.dtype == np.uint8 and out.shape == (24, 40, 3)
    np.testing.assert_array_equal(out, reference_rgb(data))
    np.testing.assert_array_equal(out, IMG)


def test_png_gray_alpha_palette():
    gray = pattern(16, 20, 1)[:, :, 0]
    data = encode(gray, "PNG")
    np.testing.assert_array_equal(decode(data, output_type="GRAY")[:, :, 0], gray)
    np.testing.assert_array_equal(decode(data, output_type="RGB"), np.repeat(gray[:, :, None], 3, 2))

    rgba = pattern(16, 20, 4)
    data = encode(rgba, "PNG")
    np.testing.assert_array_equal(decode(data, output_type="ANY_DATA"), rgba)
    np.testing.assert_array_equal(decode(data, output_type="RGB"), rgba[:, :, :3])
    assert probe(data).channels == 4

    pal = Image.fromarray(IMG).quantize(16)
    data = encode(pal, "PNG")
    np.testing.assert_array_equal(decode(data), reference_rgb(data))
    pal.info["transparency"] = 0
    data = encode(pal, "PNG", transparency=0)
    out = decode(data, output_type="ANY_DATA")
    assert out.shape[2] == 4
    np.testing.assert_array_equal(out, np.asarray(Image.open(io.BytesIO(data)).convert("RGBA")))


def test_png_16bit():
    g16 = pattern(12, 14, 1, dtype=np.uint16)[:, :, 0]
    data = encode(Image.fromarray(g16), "PNG")
    out = decode(data, output_type="ANY_DATA")
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(out[:, :, 0], np.asarray(Image.open(io.BytesIO(data))))
    rgb16 = pattern(12, 14, 3, dtype=np.uint16)
    ok, enc = cv2.imencode(".png", rgb16[:, :, ::-1])  # Pillow cannot write 16-bit RGB
    assert ok
    np.testing.assert_array_equal(decode(enc.tobytes(), output_type="RGB"), rgb16)


def test_pnm_and_gif():
    bits = (pattern(10, 12, 1)[:, :, 0] > 128)
    pbm = encode(Image.fromarray(bits), "PPM")  # mode "1" is written as PBM (P4)
    assert pbm[:2] == b"P4"
    np.testing.assert_array_equal(decode(pbm, output_type="GRAY")[:, :, 0], bits.astype(np.uint8) * 255)
    pgm = encode(pattern(10, 12, 1)[:, :, 0], "PPM")
    assert pgm[:2] == b"P5"
    np.testing.assert_array_equal(decode(pgm, output_type="GRAY"), reference_rgb(pgm, "L"))

    frames = [Image.fromarray(pattern(20, 24, seed=s)).quantize(64) for s in range(3)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:])
    data = buf.getvalue()
    assert sniff_format(data) == "gif"
    np.testing.assert_array_equal(decode(data), np.asarray(frames[0].convert("RGB")))


@pytest.mark.parametrize("subsampling", [0, 1, 2])  # Pillow: 0 = 4:4:4, 1 = 4:2:2, 2 = 4:2:0
@pytest.mark.parametrize("progressive", [False, True])
def test_jpeg_subsampling_against_pillow(subsampling, progressive):
    img = pattern(37, 53)
    data = encode(img, "JPEG", quality=90, subsampling=subsampling, progressive=progressive)
    hdr = jpeg_header(data)
    assert hdr.subsampling == {0: "444", 1: "422", 2: "420"}[subsampling]
    assert hdr.progressive is progressive and (hdr.height, hdr.width) == (37, 53)
    out = decode(data)
    assert _max_diff(out, reference_rgb(data)) <= 1
    assert _max_diff(decode(data, output_type="BGR"), out[:, :, ::-1]) == 0
    assert np.abs(out.astype(int) - img).mean() < 4  # and it is the picture that was encoded


def test_jpeg_gray_and_cmyk():
    gray = pattern(20, 30, 1)[:, :, 0]
    data = encode(gray, "JPEG", quality=95)
    assert jpeg_header(data).subsampling == "gray" and probe(data).channels == 1
    assert _max_diff(decode(data, output_type="GRAY"), reference_rgb(data, "L")) <= 1
    assert decode(data, output_type="ANY_DATA").shape == (20, 30, 1)
    assert decode(data, output_type="RGB").shape == (20, 30, 3)

    data = cmyk_jpeg(IMG)
    assert jpeg_header(data).cmyk
    out = decode(data)
    assert _max_diff(out, reference_rgb(data)) == 0
    assert np.abs(out.astype(int) - IMG).mean() < 4  # the picture, not a black or inverted image


@pytest.mark.parametrize("output_type,mode", [("GRAY", "L"), ("YCbCr", "YCbCr")])
def test_color_conversions_against_pillow(output_type, mode):
    data = encode(IMG, "PNG")
    assert _max_diff(decode(data, output_type=output_type), reference_rgb(data, mode)) <= 1


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_exif_orientation(orientation, fmt):
    opts = {"quality": 95} if fmt == "JPEG" else ({"lossless": True} if fmt == "WEBP" else {})
    data = with_orientation(IMG, orientation, fmt, **opts)
    info = probe(data)
    assert info.orientation == orientation
    expected_hw = (40, 24) if orientation >= 5 else (24, 40)
    assert info.shape()[:2] == expected_hw and info.shape(adjust_orientation=False)[:2] == (24, 40)
    out = decode(data)
    ref = reference_rgb(data)
    assert out.shape[:2] == expected_hw
    assert _max_diff(out, ref) <= (1 if fmt == "JPEG" else 0)
    assert decode(data, adjust_orientation=False).shape[:2] == (24, 40)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_roi_in_stored_matches_orientation(orientation):
    stored = np.arange(7 * 11).reshape(7, 11, 1)
    upright = apply_orientation(stored, orientation)
    rng = np.random.default_rng(orientation)
    for _ in range(20):
        H, W = upright.shape[:2]
        h, w = int(rng.integers(1, H + 1)), int(rng.integers(1, W + 1))
        y, x = int(rng.integers(0, H - h + 1)), int(rng.integers(0, W - w + 1))
        sy, sx, sh, sw = roi_in_stored((y, x, h, w), orientation, 7, 11)
        np.testing.assert_array_equal(apply_orientation(stored[sy:sy + sh, sx:sx + sw], orientation),
                                      upright[y:y + h, x:x + w])


def test_orientation_matches_pillow_transpose():
    for o in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        img = Image.fromarray(IMG)
        img.info["exif"] = exif.tobytes()
        ref = np.asarray(ImageOps.exif_transpose(img))
        np.testing.assert_array_equal(apply_orientation(IMG, o), ref)


def test_roi_decode():
    data = encode(IMG, "PNG")
    np.testing.assert_array_equal(decode(data, roi=(3, 5, 10, 12)), IMG[3:13, 5:17])
    with pytest.raises(ValueError, match="outside"):
        decode(data, roi=(20, 0, 10, 10))


# --- bad input ----------------------------------------------------------------------------------------------
def test_empty_and_unknown():
    with pytest.raises(ImageDecodeError, match=r"'a\.jpg'.*empty \(0 bytes\)"):
        decode(b"", source="a.jpg")
    with pytest.raises(ImageDecodeError, match="unknown image format.*supported formats are jpeg, png"):
        decode(b"hello world, not an image", source="b.bin")
    with pytest.raises(ImageDecodeError, match="unknown image format"):
        probe(np.zeros(100, np.uint8))


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "BMP", "TIFF", "PPM", "WEBP", "JPEG2000", "GIF"])
def test_truncated_files_raise(fmt):
    data = encode(pattern(64, 64), fmt)
    for cut in (len(data) // 2, 40):
        with pytest.raises(ImageDecodeError) as err:
            decode(data[:cut], source=f"/data/img.{fmt.lower()}")
        msg = str(err.value)
        assert f"/data/img.{fmt.lower()}" in msg and " with " in msg  # names the file and the decoder


def test_corrupt_jpeg_raises_not_black():
    data = corrupt_jpeg(encode(pattern(64, 64), "JPEG", quality=90))  # header and EOI intact
    with pytest.raises(ImageDecodeError, match="'bad.jpg' with simplejpeg.*corrupt"):
        decode(data, source="bad.jpg")


def test_pixel_limit():
    data = encode(pattern(50, 60), "JPEG")
    png = encode(pattern(50, 60), "PNG")
    old = get_max_image_pixels()
    try:
        set_max_image_pixels(2999)
        for d in (data, png):
            with pytest.raises(ImageDecodeError, match="50 x 60 = 3000 pixels, above the limit of 2999"):
                decode(d, source="big.img")
        set_max_image_pixels(3000)
        assert decode(data).shape == (50, 60, 3)
        with pytest.raises(ValueError, match="Invalid pixel limit"):
            set_max_image_pixels(0)
    finally:
        set_max_image_pixels(old)


# --- scheduler ------------------------------------------------------------------------------------------------
def test_scheduler_follows_measured_speed():
    s = SplitScheduler({"hw": 0.5, "cuda": 0.3, "cpu": 0.2}, smoothing=1.0)
    paths = s.assign([1.0] * 100)
    assert paths.count("hw") == 50 and paths.count("cuda") == 30 and paths.count("cpu") == 20
    s.record("hw", pixels=600, seconds=1.0)
    s.record("cuda", pixels=300, seconds=1.0)
    s.record("cpu", pixels=100, seconds=1.0)
    shares = s.shares
    assert shares["hw"] == pytest.approx(0.6) and shares["cpu"] == pytest.approx(0.1)
    assert s.assign([1.0] * 10, available={"cpu"}) == ["cpu"] * 10
    fixed = SplitScheduler({"hw": 1, "cpu": 1}, adaptive=False)
    fixed.record("hw", pixels=1e9, seconds=1)
    assert fixed.shares == {"hw": 0.5, "cpu": 0.5}
    with pytest.raises(ValueError, match="Invalid initial shares"):
        SplitScheduler({})


def test_share_tuner_climbs_to_the_best_share():
    from sluice.backends.image.scheduler import ShareTuner

    def rate(share):  # combined GPU speed peaks with 60 % on the hardware engines
        return 10000 - 20000 * (share - 0.6) ** 2

    t = ShareTuner(0.9, step=0.05, window=1)
    for _ in range(40):
        t.record(rate(t.value))
    assert abs(t.value - 0.6) <= 0.1
    fast = ShareTuner(0.9, step=0.2, min_step=0.05, window=1)  # big steps first, halved on each turn
    for _ in range(12):
        fast.record(rate(fast.value))
    assert abs(fast.value - 0.6) <= 0.1 and fast.step == 0.05
    pinned = ShareTuner(1.0)
    for _ in range(6):
        pinned.record(rate(pinned.value))
    assert pinned.value < 1.0  # it explores downwards from the upper bound


def test_jpeg_scan_plausibility_check():
    import simplejpeg

    from sluice.backends.image.formats import jpeg_scan_is_plausible

    good = [simplejpeg.encode_jpeg(IMG, quality=90, colorsubsampling=s) for s in ("444", "422", "420")]
    good.append(cv2.imencode(".jpg", IMG, [cv2.IMWRITE_JPEG_RST_INTERVAL, 4])[1].tobytes())  # restart markers
    buf = io.BytesIO()
    Image.fromarray(IMG).convert("L").save(buf, "JPEG", quality=80)
    good.append(buf.getvalue())
    for data in good:
        assert jpeg_scan_is_plausible(data)
        if b"\xff\xdd" not in data[:2000]:  # without a restart interval, restart markers in the scan are damage
            assert not jpeg_scan_is_plausible(corrupt_jpeg(data))
    assert not jpeg_scan_is_plausible(corrupt_jpeg(good[0]))
    assert not jpeg_scan_is_plausible(good[0][:200])  # cut inside the headers


def test_batch_scan_check_agrees_with_the_per_image_check(device):
    """The batched (GPU) scan check flags exactly the streams jpeg_scan_is_plausible flags: stray restart
    markers, headers cut before the scan, empty input; restart markers are fine when a restart interval is set."""
    import simplejpeg
    import torch

    from sluice.backends.image.formats import jpeg_scan_is_plausible
    from sluice.backends.image.scan_check import BatchScanCheck

    good = [simplejpeg.encode_jpeg(pattern(40 + 8 * i, 56, seed=i), quality=90) for i in range(6)]
    with_rst = cv2.imencode(".jpg", IMG, [cv2.IMWRITE_JPEG_RST_INTERVAL, 4])[1].tobytes()
    batch = [good[0], corrupt_jpeg(good[1]), good[2], with_rst, corrupt_jpeg(with_rst), good[3][:200], b"",
             bytearray(good[4]), corrupt_jpeg(good[5])]
    check = BatchScanCheck(torch.device("cuda" if device == "gpu" else "cpu", 0 if device == "gpu" else None))
    got = check(batch)
    assert got == [jpeg_scan_is_plausible(b) for b in batch]
    assert got == [True, False, True, True, True, False, False, True, False]
    assert check([]) == [] and check(good[:2]) == [True, True]
    assert BatchScanCheck(torch.device("cpu"), "cpu")(batch) == got
    import sluice.backends.image.scan_check as scan_check

    for chunk in (7, 100, 1000):  # classified in small chunks: pairs across chunk edges are still seen
        old, scan_check.CHUNK_BYTES = scan_check.CHUNK_BYTES, chunk
        try:
            assert check(batch) == got
        finally:
            scan_check.CHUNK_BYTES = old
    # The streams already back to back in one buffer (readers.file's batch buffer): the same answers, no gather.
    region = torch.frombuffer(bytearray(b"".join(bytes(b) for b in batch)), dtype=torch.uint8)
    assert check(batch, region=region) == got
    with pytest.raises(ValueError, match="region holds"):
        check(batch, region=region[1:])


def test_ycck_jpeg():
    import simplejpeg

    # Adobe (Photoshop) convention, which Pillow, OpenCV and libjpeg-based readers follow: CMYK stored inverted.
    cmyk = 255 - np.asarray(Image.fromarray(IMG).convert("CMYK"))
    data = simplejpeg.encode_jpeg(np.ascontiguousarray(cmyk), quality=95, colorspace="CMYK")  # stored as YCCK
    hdr = jpeg_header(data)
    assert hdr.cmyk and hdr.adobe_transform == 2
    out = decode(data)
    assert _max_diff(out, reference_rgb(data)) == 0
    assert np.abs(out.astype(int) - IMG).mean() < 6  # the picture survives CMYK -> YCCK -> CMYK -> RGB


@pytest.mark.parametrize("ext", [".pgm", ".tiff", ".png"])
def test_16bit_gray_formats(ext):
    g16 = pattern(12, 10, 1, dtype=np.uint16)[:, :, 0]
    ok, enc = cv2.imencode(ext, g16)
    assert ok
    out = decode(enc.tobytes(), output_type="ANY_DATA")
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(out[:, :, 0], g16)
