"""Image headers and random crop windows for a whole batch (see :mod:`sluice.native`).

Example::

    from sluice.native.image import jpeg_info, random_crop_windows
    info = jpeg_info(buffer, offsets, sizes)                                       # (n, INFO_COLUMNS) int32
    win = random_crop_windows(seed, iteration, heights, widths, (0.08, 1.0), (3 / 4, 4 / 3), 10)   # (n, 4)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sluice.backends.image.formats import _walk_to_sof, jpeg_scan_is_plausible
from sluice.native import core
from sluice.native.crop_window import check_crop_ranges, random_crop_window
from sluice.pipeline.pool import map_all, runs
from sluice.schema import _rng

__all__ = ["jpeg_info", "random_crop_windows", "STATUS", "HEIGHT", "WIDTH", "COMPONENTS", "SUBSAMPLING",
           "PROGRESSIVE", "BASELINE", "HAS_EXIF", "ADOBE", "ENDS_WITH_EOI", "SCAN_OK", "INFO_COLUMNS",
           "SUBSAMPLINGS"]

# Columns of jpeg_info's rows.
STATUS, HEIGHT, WIDTH, COMPONENTS, SUBSAMPLING, PROGRESSIVE, BASELINE, HAS_EXIF, ADOBE, ENDS_WITH_EOI, SCAN_OK = \
    range(11)
INFO_COLUMNS = 11
#: Codes of the SUBSAMPLING column, in the spelling of :class:`sluice.backends.image.formats.JpegHeader`.
SUBSAMPLINGS = ("gray", "444", "422", "420", "440", "411", "other")


def jpeg_info(data, offsets: np.ndarray, sizes: np.ndarray, check_scans: bool = True, pool=None) -> np.ndarray:
    """Frame-header facts of the JPEGs lying at ``offsets`` (``sizes`` bytes each) in ``data`` (one uint8 buffer),
    as an ``(n, INFO_COLUMNS)`` int32 array: STATUS 0 for a JPEG whose header was read, 1 where the per-sample
    probe must decide (another format, a broken or cut header: :func:`sluice.backends.image.probe` then names the
    problem); HEIGHT, WIDTH, COMPONENTS, SUBSAMPLING (an index of SUBSAMPLINGS), PROGRESSIVE (not SOF0/SOF1),
    BASELINE, HAS_EXIF (the orientation is then read by the probe), ADOBE (the APP14 transform, -1 when absent),
    ENDS_WITH_EOI (an EOI marker in the last KiB) and, with ``check_scans``, SCAN_OK
    (:func:`~sluice.backends.image.formats.jpeg_scan_is_plausible`; -1 when not checked). The same values as those
    functions of :mod:`sluice.backends.image.formats` give, computed without the GIL by the compiled core, in runs
    of samples spread over ``pool``'s threads when given."""
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    c = core()
    if c is None:
        return _jpeg_info_py(memoryview(data).cast("B"), offsets, sizes, check_scans)
    parts = runs(offsets.size, pool, per_thread=2)
    if len(parts) == 1:
        return c.jpeg_info(data, offsets, sizes, bool(check_scans))
    found = map_all(pool, lambda r: c.jpeg_info(data, offsets[r.start:r.stop], sizes[r.start:r.stop],
                                                bool(check_scans)), parts)
    return np.concatenate(found)


def _jpeg_info_py(view: memoryview, offsets: np.ndarray, sizes: np.ndarray, check_scans: bool) -> np.ndarray:
    out = np.zeros((offsets.size, INFO_COLUMNS), np.int32)
    out[:, ADOBE] = -1
    out[:, SCAN_OK] = -1
    for i, (start, size) in enumerate(zip(offsets.tolist(), sizes.tolist())):
        sample = view[start: start + size]
        try:
            hdr = _walk_to_sof(bytes(sample))
        except ValueError:
            hdr = None
        if hdr is None:
            out[i, STATUS] = 1
            continue
        out[i, HEIGHT:ADOBE + 1] = (hdr.height, hdr.width, hdr.components, SUBSAMPLINGS.index(hdr.subsampling),
                                    hdr.progressive, hdr.baseline, hdr.has_exif,
                                    -1 if hdr.adobe_transform is None else hdr.adobe_transform)
        out[i, ENDS_WITH_EOI] = bytes(sample[-1024:]).rfind(b"\xff\xd9") >= 0
        if check_scans:
            out[i, SCAN_OK] = jpeg_scan_is_plausible(sample)
    return out


def random_crop_windows(seed: int, iteration: int, heights: Sequence[int] | np.ndarray,
                        widths: Sequence[int] | np.ndarray, random_area: Sequence[float],
                        random_aspect_ratio: Sequence[float], num_attempts: int) -> np.ndarray:
    """The crop windows ``(y, x, h, w)`` (an ``(n, 4)`` int64 array) that
    :func:`sluice.native.crop_window.random_crop_window` draws for samples ``0..n-1`` of one batch, each with
    the sample's own generator (:meth:`sluice.schema.BatchContext.sample_rng`): the same values whatever thread
    or worker computes them. Raises ValueError naming the argument for invalid ranges."""
    heights = np.ascontiguousarray(heights, dtype=np.int64).reshape(-1)
    widths = np.ascontiguousarray(widths, dtype=np.int64).reshape(-1)
    area, ratio = check_crop_ranges(random_area, random_aspect_ratio, num_attempts)
    c = core()
    if c is not None:
        return c.random_crop_windows(int(seed) & 0xFFFFFFFFFFFFFFFF, int(iteration), heights, widths,
                                     area[0], area[1], ratio[0], ratio[1], int(num_attempts))
    out = np.empty((heights.size, 4), np.int64)
    for i, (h, w) in enumerate(zip(heights.tolist(), widths.tolist())):
        out[i] = random_crop_window(_rng(seed, iteration, i + 1), h, w, area, ratio, num_attempts)
    return out
