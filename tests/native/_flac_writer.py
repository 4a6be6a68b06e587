"""A small FLAC writer for tests: streams whose every coding choice is the test's (subframe kinds and orders, LPC
precision and shift, Rice or Rice2 partitions, escape codes, wasted bits, stereo modes, variable block sizes), which
libFLAC's encoder (behind soundfile) never makes or makes only by chance. Pure Python, exact integer arithmetic,
slow: keep the streams short."""

from __future__ import annotations

from dataclasses import dataclass, field

_CRC8 = []
_CRC16 = []
for _b in range(256):
    c8, c16 = _b, _b << 8
    for _ in range(8):
        c8 = ((c8 << 1) ^ (0x07 if c8 & 0x80 else 0)) & 0xFF
        c16 = ((c16 << 1) ^ (0x8005 if c16 & 0x8000 else 0)) & 0xFFFF
    _CRC8.append(c8)
    _CRC16.append(c16)


def crc8(data: bytes) -> int:
    c = 0
    for b in data:
        c = _CRC8[c ^ b]
    return c


def crc16(data: bytes) -> int:
    c = 0
    for b in data:
        c = ((c << 8) & 0xFFFF) ^ _CRC16[(c >> 8) ^ b]
    return c


class _Bits:
    def __init__(self):
        self.bits: list[int] = []

    def put(self, value: int, n: int) -> None:
        value &= (1 << n) - 1                                 # two's complement for negative values
        self.bits.extend((value >> (n - 1 - i)) & 1 for i in range(n))

    def unary(self, zeros: int) -> None:
        self.bits.extend([0] * zeros + [1])

    def pad(self) -> None:
        self.bits.extend([0] * (-len(self.bits) % 8))

    def bytes(self) -> bytes:
        assert len(self.bits) % 8 == 0
        return bytes(int("".join(map(str, self.bits[i: i + 8])), 2) for i in range(0, len(self.bits), 8))


@dataclass
class Sub:
    """How one subframe is coded: ``kind`` "constant", "verbatim", "fixed" (``order`` 0-4) or "lpc" (``coefs``
    with ``precision`` bits and ``shift``); the residual with ``method`` 0 (Rice) or 1 (Rice2), ``porder``
    (partition order), ``escape``: the partitions written as raw values; ``wasted``: low zero bits taken out."""

    kind: str = "fixed"
    order: int = 2
    coefs: list[int] = field(default_factory=list)
    precision: int = 12
    shift: int = 10
    method: int = 0
    porder: int = 0
    escape: tuple[int, ...] = ()
    wasted: int = 0


def _rice_param(values: list[int], method: int) -> int:
    u = [(v << 1) ^ (v >> 63) for v in values] or [0]        # zigzag
    mean = sum(u) // len(u)
    return min(mean.bit_length(), 14 if method == 0 else 30)


