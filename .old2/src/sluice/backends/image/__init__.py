"""Thin wrappers of real image codecs: format sniffing, header-only probing, CPU decoding (libjpeg-turbo via
simplejpeg, OpenCV, Pillow), batched GPU decoding (nvImageCodec / torchvision nvJPEG) and the split scheduler.

Example::

    from sluice.backends.image import probe, decode
    info = probe(data)                 # ImageInfo(format='jpeg', height=..., width=..., ...)
    rgb = decode(data, output_type="RGB")
"""

from .common import (ImageDecodeError, apply_orientation, check_pixel_limit, get_max_image_pixels, oriented_hw,
                     roi_in_stored, set_max_image_pixels)
from .cpu import ImageInfo, decode, probe, to_output_type
from .formats import FORMATS, JpegHeader, jpeg_header, sniff_format
from .scheduler import SplitScheduler

__all__ = [
    "ImageDecodeError", "apply_orientation", "check_pixel_limit", "get_max_image_pixels", "oriented_hw",
    "roi_in_stored", "set_max_image_pixels", "ImageInfo", "decode", "probe", "to_output_type", "FORMATS",
    "JpegHeader", "jpeg_header", "sniff_format", "SplitScheduler",
]
