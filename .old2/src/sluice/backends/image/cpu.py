"""CPU image decoding with real codecs: libjpeg-turbo (through simplejpeg) for JPEG, OpenCV and Pillow for the rest.

All calls release the GIL inside the codec, so the pipeline's worker threads decode in parallel. Every failure is
an :class:`ImageDecodeError` naming the file, the decoder and the reason; nothing returns a blank image.

Example::

    info = probe(data, source="cat.jpg")              # header only: format, size, channels, EXIF orientation
    rgb = decode(data, output_type="RGB", source="cat.jpg")   # HWC uint8 NumPy array, upright
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

import numpy as np

from .common import (ImageDecodeError, apply_orientation, check_pixel_limit, oriented_hw, OUTPUT_TYPES,
                     YCBCR_FROM_RGB)
from .formats import FORMATS, JpegHeader, as_bytes, jpeg_header, sniff_format

__all__ = ["ImageInfo", "probe", "decode", "decode_jpeg_into", "to_output_type", "JPEG_DECODER", "OPENCV",
           "PILLOW"]

logger = logging.getLogger(__name__)

JPEG_DECODER = "simplejpeg (libjpeg-turbo)"
OPENCV = "OpenCV"
PILLOW = "Pillow"

# Formats OpenCV decodes here; GIF (first frame) and anything OpenCV refuses go to Pillow. BMP and PNM go to Pillow
# too: OpenCV fills a truncated BMP/PNM with zeros without an error, Pillow reports the truncation.
_OPENCV_FORMATS = frozenset({"png", "tiff", "webp", "jpeg2000"})
_EXIF_ORIENTATION = 0x0112


@dataclass(frozen=True)
class ImageInfo:
    """Header facts: ``format`` (one of FORMATS), stored ``height``/``width``, stored ``channels``, EXIF
    ``orientation`` (1..8), for JPEG the parsed frame header, and the sample ``bit_depth`` (8 or 16)."""

    format: str
    height: int
    width: int
    channels: int
    orientation: int = 1
    jpeg: JpegHeader | None = None
    bit_depth: int = 8

    def shape(self, adjust_orientation: bool = True) -> tuple[int, int, int]:
        """(H, W, C) as :func:`decode` with ``output_type='ANY_DATA'`` would return it."""
        h, w = oriented_hw(self.height, self.width, self.orientation if adjust_orientation else 1)
        return h, w, self.channels


def _pil():
    from PIL import Image

    return Image


def _cv2():
    import cv2  # on first use: importing sluice needs no codec (the image extra brings OpenCV)

    return cv2


def _open_pil(buf: memoryview, source: str, what: str):
    try:
        return _pil().open(io.BytesIO(buf))
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types for bad headers
        raise ImageDecodeError(f"corrupt {what} header ({type(exc).__name__}: {exc})", source=source,
                               decoder=PILLOW) from exc


def _pil_orientation(img) -> int:
    try:
        value = int(img.getexif().get(_EXIF_ORIENTATION, 1))
    except Exception:  # noqa: BLE001 - a broken EXIF block means "no orientation", as libjpeg-based readers do
        return 1
    return value if 1 <= value <= 8 else 1


_MODE_CHANNELS = {"1": 1, "L": 1, "I": 1, "I;16": 1, "I;16B": 1, "I;16L": 1, "F": 1, "LA": 2, "La": 2,
                  "RGB": 3, "YCbCr": 3, "LAB": 3, "HSV": 3, "RGBA": 4, "RGBa": 4, "CMYK": 3, "RGBX": 3}


def _pil_channels(img) -> int:
    if img.mode in ("P", "PA"):
        return 4 if (img.mode == "PA" or "transparency" in img.info) else 3
    return _MODE_CHANNELS.get(img.mode, 3)


def probe(data, *, source: str = "") -> ImageInfo:
    """Read only the header: format, size, channels and EXIF orientation. Raises ImageDecodeError for empty data,
    an unknown format or a broken header.

    Example::

        probe(open("cat.png", "rb").read()).shape()   # (480, 640, 3)
    """
    buf = as_bytes(data)
    if len(buf) == 0:
        raise ImageDecodeError("the data is empty (0 bytes)", source=source, decoder="format detection")
    fmt = sniff_format(buf)
    if fmt is None:
        raise ImageDecodeError(
            f"unknown image format (first bytes: {bytes(buf[:8]).hex(' ')}); supported formats are "
            f"{', '.join(FORMATS)}", source=source, decoder="format detection")
    if fmt == "jpeg":
        try:
            hdr = jpeg_header(buf)
        except ValueError as exc:
            raise ImageDecodeError(str(exc), source=source, decoder="JPEG header parser") from exc
        orientation = _pil_orientation(_open_pil(buf, source, "JPEG")) if hdr.has_exif else 1
        return ImageInfo("jpeg", hdr.height, hdr.width, 1 if hdr.components == 1 else 3, orientation, hdr)
    img = _open_pil(buf, source, fmt)
    orientation = 1
    # Pillow decodes a whole PNG to find an eXIf chunk placed after the pixels: ask only when there is one.
    if fmt != "png" or bytes(buf).find(b"eXIf") >= 0:
        orientation = _pil_orientation(img)
    bits = 16 if img.mode.startswith("I") else 8
    return ImageInfo(fmt, img.height, img.width, _pil_channels(img), orientation, bit_depth=bits)


def to_output_type(image: np.ndarray, output_type: str) -> np.ndarray:
    """Convert an HWC (or HW) RGB/gray/RGBA image to ``output_type`` ('RGB', 'BGR', 'GRAY', 'YCbCr', 'ANY_DATA').

    RGB drops alpha and replicates gray; GRAY uses the BT.601 luma weights; YCbCr is full-range BT.601 (JFIF).
    Example::

        to_output_type(rgb, "BGR")
    """
    if image.ndim == 2:
        image = image[:, :, None]
    c = image.shape[2]
    if output_type == "ANY_DATA":
        return image
    if output_type == "GRAY":
        if c == 1:
            return image
        if c == 2:
            return image[:, :, :1]
        cv2 = _cv2()
        return cv2.cvtColor(np.ascontiguousarray(image[:, :, :3]), cv2.COLOR_RGB2GRAY)[:, :, None]
    rgb = image[:, :, :3] if c >= 3 else np.repeat(image[:, :, :1], 3, axis=2)
    if output_type == "RGB":
        return rgb
    if output_type == "BGR":
        return rgb[:, :, ::-1]
    if output_type == "YCbCr":
        m = np.asarray(YCBCR_FROM_RGB, np.float32)
        top = 255.0 if rgb.dtype == np.uint8 else 65535.0
        ycc = rgb.astype(np.float32) @ m.T
        ycc[:, :, 1:] += (top + 1) / 2
        return np.clip(np.rint(ycc), 0, top).astype(rgb.dtype)
    raise ValueError(f"Invalid output_type ({output_type!r}). Supported values are {', '.join(OUTPUT_TYPES)}.")


def _decode_pil(buf: memoryview, source: str, what: str) -> np.ndarray:
    """Decode with Pillow (GIF first frame, BMP, PNM, CMYK/YCCK JPEG, OpenCV refusals) to RGB/RGBA/gray."""
    img = _open_pil(buf, source, what)
    try:
        img.seek(0)
        mode = img.mode
        if mode in ("P", "PA"):
            img = img.convert("RGBA" if _pil_channels(img) == 4 else "RGB")
        elif mode == "1":
            img = img.convert("L")
        elif mode in ("CMYK", "YCbCr", "LAB", "HSV", "RGBX"):
            img = img.convert("RGB")
        elif mode in ("RGBa", "La"):
            img = img.convert(mode.upper())
        elif mode == "I":
            arr = np.asarray(img)
            if arr.min() < 0 or arr.max() > 65535:
                raise ImageDecodeError("32-bit integer images are not supported; 8 and 16 bit are",
                                       source=source, decoder=PILLOW)
            return arr.astype(np.uint16)
        elif mode == "F":
            raise ImageDecodeError("floating-point images are not supported; 8 and 16 bit are", source=source,
                                   decoder=PILLOW)
        arr = np.array(img)  # a writable copy: Pillow's buffer view is read-only
    except ImageDecodeError:
        raise
    except Exception as exc:  # noqa: BLE001 - OSError (truncated), SyntaxError, struct.error ...
        raise ImageDecodeError(f"corrupt or truncated {what} data ({type(exc).__name__}: {exc})", source=source,
                               decoder=PILLOW) from exc
    if arr.dtype.kind in "iu" and arr.dtype.itemsize == 2:
        arr = arr.astype(np.uint16)
    elif arr.dtype == np.bool_:
        arr = arr.astype(np.uint8) * 255
    return arr


def _decode_opencv(buf: memoryview, source: str, what: str) -> np.ndarray:
    cv2 = _cv2()
    arr = cv2.imdecode(np.frombuffer(buf, np.uint8), cv2.IMREAD_UNCHANGED)
    if arr is None:
        logger.debug("OpenCV could not decode %s (%s); trying Pillow", source or "a sample", what)
        return _decode_pil(buf, source, what)
    if arr.dtype not in (np.uint8, np.uint16):
        raise ImageDecodeError(f"{arr.dtype} pixels are not supported; 8 and 16 bit are", source=source,
                               decoder=OPENCV)
    if arr.ndim == 3 and arr.shape[2] == 3:
        arr = arr[:, :, ::-1]
    elif arr.ndim == 3 and arr.shape[2] == 4:
        arr = arr[:, :, [2, 1, 0, 3]]
    return arr


def decode_jpeg_into(buf, out: np.ndarray | None, *, colorspace: str = "RGB", use_fast_idct: bool = False,
                     source: str = "") -> np.ndarray:
    """Decode a YCbCr/gray JPEG with libjpeg-turbo (simplejpeg) into ``out`` when given (e.g. pinned memory).

    ``colorspace`` is 'RGB', 'BGR' or 'GRAY'. Truncated or corrupt data raises (strict mode), never returns a
    grey fill. Example::

        decode_jpeg_into(data, None, colorspace="RGB")
    """
    import simplejpeg

    try:
        return simplejpeg.decode_jpeg(buf, colorspace=colorspace, fastdct=use_fast_idct, fastupsample=False,
                                      strict=True, buffer=out)
    except Exception as exc:  # noqa: BLE001 - simplejpeg raises ValueError/RuntimeError with libjpeg's message
        raise ImageDecodeError(f"corrupt or truncated JPEG data ({exc})", source=source,
                               decoder=JPEG_DECODER) from exc


def decode(data, *, output_type: str = "RGB", adjust_orientation: bool = True, use_fast_idct: bool = False,
           roi: tuple[int, int, int, int] | None = None, info: ImageInfo | None = None,
           source: str = "") -> np.ndarray:
    """Decode one image to an HWC NumPy array (uint8, or uint16 for 16-bit PNG/TIFF/PNM sources).

    ``roi`` = (y, x, h, w) in the upright image keeps only that region (it must lie inside the image).
    Example::

        decode(png_bytes, output_type="GRAY", roi=(0, 0, 32, 32))
    """
    buf = as_bytes(data)
    info = info or probe(buf, source=source)
    if info.format == "jpeg":
        check_pixel_limit(info.height, info.width, source=source, decoder=JPEG_DECODER)
        if info.jpeg is not None and info.jpeg.cmyk:
            arr = _decode_pil(buf, source, "CMYK/YCCK JPEG")
        else:
            direct = {"RGB": "RGB", "BGR": "BGR", "GRAY": "GRAY"}.get(output_type)
            cs = direct or ("GRAY" if info.channels == 1 and output_type == "ANY_DATA" else "RGB")
            arr = decode_jpeg_into(buf, None, colorspace=cs, use_fast_idct=use_fast_idct, source=source)
            if direct:
                output_type = "ANY_DATA"  # already converted by libjpeg-turbo
    else:
        decoder = OPENCV if info.format in _OPENCV_FORMATS else PILLOW
        check_pixel_limit(info.height, info.width, source=source, decoder=decoder)
        if decoder == OPENCV:
            arr = _decode_opencv(buf, source, info.format)
        else:
            arr = _decode_pil(buf, source, info.format.upper())
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if adjust_orientation and info.orientation != 1:
        arr = apply_orientation(arr, info.orientation)
    if roi is not None:
        y, x, h, w = roi
        if y < 0 or x < 0 or h <= 0 or w <= 0 or y + h > arr.shape[0] or x + w > arr.shape[1]:
            raise ValueError(f"crop window (y={y}, x={x}, h={h}, w={w}) lies outside the "
                             f"{arr.shape[0]} x {arr.shape[1]} image")
        arr = arr[y:y + h, x:x + w]
    arr = np.ascontiguousarray(to_output_type(arr, output_type))
    return arr if arr.flags.writeable else arr.copy()