def _subframe(w: _Bits, s: list[int], bits: int, sub: Sub) -> None:
    if sub.wasted:
        assert all(v % (1 << sub.wasted) == 0 for v in s)
        s = [v >> sub.wasted for v in s]
        bits -= sub.wasted
    kind = {"constant": 0, "verbatim": 1}.get(sub.kind)
    if kind is None:
        kind = 8 + sub.order if sub.kind == "fixed" else 31 + len(sub.coefs)
    w.put(0, 1)
    w.put(kind, 6)
    w.put(1 if sub.wasted else 0, 1)
    if sub.wasted:
        w.unary(sub.wasted - 1)
    if sub.kind == "constant":
        assert len(set(s)) == 1
        w.put(s[0], bits)
        return
    if sub.kind == "verbatim":
        for v in s:
            w.put(v, bits)
        return
    order = sub.order if sub.kind == "fixed" else len(sub.coefs)
    for v in s[:order]:
        w.put(v, bits)
    if sub.kind == "fixed":
        poly = [[], [1], [2, -1], [3, -3, 1], [4, -6, 4, -1]][order]
        res = [s[i] - sum(c * s[i - 1 - j] for j, c in enumerate(poly)) for i in range(order, len(s))]
    else:
        w.put(sub.precision - 1, 4)
        w.put(sub.shift, 5)
        for c in sub.coefs:
            w.put(c, sub.precision)
        res = [s[i] - (sum(c * s[i - 1 - j] for j, c in enumerate(sub.coefs)) >> sub.shift)
               for i in range(order, len(s))]
    w.put(sub.method, 2)
    w.put(sub.porder, 4)
    size = len(s) >> sub.porder
    assert size << sub.porder == len(s) and size >= order
    at = 0
    for p in range(1 << sub.porder):
        part = res[at: at + size - (order if p == 0 else 0)]
        at += len(part)
        if p in sub.escape:
            raw = max(v.bit_length() + 1 for v in part) if any(part) else 0
            w.put(15 if sub.method == 0 else 31, 4 + sub.method)
            w.put(raw, 5)
            for v in part:
                w.put(v, raw)
            continue
        k = _rice_param(part, sub.method)
        w.put(k, 4 + sub.method)
        for v in part:
            u = (v << 1) ^ (v >> 63)
            w.unary(u >> k)
            w.put(u & ((1 << k) - 1), k)


def _utf8(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    for length, limit in ((2, 0x800), (3, 0x10000), (4, 0x200000), (5, 0x4000000), (6, 0x80000000), (7, 1 << 36)):
        if n < limit:
            break
    out = [0x80 | ((n >> (6 * i)) & 0x3F) for i in range(length - 1)][::-1]
    lead = (0xFF << (8 - length)) & 0xFF | (n >> (6 * (length - 1)))
    return bytes([lead] + out)


_SIZE_CODES = {8: 1, 12: 2, 16: 4, 20: 5, 24: 6, 32: 7}


def flac_stream(channels: list[list[int]], rate: int, bits: int, blocks: list[int], subs, *,
                assignment: int = 0, variable: bool = False) -> bytes:
    """A FLAC stream of ``channels`` (lists of ints in ``bits`` bits), in frames of ``blocks`` samples; ``subs(f,
    c)`` gives frame f's channel c coding (a :class:`Sub`); ``assignment`` 0 (independent), 8 (left-side), 9
    (right-side) or 10 (mid-side) for two channels."""
    n = len(channels[0])
    assert sum(blocks) == n
    info = _Bits()
    info.put(min(blocks[:-1] or blocks), 16)             # the last frame may be shorter
    info.put(max(blocks), 16)
    info.put(0, 24)
    info.put(0, 24)
    info.put(rate, 20)
    info.put(len(channels) - 1, 3)
    info.put(bits - 1, 5)
    info.put(n, 36)
    info.put(0, 128)
    head = b"fLaC" + bytes([0x80, 0, 0, 34]) + info.bytes()
    frames = []
    at = 0
    for f, block in enumerate(blocks):
        chans = [c[at: at + block] for c in channels]
        if assignment == 8:
            chans = [chans[0], [a - b for a, b in zip(*chans)]]
        elif assignment == 9:
            chans = [[a - b for a, b in zip(*chans)], chans[1]]
        elif assignment == 10:
            chans = [[(a + b) >> 1 for a, b in zip(*chans)], [a - b for a, b in zip(*chans)]]
        h = bytearray([0xFF, 0xF8 | int(variable), 0x70, ((assignment or len(channels) - 1) << 4) |
                       (_SIZE_CODES[bits] << 1)])
        h += _utf8(at if variable else f) + (block - 1).to_bytes(2, "big")
        h.append(crc8(bytes(h)))
        w = _Bits()
        for c, s in enumerate(chans):
            side = (assignment in (8, 10) and c == 1) or (assignment == 9 and c == 0)
            _subframe(w, s, bits + side, subs(f, c))
        w.pad()
        body = bytes(h) + w.bytes()
        frames.append(body + crc16(body).to_bytes(2, "big"))
        at += block
    return head + b"".join(frames)
