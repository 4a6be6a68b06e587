"""Image format detection from magic bytes and header-only facts about JPEG files.

Nothing here decodes pixels: :func:`sniff_format` looks at the first bytes, :func:`jpeg_header` walks the JPEG
marker segments up to the frame header (SOF) to learn the size, the component count, the chroma subsampling and
whether the file is progressive, which is what the GPU scheduler needs to route a sample.

Example::

    sniff_format(open("cat.png", "rb").read(16))   # 'png'
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["FORMATS", "sniff_format", "JpegHeader", "jpeg_header", "jpeg_scan_is_plausible", "jpeg_scan_start",
           "as_bytes"]

#: Every format the decoders accept, in the order they are tried.
FORMATS = ("jpeg", "png", "bmp", "tiff", "pnm", "webp", "jpeg2000", "gif")

_JP2_SIGNATURE = b"\x00\x00\x00\x0cjP  \r\n\x87\n"
_J2K_CODESTREAM = b"\xff\x4f\xff\x51"


def as_bytes(data) -> memoryview:
    """A zero-copy byte view of encoded data (bytes, NumPy uint8 array, CPU torch uint8 tensor)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return memoryview(data).cast("B")
    if hasattr(data, "numpy"):  # torch tensor on the CPU
        data = data.numpy()
    return memoryview(data).cast("B")


def sniff_format(data) -> str | None:
    """The image format of encoded bytes judged from their magic number, or None when none matches.

    Example::

        sniff_format(b"\\x89PNG\\r\\n\\x1a\\n...")   # 'png'
    """
    head = bytes(as_bytes(data)[:16])
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"BM") and len(head) >= 14:
        return "bmp"
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return "tiff"
    if len(head) >= 3 and head[0:1] == b"P" and head[1:2] in b"123456" and head[2:3] in b" \t\r\n#":
        return "pnm"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "webp"
    if head.startswith(_JP2_SIGNATURE) or head.startswith(_J2K_CODESTREAM):
        return "jpeg2000"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    return None


@dataclass(frozen=True)
class JpegHeader:
    """Facts from a JPEG's frame header.

    ``subsampling`` is '444', '422', '420', '440', '411' or 'gray' (or 'other'); ``progressive`` is True for
    SOF2 (and other non-baseline/extended processes such as lossless or arithmetic coding, which nvJPEG's batched
    GPU path does not take either); ``adobe_transform`` is the APP14 colour transform flag when present (CMYK/YCCK
    files carry it); ``has_exif`` tells whether an APP1 Exif segment precedes the frame header.
    """

    height: int
    width: int
    components: int
    subsampling: str
    progressive: bool
    baseline: bool
    has_exif: bool
    adobe_transform: int | None

    @property
    def cmyk(self) -> bool:
        return self.components == 4


_MARKER = struct.Struct(">BBH")  # 0xFF, marker, segment length
_SOF = struct.Struct(">BHHB")    # precision, height, width, components
_SOF_MARKERS = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _subsampling(factors: list[tuple[int, int]]) -> str:
    if len(factors) == 1:
        return "gray"
    (h0, v0), rest = factors[0], factors[1:]
    for f in rest:
        if f != (1, 1):
            return "other"
    return {(1, 1): "444", (2, 1): "422", (2, 2): "420", (1, 2): "440", (4, 1): "411"}.get((h0, v0), "other")


_HEAD = 2048


