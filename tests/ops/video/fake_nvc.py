"""A stand-in for PyNvVideoCodec that decodes the raw bitstream packets it is fed with PyAV's CodecContext.

It checks, on a machine without a GPU, what the NVDEC backend sends: elementary-stream packets (Annex B for
H.264/HEVC, codec headers first for MPEG-4/AV1) with their pts, flushes with an empty packet, and reads frames
through DLPack. Only the surface the backend uses is modelled.
"""

from __future__ import annotations

import ctypes
import types

import av
import numpy as np

_DECODERS = {"H264": "h264", "HEVC": "hevc", "VP9": "vp9", "AV1": "libdav1d", "MPEG4": "mpeg4", "VP8": "vp8"}


class PacketData:
    bsl = 0
    bsl_data = 0
    pts = 0


class _Frame:
    def __init__(self, rgb: np.ndarray, pts: int) -> None:
        self._rgb = np.ascontiguousarray(rgb)
        self.timestamp = pts

    def __dlpack__(self, stream=None):
        return self._rgb.__dlpack__()

    def __dlpack_device__(self):
        return self._rgb.__dlpack_device__()


class _Decoder:
    def __init__(self, codec: str) -> None:
        self.name = _DECODERS[codec]
        self.ctx = self._context()
        self.packets = 0
        self.flushes = 0

    def _context(self):
        ctx = av.CodecContext.create(self.name, "r")
        # like NVDEC, show pictures decoded without their references (FFmpeg hides them by default)
        ctx.options = {"flags2": "+showall", "flags": "+output_corrupt"}
        return ctx

    def Decode(self, packet: PacketData):  # noqa: N802 - PyNvVideoCodec's name
        if packet.bsl == 0:
            frames = self.ctx.decode(None)
            self.ctx = self._context()  # a flushed parser starts afresh, as NVDEC's
            self.flushes += 1
        else:
            p = av.Packet(ctypes.string_at(packet.bsl_data, packet.bsl))
            p.pts = packet.pts
            self.packets += 1
            try:
                frames = self.ctx.decode(p)
            except av.error.InvalidDataError:  # NVDEC drops pictures it cannot decode (missing references)
                frames = []
        return [_Frame(_nvdec_rgb(f), f.pts) for f in frames]


class SimpleDecoder:
    """PyNvVideoCodec's file decoder: frames by presentation number (PyAV decodes the whole file once).
    ``misnumber`` shifts the numbering by one (a decoder that counts frames differently from the index);
    ``fail_open`` makes opening raise (as for streams without a frame count)."""

    misnumber = False
    stamp_offsets = None  # stamps moved by these many frame intervals, in turn (right frames, stamps off)
    fail_open = False
    clock = None  # None: frames carry the stream's pts; else their time in units of 1/clock s (NVIDIA's demuxer)

    def __init__(self, path, gpu_id=0, use_device_memory=True, output_color_type="NATIVE", **_):
        assert output_color_type == "RGB" and use_device_memory
        if SimpleDecoder.fail_open:
            raise RuntimeError("Elementary streams not supported by Simple Decoder. Invalid input stream.")
        self.opened, self.calls = [], 0
        self.reconfigure_decoder(path)

    def reconfigure_decoder(self, path) -> None:
        with av.open(str(path)) as c:
            frames = sorted(c.decode(c.streams.video[0]), key=lambda f: f.pts)
            clock = SimpleDecoder.clock
            self._frames = [_Frame(_nvdec_rgb(f), f.pts if clock is None else round(f.time * clock)) for f in frames]
        self.opened.append(str(path))
        stamps = [f.timestamp for f in self._frames]
        self._step = int(np.median(np.diff(stamps))) if len(stamps) > 1 else 1

    def get_batch_frames_by_index(self, indices):
        self.calls += 1
        shift = 1 if SimpleDecoder.misnumber else 0
        if SimpleDecoder.stamp_offsets:
            offsets, step = SimpleDecoder.stamp_offsets, self._step
            out = []
            for k, i in enumerate(indices):
                f = self._frames[min(i + shift, len(self._frames) - 1)]
                moved = _Frame.__new__(_Frame)
                moved._rgb, moved.timestamp = f._rgb, f.timestamp + offsets[k % len(offsets)] * step
                out.append(moved)
            return out
        return [self._frames[min(i + shift, len(self._frames) - 1)] for i in indices]


def _nvdec_rgb(frame) -> np.ndarray:
    """RGB as NVDEC's output converts it: the matrix the stream names, BT.601 when it names none (as measured on
    the H200), limited range unless flagged full."""
    matrix = {1: "itu709", 5: "itu601", 6: "itu601", 4: "fcc", 7: "smpte240m", 9: "bt2020", 10: "bt2020"}.get(
        int(frame.colorspace), "itu601")
    src_range = "JPEG" if int(frame.color_range) == 2 else "MPEG"
    return frame.reformat(format="rgb24", src_colorspace=matrix, src_color_range=src_range,
                          dst_color_range="JPEG").to_ndarray()


def make_module(created: list, with_simple: bool = False) -> types.ModuleType:
    mod = types.ModuleType("PyNvVideoCodec")
    mod.PacketData = PacketData
    mod.cudaVideoCodec = types.SimpleNamespace(**{k: k for k in _DECODERS})
    mod.OutputColorType = types.SimpleNamespace(RGB="RGB", NATIVE="NATIVE")

    def CreateDecoder(gpuid=0, codec="H264", usedevicememory=True, outputColorType="NATIVE", **_):  # noqa: N802
        assert outputColorType == "RGB" and usedevicememory
        dec = _Decoder(codec)
        created.append(dec)
        return dec

    def GetDecoderCaps(gpuid=0, codec="H264", **_):  # noqa: N802 - NVDEC's minimum sizes (Hopper)
        small = {"HEVC": 144, "VP9": 128, "AV1": 128}.get(codec, 16)
        return {"supported": 1, "width_min": max(48, small) if codec != "H264" else 48, "height_min": small,
                "width_max": 8192, "height_max": 8192}

    def make_simple(*args, **kwargs):
        dec = SimpleDecoder(*args, **kwargs)
        created.append(dec)
        return dec

    mod.CreateDecoder = CreateDecoder
    mod.GetDecoderCaps = GetDecoderCaps
    if with_simple:
        mod.SimpleDecoder = make_simple
    return mod
