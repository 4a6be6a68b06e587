"""Decoding windows of a batch of JPEGs into one buffer (see :mod:`sluice.native`).

The compiled core decodes with the libjpeg-turbo it opens at run time, of the ABI its jpeglib.h had (v6.2: Pillow's
bundled copy, else the system's ``libjpeg.so.62``; v8: the system's ``libjpeg.so.8``; :data:`LIBJPEG` names
another), the GIL released. Its
pure-Python twin is ``simplejpeg.decode_jpeg(colorspace=..., fastdct=fast_idct, fastupsample=False, strict=True)``
cut to the window, and the core gives exactly those pixels (tests/native/test_jpeg_native.py). Several threads may
share one batch: each call takes the next sample from a shared ``counter`` until none is left, so the batch is
balanced however the samples' sizes differ. Example::

    from sluice.native import jpeg
    status = np.zeros(n, np.int32)
    counter = np.zeros(1, np.int64)
    failed = jpeg.decode(samples, windows, "RGB", False, out, offsets, status, counter)   # in each thread
    # status[i]: jpeg.OK, jpeg.ERROR (failed holds (i, libjpeg's message)) or jpeg.NOT_HANDLED (CMYK, 12-bit ...)
"""

from __future__ import annotations

import glob
import io
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from types import ModuleType

import numpy as np

from sluice.native import core

__all__ = ["OK", "ERROR", "NOT_HANDLED", "COLORSPACES", "decode", "library", "frame_kind", "take"]

logger = logging.getLogger(__name__)

#: Status of a sample after :func:`decode`.
OK, ERROR, NOT_HANDLED = 0, 1, 2
#: Output colour spaces and their channel counts.
COLORSPACES = {"RGB": 3, "BGR": 3, "GRAY": 1}

_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_opened: tuple[str | None] | None = None  # (path,) once looked for; path None when no libjpeg could be opened
_open_lock = threading.Lock()
#: A libjpeg (v6.2 ABI) to try before Pillow's and the system's, set before the first decode (tests).
LIBJPEG: str | None = None
_counter_lock = threading.Lock()


def _candidates(abi: int = 62) -> list[str]:
    """The libjpeg builds to try, in order: :data:`LIBJPEG`, then those of the core's ABI ``abi``
    (``JPEG_LIB_VERSION``): for 62 Pillow's bundled libjpeg-turbo and the system's ``libjpeg.so.62``; for 70 or 80
    (a core built where jconfig.h is libjpeg-turbo8's, as on Ubuntu with libjpeg-dev) the system's
    ``libjpeg.so.7`` or ``.8``, which the structs the core hands over fit."""
    paths = [LIBJPEG] if LIBJPEG else []
    if abi != 62:
        return paths + [f"libjpeg.so.{abi // 10}"]
    try:
        import PIL

        site = os.path.dirname(os.path.dirname(PIL.__file__))
        paths += sorted(glob.glob(os.path.join(site, "pillow.libs", "libjpeg-*.so.62*")))
    except ImportError:
        pass
    return paths + ["libjpeg.so.62"]


def _core_jpeg() -> ModuleType | None:
    """The compiled core when it is enabled and has opened a libjpeg that passes the self-check, else None (the
    twin runs)."""
    global _opened
    c = core()
    if c is None:
        return None
    with _open_lock:  # the first batch's threads all get here at once
        if _opened is None:
            _opened = (_open(c),)
    return c if _opened[0] is not None else None


def _open(c: ModuleType) -> str | None:
    reasons = []
    abi = c.jpeg_abi()
    for path in _candidates(abi):
        why = c.jpeg_open(path) or _self_check(c)
        if not why:
            logger.info("sluice's core decodes JPEGs with %s", path)
            return path
        reasons.append(f"{path}: {why}")
        if c.jpeg_library():  # opened but failed the self-check: the core keeps it; the twin decodes
            break
    logger.warning("sluice's core JPEG decoding is unavailable (%s); simplejpeg decodes instead, with the same "
                   "results", "; ".join(reasons))
    return None


def _self_check(c: ModuleType) -> str:
    """Why the opened libjpeg's decoding of windows (rows skipped, columns cropped, stopped after the window)
    differs from its whole-image decoding cut to the window, or "" when it does not (libjpeg-turbo 2.1 and 3.x
    pass; tests/native/test_jpeg_native.py checks both against simplejpeg). A few milliseconds, once."""
    from PIL import Image

    yy, xx = np.mgrid[0:45, 0:70]
    image = np.stack([xx * 3, yy * 5, (xx * yy) % 251], 2).astype(np.uint8)
    # Windows starting on iMCU columns and ending within the image: where a crop without a margin would show
    windows = np.array([[0, 0, 45, 70], [9, 16, 20, 30], [16, 32, 15, 22], [1, 0, 44, 24], [17, 5, 28, 48]],
                       np.int64)
    sizes = windows[:, 2] * windows[:, 3] * 3
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    for subsampling in (0, 1, 2):  # 4:4:4, 4:2:2, 4:2:0
        buf = io.BytesIO()
        Image.fromarray(image).save(buf, "JPEG", quality=90, subsampling=subsampling)
        out = np.empty(int(sizes.sum()), np.uint8)
        failed = c.jpeg_decode([np.frombuffer(buf.getvalue(), np.uint8)] * len(windows), windows, "RGB", False, out,
                               offsets, np.zeros(len(windows), np.int32), None)
        if failed:
            return f"it cannot decode a test image ({failed[0][1]})"
        whole = out[: sizes[0]].reshape(45, 70, 3)
        for (y, x, h, w), start, size in zip(windows.tolist()[1:], offsets[1:], sizes[1:]):
            if not np.array_equal(out[start: start + size].reshape(h, w, 3), whole[y: y + h, x: x + w]):
                return "decoding a window (jpeg_skip_scanlines, jpeg_crop_scanline) changes its pixels"
    return ""