def _walk_to_sof(buf: bytes) -> JpegHeader | None:
    """The frame header found by walking the marker segments of ``buf``, or None when ``buf`` ends first."""
    n = len(buf)
    if n < 4 or buf[0] != 0xFF or buf[1] != 0xD8:
        raise ValueError("not a JPEG stream (no SOI marker)")
    pos = 2
    has_exif = False
    adobe = None
    while pos + 4 <= n:
        if buf[pos] != 0xFF:
            raise ValueError(f"corrupt JPEG header: expected a marker at byte {pos}")
        marker = buf[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        length = (buf[pos + 2] << 8) | buf[pos + 3]
        if length < 2 or pos + 2 + length > n:
            return None
        seg = pos + 4
        if marker == 0xE1 and buf[seg:seg + 6] == b"Exif\x00\x00":
            has_exif = True
        elif marker == 0xEE and buf[seg:seg + 5] == b"Adobe" and length >= 14:
            adobe = buf[seg + 11]
        elif marker in _SOF_MARKERS:
            if length < 8:
                return None
            _, height, width, ncomp = _SOF.unpack_from(buf, seg)
            if length < 8 + 3 * ncomp:
                return None
            factors = [(buf[seg + 7 + 3 * c] >> 4, buf[seg + 7 + 3 * c] & 15) for c in range(ncomp)]
            return JpegHeader(height, width, ncomp, _subsampling(factors), progressive=marker not in (0xC0, 0xC1),
                              baseline=marker == 0xC0, has_exif=has_exif, adobe_transform=adobe)
        elif marker == 0xDA or marker == 0xD9:
            raise ValueError("truncated or corrupt JPEG header: no frame header (SOF) found")
        pos += 2 + length
    return None


def jpeg_header(data) -> JpegHeader:
    """Walk the JPEG marker segments up to the frame header; raises ValueError when the header is cut or broken.

    Example::

        hdr = jpeg_header(jpeg_bytes)
        hdr.height, hdr.width, hdr.subsampling, hdr.progressive   # (300, 400, '420', False)
    """
    view = as_bytes(data)
    # The frame header usually lies in the first few hundred bytes (after JFIF and the quantisation tables):
    # walk a bytes copy of the head (indexing bytes is cheaper than a memoryview), the whole stream only when an
    # Exif/ICC block pushes the frame header further.
    hdr = _walk_to_sof(bytes(view[:_HEAD]))
    if hdr is None and len(view) > _HEAD:
        hdr = _walk_to_sof(bytes(view))
    if hdr is not None:
        return hdr
    raise ValueError("truncated or corrupt JPEG header: no frame header (SOF) found")


def _scan_start(buf: bytes) -> tuple[int, bool] | None:
    """(offset of the first entropy-coded byte, whether a restart interval is defined), or None when no SOS
    segment lies in ``buf``."""
    n, pos, has_dri = len(buf), 2, False
    while pos + 4 <= n:
        if buf[pos] != 0xFF:
            return None
        marker = buf[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        length = (buf[pos + 2] << 8) | buf[pos + 3]
        if marker == 0xDD:
            has_dri = length >= 4 and n >= pos + 6 and (buf[pos + 4] | buf[pos + 5]) != 0
        if marker == 0xDA:
            return pos + 2 + length, has_dri
        pos += 2 + length
    return None


def jpeg_scan_start(view: memoryview) -> tuple[int, bool] | None:
    """(offset of the first entropy-coded byte of a JPEG, whether a restart interval is defined), or None when the
    headers hold no SOS segment (cut or corrupt). Walks a copy of the head first, the whole stream only when the
    headers are longer."""
    found = _scan_start(bytes(view[:_HEAD * 4]))
    if found is None and len(view) > _HEAD * 4:
        found = _scan_start(bytes(view))
    return found


def jpeg_scan_is_plausible(data) -> bool:
    """Whether the entropy-coded data of a baseline JPEG holds only markers that may appear there: stuffed bytes
    (FF 00), fill bytes, restart markers when a restart interval is defined, EOI, and the table/scan markers of
    further scans. nvJPEG (CUDA and the hardware engines) decodes some broken streams without an error; a stream
    failing this check goes to libjpeg-turbo, whose strict mode names the damage. Runs mostly without the GIL
    (NumPy). Example::

        jpeg_scan_is_plausible(good_jpeg)                           # True
        jpeg_scan_is_plausible(jpeg_with_stray_restart_markers)    # False
    """
    import numpy as np

    view = as_bytes(data)
    found = jpeg_scan_start(view)
    if found is None:
        return False
    start, has_dri = found
    a = np.frombuffer(view, np.uint8)[start:]
    if a.size < 2:
        return False
    follower = a[1:][a[:-1] == 0xFF]
    if follower.size == 0:
        return True
    # 0x01-0xBF are reserved or SOF-family codes, except the DHT table marker C4 (allowed between scans)
    bad = (follower >= 0x01) & (follower <= 0xBF)
    bad |= follower == 0xD8  # a second SOI
    if not has_dri:
        bad |= (follower >= 0xD0) & (follower <= 0xD7)
    return not bool(bad.any())
