"""sluice.native.jpeg against simplejpeg (libjpeg-turbo, strict, ISLOW or IFAST, fancy upsampling) cut to the window:
the compiled core and its pure-Python twin must give exactly those bytes, for every window (rows skipped, columns
cropped, decoding stopped early), subsampling, progressive and restart-marker streams, colour space and IDCT;
and the same status for broken and unusual streams."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from sluice import native
from sluice.native import jpeg

IMPLS = ["twin", pytest.param("core", marks=pytest.mark.skipif(not native.available(), reason="core not built"))]


def _pattern(h: int, w: int, seed: int = 0) -> np.ndarray:
    """Gradients, a texture and noise: every 8x8 block has AC energy, chroma varies within the upsampler's reach."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([xx / max(w - 1, 1), yy / max(h - 1, 1), (xx + yy) / max(h + w - 2, 1)], 2) * 180
    img += 40 * (np.sin(xx / 3.0) * np.cos(yy / 4.0))[..., None]
    img += np.random.default_rng(seed).normal(0, 12, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _pil(image: np.ndarray, **options) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "JPEG", **options)
    return buf.getvalue()


def _streams(h: int, w: int) -> dict[str, bytes]:
    img = _pattern(h, w, seed=h * w)
    out = {ss: simplejpeg.encode_jpeg(img, quality=90, colorsubsampling=ss) for ss in ("444", "422", "420", "440",
                                                                                       "411")}
    out["gray"] = simplejpeg.encode_jpeg(img[:, :, :1].copy(), quality=90, colorspace="GRAY", colorsubsampling="Gray")
    out["progressive420"] = _pil(img, quality=85, subsampling=2, progressive=True)
    out["progressive444"] = _pil(img, quality=85, subsampling=0, progressive=True)
    out["progressive_gray"] = _pil(img[:, :, 0], quality=85, progressive=True)
    out["restarts422"] = _pil(img, quality=85, subsampling=1, restart_marker_blocks=3)
    return out


