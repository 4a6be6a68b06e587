"""The compiled core's image helpers against their pure-Python twins (sluice.native.image): JPEG headers and scan
checks as sluice.backends.image.formats reads them, crop windows as crop_window.py draws them with NumPy's
Philox."""

import io

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from sluice import native
from sluice.backends.image import probe
from sluice.backends.image.formats import jpeg_scan_is_plausible
from sluice.native import image as nimg

needs_core = pytest.mark.skipif(not native.available(), reason="the compiled core is not built")


def _jpegs() -> list[bytes]:
    rng = np.random.default_rng(1)
    out = []
    for k, (h, w) in enumerate([(37, 53), (64, 64), (121, 80), (8, 300)]):
        rgb = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
        for sub in ("444", "422", "420", "440"):
            out.append(simplejpeg.encode_jpeg(rgb, quality=80 + k, colorsubsampling=sub))
        out.append(simplejpeg.encode_jpeg(np.ascontiguousarray(rgb[:, :, :1]), quality=85, colorspace="GRAY"))
        buf = io.BytesIO()
        Image.fromarray(rgb).save(buf, "JPEG", progressive=True, quality=75)
        out.append(buf.getvalue())
        buf = io.BytesIO()
        exif = Image.Exif()
        exif[0x0112] = 6
        Image.fromarray(rgb).save(buf, "JPEG", exif=exif.tobytes())
        out.append(buf.getvalue())
    good = out[0]
    out.append(good[: len(good) // 2])                                   # truncated: no EOI
    out.append(good[:20])                                                # cut inside the headers
    damaged = bytearray(good)
    damaged[len(good) // 2: len(good) // 2 + 2] = b"\xff\x05"            # a marker that cannot be in a scan
    out.append(bytes(damaged))
    out.append(b"\x89PNG\r\n\x1a\n" + bytes(40))                        # another format
    out.append(b"\xff\xd8\xff\x00\x00")                                  # a broken marker
    out.append(b"")
    return out


def _batch(samples):
    sizes = np.array([len(s) for s in samples], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return np.frombuffer(b"".join(samples) + b"\x00", np.uint8), offsets, sizes


@needs_core
def test_jpeg_info_core_equals_fallback():
    data, offsets, sizes = _batch(_jpegs())
    got = nimg.jpeg_info(data, offsets, sizes)
    with native.fallback():
        want = nimg.jpeg_info(data, offsets, sizes)
    np.testing.assert_array_equal(got, want)


def test_jpeg_info_agrees_with_the_probe():
    samples = _jpegs()
    info = nimg.jpeg_info(*_batch(samples))
    for row, sample in zip(info, samples):
        if row[nimg.STATUS] != 0:
            continue
        p = probe(sample)
        assert (p.height, p.width) == (row[nimg.HEIGHT], row[nimg.WIDTH])
        assert p.jpeg.progressive == bool(row[nimg.PROGRESSIVE])
        assert p.jpeg.subsampling == nimg.SUBSAMPLINGS[row[nimg.SUBSAMPLING]]
        assert p.jpeg.has_exif == bool(row[nimg.HAS_EXIF])
        assert bool(row[nimg.SCAN_OK]) == jpeg_scan_is_plausible(sample)
    # the cut, damaged, foreign and empty samples: the probe decides (and names the problem), or the scan fails
    assert info[-1, nimg.STATUS] == info[-2, nimg.STATUS] == info[-3, nimg.STATUS] == info[-5, nimg.STATUS] == 1
    assert info[-4, nimg.SCAN_OK] == 0 and info[-6, nimg.ENDS_WITH_EOI] == 0


@needs_core
@pytest.mark.parametrize("area,ratio,attempts", [((0.08, 1.0), (3 / 4, 4 / 3), 10), ((0.6, 1.0), (0.8, 1.25), 100),
                                                 ((0.9, 0.9), (5.0, 5.0), 3), ((0.01, 0.02), (0.1, 0.2), 1)])
def test_crop_windows_core_equals_fallback(area, ratio, attempts):
    rng = np.random.default_rng(7)
    heights = np.concatenate([rng.integers(1, 2000, 60), [1, 3000, 5, 0]])
    widths = np.concatenate([rng.integers(1, 2000, 60), [4000, 1, 5, 7]])
    for seed, iteration in ((0, 0), (12345, 3), (2**63 - 1, 10**6)):
        got = nimg.random_crop_windows(seed, iteration, heights, widths, area, ratio, attempts)
        with native.fallback():
            want = nimg.random_crop_windows(seed, iteration, heights, widths, area, ratio, attempts)
        np.testing.assert_array_equal(got, want)


def test_crop_windows_lie_inside_and_refuse_bad_ranges():
    win = nimg.random_crop_windows(1, 2, [100, 50], [80, 500], (0.08, 1.0), (0.75, 4 / 3), 10)
    assert ((win[:, :2] >= 0) & (win[:, :2] + win[:, 2:] <= [[100, 80], [50, 500]])).all()
    with pytest.raises(ValueError, match="random_area"):
        nimg.random_crop_windows(1, 2, [10], [10], (0.0, 1.0), (1, 1), 10)
