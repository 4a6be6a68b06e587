"""What every image backend shares: the decode error, the pixel limit, EXIF orientation and colour conversion.

Example::

    set_max_image_pixels(50_000_000)     # refuse images above 50 megapixels
    apply_orientation(array, 6)          # rotate 90 degrees clockwise, as EXIF orientation 6 asks
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import env

__all__ = [
    "ImageDecodeError", "set_max_image_pixels", "get_max_image_pixels", "check_pixel_limit",
    "apply_orientation", "oriented_hw", "roi_in_stored", "OUTPUT_TYPES", "YCBCR_FROM_RGB",
]

#: Output colour spaces, as the names of sluice.types.DALIImageType members.
OUTPUT_TYPES = ("RGB", "BGR", "GRAY", "YCbCr", "ANY_DATA")

#: Full-range BT.601 (JFIF) RGB -> YCbCr: rows are Y, Cb, Cr; offsets (0, 128, 128) on the 0..255 scale.
YCBCR_FROM_RGB = ((0.299, 0.587, 0.114), (-0.168736, -0.331264, 0.5), (0.5, -0.418688, -0.081312))

_DEFAULT_MAX_PIXELS = 1 << 28  # 268 megapixels, e.g. 16384 x 16384
_max_pixels = env.max_image_pixels(_DEFAULT_MAX_PIXELS)


class ImageDecodeError(ValueError):
    """An image could not be decoded; the message names the file, the decoder and the reason.

    Example::

        ImageDecodeError("truncated JPEG data", source="/data/cat.jpg", decoder="simplejpeg (libjpeg-turbo)")
    """

    def __init__(self, reason: str, *, source: str = "", decoder: str = ""):
        self.reason = reason
        self.source = source
        self.decoder = decoder
        where = f"'{source}'" if source else "an encoded sample (no file name known)"
        by = f" with {decoder}" if decoder else ""
        super().__init__(f"cannot decode {where}{by}: {reason}")


def set_max_image_pixels(limit: int) -> None:
    """Set the largest image (height x width) the decoders accept; larger ones raise ImageDecodeError.

    Also settable with the environment variable ``SLUICE_MAX_IMAGE_PIXELS``. Example::

        set_max_image_pixels(100_000_000)
    """
    global _max_pixels
    if int(limit) <= 0:
        raise ValueError(f"Invalid pixel limit ({limit}). It must be a positive number of pixels.")
    _max_pixels = int(limit)


def get_max_image_pixels() -> int:
    """The current pixel limit (see :func:`set_max_image_pixels`)."""
    return _max_pixels


def check_pixel_limit(height: int, width: int, *, source: str = "", decoder: str = "") -> None:
    """Raise ImageDecodeError when ``height * width`` exceeds the pixel limit or a side is zero."""
    if height <= 0 or width <= 0:
        raise ImageDecodeError(f"the header gives an empty image ({height} x {width})", source=source,
                               decoder=decoder)
    if height * width > _max_pixels:
        raise ImageDecodeError(
            f"the image is {height} x {width} = {height * width} pixels, above the limit of {_max_pixels} "
            "(raise it with sluice.backends.image.set_max_image_pixels or SLUICE_MAX_IMAGE_PIXELS)",
            source=source, decoder=decoder)


def oriented_hw(height: int, width: int, orientation: int) -> tuple[int, int]:
    """The (height, width) an image of the stored size has after EXIF ``orientation`` is applied."""
    return (width, height) if orientation in (5, 6, 7, 8) else (height, width)


def _flip(a, axis: int):
    return a.flip(axis) if isinstance(a, torch.Tensor) else np.flip(a, axis)


def _transpose(a):
    return a.transpose(0, 1) if isinstance(a, torch.Tensor) else np.swapaxes(a, 0, 1)


def apply_orientation(image, orientation: int):
    """Turn a stored HWC image (NumPy or torch, any device) into its display orientation (EXIF tag 274).

    1 keeps it, 2 mirrors left-right, 3 rotates 180, 4 mirrors top-bottom, 5 transposes, 6 rotates 90 degrees
    clockwise, 7 transverses, 8 rotates 90 degrees counter-clockwise; the result may be a view. Example::

        upright = apply_orientation(decoded, 6)
    """
    if orientation in (5, 6, 7, 8):
        image = _transpose(image)
        if orientation == 6:
            return _flip(image, 1)
        if orientation == 7:
            return _flip(_flip(image, 0), 1)
        if orientation == 8:
            return _flip(image, 0)
        return image
    if orientation == 2:
        return _flip(image, 1)
    if orientation == 3:
        return _flip(_flip(image, 0), 1)
    if orientation == 4:
        return _flip(image, 0)
    return image


def roi_in_stored(roi: tuple[int, int, int, int], orientation: int, stored_h: int, stored_w: int
                  ) -> tuple[int, int, int, int]:
    """Map a region (y, x, h, w) of the displayed image to the region of the stored image holding its pixels.

    Decoding the returned region and then applying :func:`apply_orientation` gives the displayed region. Example::

        roi_in_stored((0, 0, 10, 20), 6, stored_h=100, stored_w=50)   # (80, 0, 20, 10)
    """
    y, x, h, w = roi
    if orientation == 2:
        return y, stored_w - x - w, h, w
    if orientation == 3:
        return stored_h - y - h, stored_w - x - w, h, w
    if orientation == 4:
        return stored_h - y - h, x, h, w
    if orientation == 5:
        return x, y, w, h
    if orientation == 6:
        return stored_h - x - w, y, w, h
    if orientation == 7:
        return stored_h - x - w, stored_w - y - h, w, h
    if orientation == 8:
        return x, stored_w - y - h, w, h
    return y, x, h, w
