"""Video backends behind one interface: PyAV on the CPU, NVDEC (PyNvVideoCodec) on the GPU.

A backend has ``device`` ("cpu" or "cuda") and ``decode(source, index, frames) -> {frame: HWC uint8 RGB}``
(numpy arrays on the CPU, CUDA tensors on the GPU). :func:`read_frames` is what the operators call: it resolves a
request (frame numbers or timestamps, padding), asks the backend for the distinct real frames and assembles the
FHWC clip. :func:`read_clips` decodes several resolved requests (:func:`prepare_clip`) in one backend call, which
lets the hybrid backend (``hybrid.HybridBackend``: NVDEC and the CPU at once) share out a whole batch. Example::

    clip = read_frames("clip.mp4", frames=[0, 8, 16, 8])
    clip.frames.shape       # (4, H, W, 3) uint8
    clip.timestamps         # seconds of each returned frame (-1 for constant padding)
    clips = read_clips([prepare_clip("clip.mp4", frames=[0, 60]), prepare_clip("clip.mp4", frames=[5])])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .index import PAD_MODES, Source, VideoError, VideoIndex, build_index, describe, get_index
from .pyav import PyAVBackend, read_audio_window

__all__ = ["PAD_MODES", "PyAVBackend", "Clip", "ClipRequest", "VideoError", "VideoIndex", "build_index", "describe",
           "PendingClips", "finish_clip", "get_index", "prepare_clip", "read_audio_window", "read_clips", "read_frames",
           "requested_frames"]


@dataclass
class Clip:
    """Decoded frames (FHWC uint8 RGB tensor), their timestamps (s) and frame numbers (-1 where padded)."""

    frames: torch.Tensor
    timestamps: np.ndarray
    frame_numbers: np.ndarray


def requested_frames(idx: VideoIndex, *, frames: Sequence[int] | None = None, start_frame: int = 0,
                     end_frame: int | None = None, stride: int = 1, sequence_length: int | None = None,
                     timestamps: Sequence[float] | None = None, pad_mode: str = "none") -> np.ndarray:
    """Frame numbers a request names (before padding), in request order.

    ``frames`` (any order, repeats allowed), or ``timestamps`` in seconds (the frame shown at that time), or
    ``start_frame + k * stride`` for ``k < sequence_length`` / up to ``end_frame`` (exclusive) / to the end.
    """
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    if frames is not None and len(frames):
        return np.asarray(frames, np.int64).reshape(-1)
    if timestamps is not None and len(timestamps):
        return idx.frame_at_times(timestamps, pad_mode)
    if start_frame < 0:
        raise ValueError(f"{idx.name}: start_frame {start_frame} is out of range: frames are numbered from 0")
    if sequence_length:
        return start_frame + stride * np.arange(int(sequence_length), dtype=np.int64)
    stop = idx.num_frames if end_frame is None or end_frame < 0 else int(end_frame)
    return np.arange(start_frame, stop, stride, dtype=np.int64)


def _fill_frame(idx: VideoIndex, fill_value, device) -> torch.Tensor:
    fill = np.asarray(fill_value if fill_value is not None else 0, np.float64).reshape(-1)
    if len(fill) not in (1, 3) or fill.min() < 0 or fill.max() > 255:
        raise ValueError(f"fill_value must be one value or 3 values (R, G, B) in [0, 255], got {fill_value!r}")
    px = torch.tensor(np.broadcast_to(fill, (3,)).round().astype(np.uint8), device=device)
    return px.expand(idx.height, idx.width, 3)


_CPU = PyAVBackend()


def _assemble(idx: VideoIndex, real: np.ndarray, decoded: dict, fill_value, device: str) -> torch.Tensor:
    """Stack the decoded frames in request order (repeats copied, -1 filled) into one FHWC uint8 tensor."""
    shapes = {tuple(f.shape) for f in decoded.values()}
    if len(shapes) > 1:
        raise VideoError(f"{idx.name}: the requested frames differ in size ({sorted(shapes)}); a clip needs frames "
                         f"of one size (the resolution changes inside the video)")
    shape = shapes.pop() if shapes else (idx.height, idx.width, 3)
    if device != "cpu" and decoded:  # where the backend put the frames (the hybrid backend without CUDA: the CPU)
        device = str(next(iter(decoded.values())).device)
    fill = _fill_frame(idx, fill_value, device)[: shape[0], : shape[1]] if (real < 0).any() else None
    if device == "cpu":  # numpy copies are cheaper than torch.stack for many small frames
        out = np.empty((len(real), *shape), np.uint8)
        for k, f in enumerate(real.tolist()):
            out[k] = decoded[f] if f >= 0 else fill.numpy()
        return torch.from_numpy(out)
    if not len(real):
        return torch.empty((0, *shape), dtype=torch.uint8, device=device)
    return torch.stack([decoded[f] if f >= 0 else fill for f in real.tolist()])


@dataclass
class ClipRequest:
    """A resolved request: the source, its index, the real frames in request order (-1: constant fill)."""

    source: Source
    index: VideoIndex
    real: np.ndarray
    fill_value: object = 0

    @property
    def distinct(self) -> np.ndarray:
        return np.unique(self.real[self.real >= 0])


def prepare_clip(source: Source, *, frames: Sequence[int] | None = None, timestamps: Sequence[float] | None = None,
                 start_frame: int = 0, end_frame: int | None = None, stride: int = 1,
                 sequence_length: int | None = None, pad_mode: str = "none", fill_value=0,
                 index: VideoIndex | None = None, name: str | None = None) -> ClipRequest:
    """Resolve a request (see :func:`requested_frames`; padding applied) without decoding anything."""
    idx = index or get_index(source, name=name)
    wanted = requested_frames(idx, frames=frames, start_frame=start_frame, end_frame=end_frame, stride=stride,
                              sequence_length=sequence_length, timestamps=timestamps, pad_mode=pad_mode)
    return ClipRequest(source, idx, idx.resolve_padding(wanted, pad_mode), fill_value)


def finish_clip(req: ClipRequest, decoded: dict, backend) -> Clip:
    """The clip of a resolved request from the frames a backend decoded for it."""
    idx, real = req.index, req.real
    device = "cuda" if backend.device != "cpu" else "cpu"
    clip = _assemble(idx, real, decoded, req.fill_value, device)
    times = np.where(real >= 0, idx.times[np.maximum(real, 0)] if idx.num_frames else -1.0, -1.0)
    return Clip(clip, times.astype(np.float64), real.astype(np.int64))


def read_frames(source: Source, *, frames: Sequence[int] | None = None, timestamps: Sequence[float] | None = None,
                start_frame: int = 0, end_frame: int | None = None, stride: int = 1,
                sequence_length: int | None = None, pad_mode: str = "none", fill_value=0, backend=None,
                index: VideoIndex | None = None, name: str | None = None) -> Clip:
    """Decode a clip of ``source`` (path or encoded bytes); see :func:`requested_frames` for the request."""
    backend = backend or _CPU
    req = prepare_clip(source, frames=frames, timestamps=timestamps, start_frame=start_frame, end_frame=end_frame,
                       stride=stride, sequence_length=sequence_length, pad_mode=pad_mode, fill_value=fill_value,
                       index=index, name=name)
    return finish_clip(req, backend.decode(source, req.index, req.distinct), backend)


def read_clips(requests: Sequence[ClipRequest], backend=None) -> list[Clip]:
    """Decode several resolved requests (:func:`prepare_clip`) at once: with a backend that has
    ``submit_batch`` (the hybrid NVDEC + CPU one), all their groups of pictures are shared out together.
    An exception carries ``request_index``, the request it concerns. Example::

        clips = read_clips([prepare_clip("a.mp4", frames=[0, 60]), prepare_clip("b.mp4", frames=[3])], backend)
    """
    backend = backend or _CPU
    if hasattr(backend, "submit_batch"):
        return PendingClips(requests, backend).result()
    decoded = []
    for k, r in enumerate(requests):
        try:
            decoded.append(backend.decode(r.source, r.index, r.distinct))
        except Exception as e:  # noqa: BLE001 - re-raised naming the request
            e.request_index = k
            raise
    return _finish_clips(requests, decoded, backend)


class PendingClips:
    """Resolved requests whose decoding a backend with ``submit_batch`` (the hybrid one) has started:
    ``result()`` waits and returns the clips as :func:`read_clips` does; ``cancel()`` stops the decoding.
    ``readers.video`` submits its next batch this way while it hands out the current one. Example::

        ahead = PendingClips([prepare_clip("a.mp4", frames=[0, 60])], backend)
        clips = ahead.result()
    """

    def __init__(self, requests: Sequence[ClipRequest], backend) -> None:
        self.requests, self.backend = list(requests), backend
        self._pending = backend.submit_batch([(r.source, r.index, r.distinct) for r in self.requests])

    def result(self) -> list[Clip]:
        return _finish_clips(self.requests, self._pending.result(), self.backend)

    def cancel(self) -> None:
        self._pending.cancel()


def _finish_clips(requests: Sequence[ClipRequest], decoded: list, backend) -> list[Clip]:
    out = []
    for k, (r, d) in enumerate(zip(requests, decoded)):
        try:
            out.append(finish_clip(r, d, backend))
        except Exception as e:  # noqa: BLE001
            e.request_index = k
            raise
    return out
