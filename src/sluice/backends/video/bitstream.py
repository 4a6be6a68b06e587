"""What H.264 / HEVC packets hold, read from their NAL units: non-reference pictures, and random access points.

A non-reference picture (H.264 ``nal_ref_idc == 0``; HEVC sub-layer non-reference NAL types TRAIL_N, TSA_N,
STSA_N, RADL_N, RASL_N, RSV_VCL_N*) is never used to predict another picture, so a clip that does not want it
need not decode it: with libx264's default B-frames that is a large share of a group of pictures.

A packet the container marks as a keyframe is not always a picture that decoding can start from: libx264's
periodic intra refresh marks its recovery points, whose following pictures still predict from pictures before
them (decoded from there, frames of a 64x48 video came out wrong by up to 99 levels). :func:`random_access_detector`
tells the real ones (H.264: IDR pictures, and recovery points whose recovery period is 0, which start an open GOP;
HEVC: IRAP pictures). Packets may be in Annex B (start codes) or length-prefixed (mp4/mkv) form. Example::

    is_nonref = nonref_detector("h264", stream.codec_context.extradata)
    if is_nonref(memoryview(packet)) and frame not in wanted: skip the packet
    is_rap = random_access_detector("h264", stream.codec_context.extradata)
    is_rap(packet)   # False for an intra-refresh recovery point the container marks as a keyframe
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


def _packing(codec: str, extradata: bytes, annexb: bool | None) -> tuple[bool, int]:
    """(whether packets carry start codes, the length-prefix size otherwise), from the stream's extradata: avcC /
    hvcC records mean length-prefixed packets, anything else Annex B."""
    if annexb is None:
        annexb = not (len(extradata) > 4 and extradata[0] == 1)
    if codec == "h264":
        return annexb, (extradata[4] & 3) + 1 if len(extradata) > 4 and extradata[0] == 1 else 4
    return annexb, (extradata[21] & 3) + 1 if len(extradata) > 22 and extradata[0] == 1 else 4


def _nal_units(buf, annexb: bool, size_len: int, limit: int = 1 << 16):
    """The NAL units (header first) among the first ``limit`` bytes of a packet (Annex B), or of the whole packet
    (length-prefixed: views of it, not copies)."""
    if annexb:
        data = bytes(buf[:limit])
        starts = []
        i = data.find(b"\x00\x00\x01")
        while i >= 0:
            starts.append(i + 3)
            i = data.find(b"\x00\x00\x01", i + 3)
        for k, start in enumerate(starts):
            end = starts[k + 1] - 3 if k + 1 < len(starts) else len(data)
            yield data[start:end].rstrip(b"\x00") if k + 1 < len(starts) else data[start:end]
        return
    data = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
    i = 0
    while i + size_len < len(data):
        length = int.from_bytes(data[i:i + size_len], "big")
        if length <= 0:
            return
        yield data[i + size_len:i + size_len + length]
        i += size_len + length


def _rbsp(nal) -> bytes:
    """A NAL unit's payload without its emulation prevention bytes (00 00 03 -> 00 00)."""
    return bytes(nal).replace(b"\x00\x00\x03", b"\x00\x00")


def _ue(data: bytes, bit: int) -> tuple[int, int]:
    """An Exp-Golomb code at ``bit`` of ``data``: (value, the bit after it). Raises IndexError past the end."""
    zeros = 0
    while not (data[(bit + zeros) >> 3] >> (7 - ((bit + zeros) & 7))) & 1:
        zeros += 1
    bit += zeros + 1
    value = 0
    for _ in range(zeros):
        value = (value << 1) | ((data[bit >> 3] >> (7 - (bit & 7))) & 1)
        bit += 1
    return (1 << zeros) - 1 + value, bit


def _recovery_frame_cnt(sei: bytes) -> int | None:
    """The recovery_frame_cnt of an H.264 SEI NAL unit's recovery point message, or None when it has none."""
    data = _rbsp(sei[1:])
    i = 0
    try:
        while i < len(data) and data[i] != 0x80:  # up to the RBSP trailing bits
            kind = size = 0
            while data[i] == 0xFF:
                kind, i = kind + 255, i + 1
            kind, i = kind + data[i], i + 1
            while data[i] == 0xFF:
                size, i = size + 255, i + 1
            size, i = size + data[i], i + 1
            if kind == 6:
                return _ue(data[i:i + size], 0)[0]
            i += size
    except IndexError:  # a truncated message: no recovery point read
        return None
    return None


def random_access_detector(codec: str, extradata: bytes | None, annexb: bool | None = None
                           ) -> Callable[[object], bool] | None:
    """A function telling whether a packet (one the container marks as a keyframe) is a random access point:
    decoding from it gives every picture shown from it on exactly. H.264: an IDR picture, or a picture with a
    recovery point SEI whose recovery_frame_cnt is 0 (the I picture of an open GOP); HEVC: an IRAP picture (BLA,
    IDR, CRA). None for other codecs (their containers' keyframes are trusted). ``annexb`` as for
    :func:`nonref_detector`."""
    if codec not in ("h264", "hevc"):
        return None
    extradata = bytes(extradata or b"")
    annexb, size_len = _packing(codec, extradata, annexb)

    def detect(packet) -> bool:
        buf = memoryview(packet).cast("B")
        recovery = None
        for nal in _nal_units(buf, annexb, size_len):
            if not nal:
                continue
            if codec == "hevc":
                kind = (nal[0] >> 1) & 0x3F
                if kind < 32:  # the first picture's slice: IRAP or not
                    return 16 <= kind <= 23
                continue
            kind = nal[0] & 0x1F
            if kind == 5:
                return True
            if kind == 6 and recovery is None:
                recovery = _recovery_frame_cnt(nal)
            elif kind == 1:
                return recovery == 0
        return False

    return detect


def nonref_detector(codec: str, extradata: bytes | None, annexb: bool | None = None
                    ) -> Callable[[object], bool] | None:
    """A function telling whether a packet's picture is non-reference, or None for codecs it does not know.

    ``annexb``: whether packets carry start codes (True after ``*_mp4toannexb``); by default, decided from the
    stream's extradata (avcC / hvcC records mean length-prefixed packets). It is never guessed from a packet's
    first bytes: a 4-byte length of 257 reads as a start code. It answers True only when sure; anything it cannot
    parse counts as a reference picture (decoded).
    """
    extradata = bytes(extradata or b"")
    if codec in ("h264", "hevc"):
        annexb, size_len = _packing(codec, extradata, annexb)
    if codec == "h264":

        def is_vcl(b: int) -> bool:
            return (b & 0x1F) in (1, 5)

        def nonref(head: bytes) -> bool:
            return (head[0] & 0x1F) == 1 and (head[0] >> 5) & 3 == 0

        header_len = 1
    elif codec == "hevc":

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