def _windows(h: int, w: int, rng: np.random.Generator, count: int = 10) -> np.ndarray:
    wins = [(0, 0, h, w), (h - 1, w - 1, 1, 1), (0, w - 1, h, 1), (h - 1, 0, 1, w), (h // 3, 0, h - h // 3, w)]
    for _ in range(count):
        y, x = int(rng.integers(0, h)), int(rng.integers(0, w))
        wins.append((y, x, int(rng.integers(1, h - y + 1)), int(rng.integers(1, w - x + 1))))
    return np.array(wins, np.int64)


def _decode(impl: str, data: list, windows: np.ndarray, colorspace: str = "RGB", fast_idct: bool = False,
            counter=None, threads: int = 1):
    """Run jpeg.decode the way the decoders do: one output buffer, per-sample offsets, optionally threads sharing
    a counter. Returns (images, status, failed)."""
    c = jpeg.COLORSPACES[colorspace]
    sizes = windows[:, 2] * windows[:, 3] * c
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    out = np.full(int(sizes.sum()), 7, np.uint8)
    status = np.full(len(data), -1, np.int32)
    failed: list = []
    arrays = [np.frombuffer(d, np.uint8) for d in data]

    def call():
        failed.extend(jpeg.decode(arrays, windows, colorspace, fast_idct, out, offsets, status, counter))

    with native.fallback() if impl == "twin" else contextlib.nullcontext():
        workers = [threading.Thread(target=call) for _ in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    images = [out[o: o + s].reshape(int(v[2]), int(v[3]), c) for o, s, v in zip(offsets, sizes, windows)]
    return images, status, sorted(failed)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("size", [(37, 53), (64, 48), (101, 77)])
def test_windows_equal_simplejpeg(impl, size):
    h, w = size
    rng = np.random.default_rng(h)
    for name, data in _streams(h, w).items():
        windows = _windows(h, w, rng)
        for colorspace, fast in (("RGB", False), ("BGR", False), ("GRAY", False), ("RGB", True)):
            ref = simplejpeg.decode_jpeg(data, colorspace=colorspace, fastdct=fast, fastupsample=False, strict=True)
            images, status, failed = _decode(impl, [data] * len(windows), windows, colorspace, fast)
            assert not failed and (status == jpeg.OK).all()
            for (y, x, hh, ww), got in zip(windows.tolist(), images):
                np.testing.assert_array_equal(got, ref[y:y + hh, x:x + ww], err_msg=f"{name} {colorspace} "
                                              f"fast={fast} window={(y, x, hh, ww)}")


@pytest.mark.parametrize("impl", IMPLS)
def test_threads_sharing_a_counter_decode_every_sample_once(impl):
    data = [_streams(40 + 3 * i, 50 + 5 * i)["420"] for i in range(6)]
    windows = np.array([[1, 2, 30, 40]] * 6, np.int64)
    alone, status, _ = _decode(impl, data, windows)
    shared, status2, _ = _decode(impl, data, windows, counter=np.zeros(1, np.int64), threads=3)
    assert (status == jpeg.OK).all() and (status2 == jpeg.OK).all()
    for a, b in zip(alone, shared):
        np.testing.assert_array_equal(a, b)


def _sof_patched(data: bytes, marker: int | None = None, precision: int | None = None) -> bytes:
    bad = bytearray(data)
    at = bad.find(b"\xff\xc0")
    if marker is not None:
        bad[at + 1] = marker
    if precision is not None:
        bad[at + 4] = precision
    return bytes(bad)


def _broken_and_unusual() -> dict[str, tuple[bytes, int]]:
    """Streams keyed by name, with the status both implementations must give for a whole-image window."""
    good = _streams(48, 64)["420"]
    corrupt = bytearray(good)
    sos = corrupt.find(b"\xff\xda")
    corrupt[sos + 20: sos + 60] = b"\xff\xd0" * 20
    return {
        "good": (good, jpeg.OK), "trailing bytes after EOI": (good + b"junk", jpeg.OK),
        "truncated": (good[: len(good) * 3 // 4], jpeg.ERROR), "corrupt": (bytes(corrupt), jpeg.ERROR),
        "empty": (b"", jpeg.ERROR), "not a JPEG": (b"\x01" * 64, jpeg.ERROR),
        "cmyk": (_cmyk(_pattern(48, 64)), jpeg.NOT_HANDLED),
        "arithmetic": (_sof_patched(good, marker=0xC9), jpeg.NOT_HANDLED),
        "lossless": (_sof_patched(good, marker=0xC3), jpeg.NOT_HANDLED),
        "12-bit": (_sof_patched(good, precision=12), jpeg.NOT_HANDLED),
    }


def _cmyk(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).convert("CMYK").save(buf, "JPEG", quality=90)
    return buf.getvalue()


@pytest.mark.parametrize("impl", IMPLS)
def test_status_of_broken_and_unusual_streams(impl):
    cases = _broken_and_unusual()
    data = [d for d, _ in cases.values()]
    # A top window of the truncated stream: decoding must not stop early where no EOI marker ends the stream.
    windows = np.array([[0, 0, 8, 8]] * len(data), np.int64)
    _, status, failed = _decode(impl, data, windows)
    assert dict(zip(cases, status.tolist())) == {k: v for k, (_, v) in cases.items()}
    reasons = dict(failed)
    names = list(cases)
    assert "Premature end" in reasons[names.index("truncated")]
    assert "CMYK" in reasons[names.index("cmyk")]


@pytest.mark.skipif(not native.available(), reason="core not built")
def test_window_outside_the_image_is_an_error_not_a_crash():
    data = _streams(20, 30)["444"]
    for impl in ("core", "twin"):
        _, status, failed = _decode(impl, [data], np.array([[10, 0, 11, 30]], np.int64))
        assert status[0] == jpeg.ERROR and "outside the 20 x 30 image" in failed[0][1]


def test_frame_kind():
    cases = _broken_and_unusual()
    assert jpeg.frame_kind(cases["good"][0]) == ""
    assert "CMYK" in jpeg.frame_kind(cases["cmyk"][0])
    assert "8-bit" in jpeg.frame_kind(cases["12-bit"][0])
    assert jpeg.frame_kind(b"") == ""  # no frame header: the decoder names the damage


def _abi() -> int:
    return native.core().jpeg_abi() if native.available() else 62


# The system's libjpeg-turbo of the core's ABI (62 where jconfig.h says so; 80 where libjpeg-turbo8's headers were
# the ones compiled against, as on the GPU machine).
_SYSTEM_LIBJPEG = f"/usr/lib/x86_64-linux-gnu/libjpeg.so.{62 if _abi() == 62 else _abi() // 10}"


def test_candidates_follow_the_cores_abi():
    """A core built against libjpeg-turbo8's headers opens only v8 builds: Pillow's v6.2 copy would be refused
    (the device's core once fell back to the twin for every JPEG that way)."""
    assert jpeg._candidates(80) == ["libjpeg.so.8"]
    assert jpeg._candidates(62)[-1] == "libjpeg.so.62"


@pytest.mark.skipif(not native.available() or not os.path.exists(_SYSTEM_LIBJPEG),
                    reason="needs the core and the system's libjpeg of the core's ABI")
def test_the_core_opens_a_libjpeg_of_its_abi_by_default():
    """Without LIBJPEG, in a fresh process, the core finds a library it can use wherever one of its ABI exists."""
    script = "from sluice.native import jpeg; print(jpeg.library())"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() not in ("", "None"), run.stderr


@pytest.mark.skipif(not native.available() or not os.path.exists(_SYSTEM_LIBJPEG),
                    reason="needs the core and the system's libjpeg of the core's ABI")
def test_system_libjpeg_gives_the_same_pixels_and_other_libraries_are_refused(tmp_path):
    """Another libjpeg-turbo build (the system's, where Pillow's is missing) opened in a fresh process: libraries
    that are not libjpeg are refused with a reason, and the pixels are still simplejpeg's."""
    script = textwrap.dedent(f"""
        import glob, os, numpy as np, simplejpeg, PIL
        from sluice import native
        from sluice.native import jpeg
        jpeg.LIBJPEG = {_SYSTEM_LIBJPEG!r}
        c = native.core()
        png = glob.glob(os.path.join(os.path.dirname(os.path.dirname(PIL.__file__)), "pillow.libs", "libpng*"))
        assert "cannot open" in c.jpeg_open("/nonexistent/libjpeg.so")
        if png:
            assert "lacks" in c.jpeg_open(png[0]), c.jpeg_open(png[0])
        assert jpeg.library() == {_SYSTEM_LIBJPEG!r}, jpeg.library()
        rng = np.random.default_rng(0)
        img = np.clip(rng.normal(128, 50, (61, 83, 3)), 0, 255).astype(np.uint8)
        for ss in ("444", "422", "420"):
            data = simplejpeg.encode_jpeg(img, quality=90, colorsubsampling=ss)
            ref = simplejpeg.decode_jpeg(data, fastdct=False, fastupsample=False, strict=True)
            for y, x, h, w in [(0, 0, 61, 83), (17, 23, 30, 41), (40, 50, 21, 33)]:
                out = np.zeros(h * w * 3, np.uint8)
                status = np.zeros(1, np.int32)
                jpeg.decode([np.frombuffer(data, np.uint8)], np.array([[y, x, h, w]]), "RGB", False, out,
                            np.zeros(1, np.int64), status)
                assert status[0] == 0 and np.array_equal(out.reshape(h, w, 3), ref[y:y + h, x:x + w]), (ss, y, x)
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr
