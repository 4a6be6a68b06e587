"""Frames that carry their own index in pixels, for tests and benchmarks.

A frame made by :func:`make_frame` has a band of black/white blocks along its top edge that spells the frame
index in binary (most significant bit first); :func:`read_barcode` reads it back from a decoded frame, surviving
lossy compression and chroma subsampling because each bit is a block of many pixels. Example::

    frame = make_frame(37, 64, 48)        # HWC uint8 RGB
    assert read_barcode(frame) == 37
"""

from __future__ import annotations

import functools

import numpy as np

BAND_FRACTION = 3  # the barcode band is the top third of the frame


def num_bits(width: int) -> int:
    """How many bits fit across a frame of this width (blocks at least 4 pixels wide, at most 24 bits)."""
    return max(1, min(24, width // 4))


def _block_edges(width: int) -> np.ndarray:
    bits = num_bits(width)
    return np.linspace(0, width, bits + 1).astype(int)


def make_frame(index: int, width: int, height: int) -> np.ndarray:
    """An HWC uint8 RGB frame whose top band encodes ``index``; the rest is a gradient that moves with it."""
    bits = num_bits(width)
    if index >= 1 << bits:
        raise ValueError(f"frame index {index} does not fit in {bits} bits at width {width}")
    frame = np.empty((height, width, 3), np.uint8)
    yy, xx = np.mgrid[0:height, 0:width]
    frame[..., 0] = (xx * 4 + index * 3) % 256
    frame[..., 1] = (yy * 4 + index) % 256
    frame[..., 2] = 128
    return draw_barcode(frame, index)


def draw_barcode(frame: np.ndarray, index: int) -> np.ndarray:
    """Paint the barcode of ``index`` into the top band of an HWC uint8 frame, in place; returns the frame."""
    height, width = frame.shape[:2]
    bits = num_bits(width)
    band = max(8, height // BAND_FRACTION)
    edges = _block_edges(width)
    for b in range(bits):
        frame[:band, edges[b]:edges[b + 1]] = 255 if (index >> (bits - 1 - b)) & 1 else 0
    return frame


def read_barcode(frame) -> int:
    """The index encoded in ``frame`` (HWC RGB, numpy or torch, any device)."""
    return read_barcodes(frame[None])[0]


def write_barcode_video(path, codec: str = "libx264", num_frames: int = 30, width: int = 64, height: int = 48,
                        fps: int = 30, pts: "list[int] | None" = None, time_base=None, options: dict | None = None,
                        audio: str | None = None, audio_rate: int = 8000, container: str | None = None) -> None:
    """Encode a video with PyAV whose frame ``i`` shows barcode ``i``.

    ``pts`` (with ``time_base``, a Fraction) gives irregular presentation times for variable-frame-rate files;
    ``audio`` names an audio codec (e.g. ``pcm_s16le``) for a mono track whose sample ``k`` is ``k % 32000 - 16000``
    (exactly checkable when lossless). With libx264 the file is the same, byte for byte, every time it is written
    with the same arguments (see :func:`_x264_reproducible`). Example::

        write_barcode_video("v.mkv", "libvpx-vp9", num_frames=20)
    """
    from fractions import Fraction

    import av

    out = av.open(str(path), "w", format=container)
    stream = out.add_stream(codec, rate=None if pts is not None else fps)
    stream.width, stream.height = width, height
    stream.pix_fmt = "yuv420p"
    if pts is not None:
        tb = time_base or Fraction(1, 1000)
        stream.time_base = tb
        stream.codec_context.time_base = tb
    opts = {"g": "12"}
    if codec in ("libx264", "libx265"):
        opts.update({"preset": "ultrafast" if codec == "libx265" else "veryfast", "bf": "2"})
        if codec == "libx265":
            opts["x265-params"] = "log-level=error"
    if codec in ("libaom-av1",):
        opts.update({"cpu-used": "8"})
    if codec == "libsvtav1":
        opts.update({"preset": "12"})
    opts.update(options or {})
    if codec == "libx264":
        _x264_reproducible(opts)
    stream.options = opts
    astream = None
    if audio:
        astream = out.add_stream(audio, rate=audio_rate)
        astream.layout = "mono"
    for i in range(num_frames):
        frame = av.VideoFrame.from_ndarray(make_frame(i, width, height), format="rgb24")
        if pts is not None:
            frame.pts = int(pts[i])
            frame.time_base = tb
        else:
            frame.pts = i
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)
    if astream is not None:
        total = int(round((pts[-1] * float(tb) if pts is not None else num_frames / fps) * audio_rate))
        samples = (np.arange(total) % 32000 - 16000).astype(np.int16)
        step = astream.codec_context.frame_size or 1024
        for start in range(0, total, step):
            chunk = samples[start:start + step]
            af = av.AudioFrame.from_ndarray(chunk[None, :], format="s16", layout="mono")
            af.sample_rate = audio_rate
            af.pts = start
            for packet in astream.encode(af):
                out.mux(packet)
        for packet in astream.encode():
            out.mux(packet)
    out.close()


@functools.lru_cache(maxsize=None)
def _cpu_has_avx512() -> bool:
    """Whether this CPU reports AVX-512 (Linux: the flags of /proc/cpuinfo; elsewhere taken as no)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return "avx512f" in line.split()
    except OSError:
        pass
    return False


def _x264_reproducible(opts: dict) -> None:
    """Keep libx264 off its AVX-512 code on CPUs that have it (``x264-params`` gets ``asm=avx2`` unless the caller
    names ``asm``), so that the same frames always make the same file.

    With AVX-512, the x264 of PyAV's wheel (libavcodec 62, x264 core 165) lets stale contents of the C heap change
    a small video's bitstream. Measured on a 2-core AVX-512 host, 32x32 pixels, 16 frames: 3 to 36 encodes in 300
    differed from the usual bytes in a plain loop (it depends on the process), about 60 in 100 after freeing
    blocks of non-zero bytes, 139 in 300 with ``asm=avx512`` named; with ``asm=avx2`` none in 1,200 (none in 100
    after freeing such blocks), with ``asm=0`` none in 300, and both give the usual bytes. A test that wrote its
    video again for a second pipeline then compared two different videos (the video readers' checkpoint round
    trip failed so). Valgrind sees no uninitialised read in x264 or swscale, but it runs no AVX-512 code. Every
    AVX-512 CPU has AVX2, so the cap selects no code the CPU lacks."""
    if not _cpu_has_avx512():
        return
    params = str(opts.get("x264-params") or "")
    if any(p.strip().startswith("asm=") for p in params.split(":")):
        return
    opts["x264-params"] = f"{params}:asm=avx2" if params else "asm=avx2"


def read_barcodes(frames) -> list[int]:
    """The indexes encoded in a batch of FHWC frames (numpy, or torch on any device: reduced there first)."""
    import torch

    if not isinstance(frames, torch.Tensor):
        frames = torch.as_tensor(np.asarray(frames))
    n, height, width = frames.shape[:3]
    if n == 0:
        return []
    band = max(8, height // BAND_FRACTION)
    rows = frames[:, 2:band - 2].float().mean(dim=(1, 3))  # (F, W) on the frames' device
    edges = _block_edges(width)
    cols = []
    for b in range(len(edges) - 1):
        lo, hi = int(edges[b]), int(edges[b + 1])
        lo, hi = (lo + 1, hi - 1) if hi - lo > 2 else (lo, hi)
        cols.append(rows[:, lo:hi].mean(dim=1))
    bits = (torch.stack(cols) > 127).cpu().numpy().astype(np.int64)  # (bits, F)
    weights = 1 << np.arange(len(cols) - 1, -1, -1, dtype=np.int64)
    return (weights[:, None] * bits).sum(axis=0).tolist()