def library() -> str | None:
    """The libjpeg the core decodes with, or None when the pure-Python twin decodes."""
    return _opened[0] if _core_jpeg() is not None and _opened else None


def frame_kind(data) -> str:
    """Why :func:`decode` hands this JPEG back (status NOT_HANDLED), or ``""`` when it decodes it: it takes
    baseline, extended and progressive Huffman-coded 8-bit frames of 1 or 3 components (what libjpeg-turbo
    decodes the same way everywhere). A stream without a frame header is taken (the decoder names the damage)."""
    buf = memoryview(data).cast("B")
    n, pos = len(buf), 2
    if n < 4 or buf[0] != 0xFF or buf[1] != 0xD8:
        return ""
    while pos + 4 <= n and buf[pos] == 0xFF:
        marker = buf[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
        elif marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
        elif marker in (0xDA, 0xD9):
            return ""
        elif marker in _SOF:
            if pos + 10 > n:
                return ""
            return _not_handled(marker, buf[pos + 4], buf[pos + 9])
        else:
            pos += 2 + ((buf[pos + 2] << 8) | buf[pos + 3])
    return ""


def _not_handled(marker: int, precision: int, components: int) -> str:
    if marker not in (0xC0, 0xC1, 0xC2):
        return "not a Huffman-coded DCT JPEG (arithmetic, lossless or hierarchical)"
    if precision != 8:
        return "not an 8-bit JPEG"
    if components not in (1, 3):
        return "not a gray or 3-component JPEG (CMYK/YCCK)"
    return ""


def decode(data: Sequence, windows: np.ndarray, colorspace: str, fast_idct: bool, out: np.ndarray,
           out_offsets: np.ndarray, status: np.ndarray, counter: np.ndarray | None = None) -> list[tuple[int, str]]:
    """Decode the window ``(y, x, h, w)`` (``windows``: ``(n, 4)`` int64) of each JPEG of ``data`` (1-D uint8
    buffers) as ``h x w x C`` HWC rows into ``out`` (1-D uint8) at ``out_offsets[i]``; ``colorspace`` is 'RGB',
    'BGR' or 'GRAY' (C = 3, 3, 1). Sets ``status[i]`` (int32) for the samples it takes: all of them, or with
    ``counter`` (one int64, shared by calls in other threads) the next untaken one until none is left. Returns
    ``(i, reason)`` for each sample it took whose status is not OK. Raises ValueError for malformed arguments."""
    if colorspace not in COLORSPACES:
        raise ValueError(f"Invalid colorspace ({colorspace!r}). Supported values are 'RGB', 'BGR', 'GRAY'.")
    c = _core_jpeg()
    if c is not None:
        return c.jpeg_decode(data, windows, colorspace, bool(fast_idct), out, out_offsets, status, counter)
    return _decode_python(data, windows, colorspace, bool(fast_idct), out, out_offsets, status, counter)


def take(counter: np.ndarray | None, n: int) -> Iterator[int]:
    """The sample indices one call of a twin takes: all of ``range(n)``, or in turn from ``counter`` (one int64)
    shared by calls in other threads, as the core's functions do."""
    if counter is None:
        yield from range(n)
        return
    while True:
        with _counter_lock:
            i = int(counter[0])
            counter[0] = i + 1
        if i >= n:
            return
        yield i


def _decode_python(data, windows, colorspace, fast_idct, out, out_offsets, status, counter):
    """The twin of the core's jpeg_decode: simplejpeg (libjpeg-turbo, strict), then the window."""
    import simplejpeg

    channels = COLORSPACES[colorspace]
    failed: list[tuple[int, str]] = []
    for i in take(counter, len(data)):
        why = frame_kind(data[i])
        if why:
            status[i] = NOT_HANDLED
            failed.append((i, why))
            continue
        y, x, h, w = (int(v) for v in windows[i])
        try:
            image = simplejpeg.decode_jpeg(data[i], colorspace=colorspace, fastdct=fast_idct, fastupsample=False,
                                           strict=True)
        except (ValueError, RuntimeError) as exc:  # simplejpeg's errors carry libjpeg's message
            status[i] = ERROR
            failed.append((i, str(exc)))
            continue
        height, width = image.shape[:2]
        if y < 0 or x < 0 or h < 1 or w < 1 or y + h > height or x + w > width:
            status[i] = ERROR
            failed.append((i, f"crop window (y={y}, x={x}, h={h}, w={w}) lies outside the {height} x {width} "
                              "image"))
            continue
        start = int(out_offsets[i])
        out[start: start + h * w * channels].reshape(h, w, channels)[:] = image[y: y + h, x: x + w]
        status[i] = OK
    return failed
