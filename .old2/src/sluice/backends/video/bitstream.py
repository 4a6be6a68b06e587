"""Which H.264 / HEVC packets hold non-reference pictures, read from their NAL unit headers.

A non-reference picture (H.264 ``nal_ref_idc == 0``; HEVC sub-layer non-reference NAL types TRAIL_N, TSA_N,
STSA_N, RADL_N, RASL_N, RSV_VCL_N*) is never used to predict another picture, so a clip that does not want it
need not decode it: with libx264's default B-frames that is a large share of a group of pictures. Packets may be
in Annex B (start codes) or length-prefixed (mp4/mkv) form. Example::

    is_nonref = nonref_detector("h264", stream.codec_context.extradata)
    if is_nonref(memoryview(packet)) and frame not in wanted: skip the packet
"""

from __future__ import annotations

from typing import Callable


def _annexb_first_vcl(buf, is_vcl: Callable[[int], bool], header_len: int, limit: int = 4096):
    """First VCL NAL header (as bytes) among the first ``limit`` bytes of an Annex B buffer, or None."""
    head = _annexb_scan(bytes(buf[:256]), is_vcl, header_len)  # slices usually come first: look there first
    return head if head is not None or len(buf) <= 256 else _annexb_scan(bytes(buf[:limit]), is_vcl, header_len)


def _annexb_scan(data: bytes, is_vcl: Callable[[int], bool], header_len: int):
    """Header of the first VCL NAL after a start code in ``data``, or None."""
    i = data.find(b"\x00\x00\x01")
    while i >= 0:
        start = i + 3
        if start + header_len > len(data):
            return None
        if is_vcl(data[start]):
            return data[start:start + header_len]
        i = data.find(b"\x00\x00\x01", start)
    return None


def _lp_first_vcl(buf, size_len: int, is_vcl: Callable[[int], bool], header_len: int):
    """First VCL NAL header of a length-prefixed buffer (``size_len``-byte big-endian lengths), or None."""
    n = len(buf)
    i = 0
    while i + size_len + header_len <= n:
        length = int.from_bytes(bytes(buf[i:i + size_len]), "big")
        head = bytes(buf[i + size_len:i + size_len + header_len])
        if is_vcl(head[0]):
            return head
        if length <= 0:
            return None
        i += size_len + length
    return None


def nonref_detector(codec: str, extradata: bytes | None, annexb: bool | None = None
                    ) -> Callable[[object], bool] | None:
    """A function telling whether a packet's picture is non-reference, or None for codecs it does not know.

    ``annexb``: whether packets carry start codes (True after ``*_mp4toannexb``); by default, decided from the
    stream's extradata (avcC / hvcC records mean length-prefixed packets). It is never guessed from a packet's
    first bytes: a 4-byte length of 257 reads as a start code. It answers True only when sure; anything it cannot
    parse counts as a reference picture (decoded).
    """
    extradata = bytes(extradata or b"")
    if annexb is None:
        annexb = not (len(extradata) > 4 and extradata[0] == 1)
    if codec == "h264":
        size_len = (extradata[4] & 3) + 1 if len(extradata) > 4 and extradata[0] == 1 else 4

        def is_vcl(b: int) -> bool:
            return (b & 0x1F) in (1, 5)

        def nonref(head: bytes) -> bool:
            return (head[0] & 0x1F) == 1 and (head[0] >> 5) & 3 == 0

        header_len = 1
    elif codec == "hevc":
        size_len = (extradata[21] & 3) + 1 if len(extradata) > 22 and extradata[0] == 1 else 4

        def is_vcl(b: int) -> bool:
            return ((b >> 1) & 0x3F) < 32

        def nonref(head: bytes) -> bool:
            t = (head[0] >> 1) & 0x3F
            return t < 16 and t % 2 == 0

        header_len = 2
    else:
        return None

    def detect(packet) -> bool:
        buf = memoryview(packet).cast("B") if not isinstance(packet, (bytes, bytearray)) else packet
        if len(buf) < 4:
            return False
        head = _annexb_first_vcl(buf, is_vcl, header_len) if annexb else \
            _lp_first_vcl(buf, size_len, is_vcl, header_len)
        return head is not None and nonref(head)

    return detect


def annexb_parameter_sets(codec: str, extradata: bytes | None) -> bytes:
    """The SPS/PPS (H.264) or VPS/SPS/PPS (HEVC) of an avcC / hvcC record as Annex B NAL units, else b"".

    A decoder started at a keyframe needs them; FFmpeg's ``*_mp4toannexb`` filters add them before IDR pictures
    only, not before the recovery-point I pictures that start an open GOP. Example::

        header = annexb_parameter_sets("h264", stream.codec_context.extradata)
    """
    ex = bytes(extradata or b"")
    out = bytearray()
    try:
        if codec == "h264" and len(ex) > 6 and ex[0] == 1:
            i = 6
            for count_at_i in (True, False):
                count = (ex[5] & 0x1F) if count_at_i else ex[i]
                i += 0 if count_at_i else 1
                for _ in range(count):
                    n = int.from_bytes(ex[i:i + 2], "big")
                    out += b"\x00\x00\x00\x01" + ex[i + 2:i + 2 + n]
                    i += 2 + n
        elif codec == "hevc" and len(ex) > 23 and ex[0] == 1:
            i = 23
            for _ in range(ex[22]):
                count = int.from_bytes(ex[i + 1:i + 3], "big")
                i += 3
                for _ in range(count):
                    n = int.from_bytes(ex[i:i + 2], "big")
                    out += b"\x00\x00\x00\x01" + ex[i + 2:i + 2 + n]
                    i += 2 + n
    except IndexError:  # a truncated record: let the decoder find in-band parameter sets
        return b""
    return bytes(out)
