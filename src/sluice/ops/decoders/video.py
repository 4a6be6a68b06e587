"""``fn.decoders.video``: encoded video bytes in, chosen frames out (FHWC uint8 RGB).

Frames are located through a per-file packet index (built once, cached on disk): each group of pictures holding
a wanted frame is decoded once from its keyframe, so the cost of a clip depends on the clip, not on the length of
the video. ``timestamps`` pick the frame shown at each time, exactly, also in variable-frame-rate files.
``device="cpu"`` decodes with PyAV (FFmpeg); ``device="mixed"`` decodes each batch with NVDEC (PyNvVideoCodec) and
the CPU at once (``sluice.backends.video.hybrid``: the batch's groups of pictures are shared between NVDEC sessions
and PyAV workers as fast as each takes them, CPU frames converted with NVDEC's colour matrix and copied to the
GPU), the frames ending on the GPU (:data:`HYBRID` = False: on NVDEC alone). The PyAV workers decode files in
worker processes of their own (no GIL shared with the NVDEC threads; ``sluice.backends.video.hybrid.CPU_PROCESSES``
= False: in threads); encoded bytes held in memory are decoded in threads.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from sluice.backends.video import PAD_MODES, Clip, ClipRequest, PyAVBackend, get_index, prepare_clip, read_clips
from sluice.backends.video.hybrid import HybridBackend
from sluice.backends.video.nvdec import NvdecBackend
from sluice.backends.video.pyav import default_threads
from sluice.errors import SampleError
from sluice.pipeline.batch import Batch
from sluice.runtime import Runtime, runtime_of
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema, Operator


def _num_outputs(args: dict[str, Any]) -> int:
    return 1 + int(bool(args.get("enable_timestamps"))) + int(bool(args.get("enable_frame_num")))


def _layouts(args: dict[str, Any], _inputs) -> list[str]:
    return ["FHWC"] + [""] * (_num_outputs(args) - 1)


SCHEMA = OpSchema(
    "decoders.video",
    doc="""Decodes chosen frames of encoded videos into FHWC uint8 RGB sequences.

    Choose frames with ``frames`` (any order, repeats allowed), with ``timestamps`` in seconds (the frame shown at
    that time, exact on variable-frame-rate files), or with ``start_frame`` / ``end_frame`` (exclusive) /
    ``stride`` / ``sequence_length``; by default every frame. Frames past the end are an error unless
    ``pad_mode`` pads them. Optional outputs: each frame's timestamp in seconds (float64, -1 for constant padding)
    and its frame number (int64, -1 for constant padding).

    Example::

        data, _ = fn.readers.file(file_root=root, file_filters=["*.mp4"])
        clips = fn.decoders.video(data, device="mixed", frames=[0, 10, 20, 30])
        clips, ts = fn.decoders.video(data, timestamps=[0.5, 1.0], enable_timestamps=True)
    """,
    inputs=1,
    outputs=_num_outputs,
    devices=("cpu", "mixed"),
    requires={"cpu": ("av",), "mixed": ("av", "PyNvVideoCodec")},
    output_layout=_layouts,
    args=[
        Arg("frames", "int_list", None, "Frame numbers to decode, in output order (repeats allowed).",
            per_sample=True),
        Arg("timestamps", "float_list", None, "Times in seconds; each gives the frame shown at that time.",
            per_sample=True),
        Arg("start_frame", int, 0, "First frame (when neither frames nor timestamps are given).", per_sample=True),
        Arg("end_frame", int, None, "Frame to stop before; default: the end of the video.", per_sample=True),
        Arg("stride", int, 1, "Distance between consecutive frames.", per_sample=True),
        Arg("sequence_length", int, None, "Number of frames from start_frame (instead of end_frame).",
            per_sample=True),
        Arg("pad_mode", str, "none", "How frames past the end are filled: 'none' (error), 'constant' "
            "(fill_value), 'edge' (last frame), 'reflect_1001' (mirror, edge repeated), 'reflect_101' (mirror).",
            choices=PAD_MODES),
        Arg("fill_value", "int_list", [0], "Pixel value (one, or R, G, B) of constant padding frames."),
        Arg("enable_timestamps", bool, False, "Also output each frame's timestamp in seconds."),
        Arg("enable_frame_num", bool, False, "Also output each frame's number."),
    ],
)

_REQUEST = ("frames", "timestamps", "start_frame", "end_frame", "stride", "sequence_length")


def check_request(args: dict[str, Any]) -> None:
    """Reject combinations DALI rejects: frames or timestamps with a range, frames with timestamps."""
    chosen = [k for k in ("frames", "timestamps") if args.get(k) is not None]
    if len(chosen) > 1:
        raise ValueError("give only one of frames and timestamps")
    ranged = [k for k in ("end_frame", "sequence_length") if args.get(k) is not None]
    if chosen and (ranged or args.get("start_frame") or (args.get("stride") or 1) != 1):
        raise ValueError(f"{chosen[0]} cannot be combined with start_frame, end_frame, stride or "
                         "sequence_length")
    if len(ranged) > 1:
        raise ValueError("give only one of end_frame and sequence_length")


def clip_outputs(clip: Clip, args: dict[str, Any], device: torch.device | str) -> tuple[torch.Tensor, ...]:
    """The operator's outputs for one sample: frames, then timestamps and frame numbers when enabled."""
    out = [clip.frames]
    if args.get("enable_timestamps"):
        out.append(torch.as_tensor(clip.timestamps, dtype=torch.float64).to(device))
    if args.get("enable_frame_num"):
        out.append(torch.as_tensor(clip.frame_numbers, dtype=torch.int64).to(device))
    return tuple(out)


def sample_request(data: torch.Tensor, name: str, args: dict[str, Any]) -> ClipRequest:
    """Resolve one sample's request (checked, padding applied) without decoding."""
    check_request(args)
    if data.numel() == 0:
        raise ValueError(f"{name or 'the sample'} is empty (0 bytes): not a video")
    request = {k: args.get(k) for k in _REQUEST}
    request["stride"] = request["stride"] or 1
    request["start_frame"] = request["start_frame"] or 0
    index = _file_index(name, data.numel())
    # bytes read from a file (the reader's source info names it, same size and cached by mtime): decode from the
    # file, whose container stays open between samples, instead of re-parsing the bytes
    source = name if index is not None else data.contiguous().numpy()
    return prepare_clip(source, pad_mode=args["pad_mode"], fill_value=args["fill_value"], name=name or None,
                        index=index, **request)


def decode_sample(data: torch.Tensor, name: str, args: dict[str, Any], backend) -> Clip:
    """Decode one sample's encoded bytes as the arguments ask."""
    return read_clips([sample_request(data, name, args)], backend)[0]


def _file_index(name: str, size: int):
    """When the bytes came from a file (the reader's source info) of the same size, its path-keyed index: no need
    to hash the whole content to find the cached index."""
    try:
        if name and os.path.isfile(name) and os.path.getsize(name) == size:
            return get_index(name)
    except OSError:
        pass
    return None


_CPU_BACKEND = PyAVBackend(threads=default_threads())


@SCHEMA.sample_kernel("cpu")
def video_cpu(ctx, data: torch.Tensor, **args) -> tuple[torch.Tensor, ...]:
    """PyAV decode of one sample (the pipeline's threads decode several samples at once)."""
    return clip_outputs(decode_sample(data, ctx.source_info, args, _CPU_BACKEND), args, "cpu")


#: Whether the GPU video operators share each batch between NVDEC and PyAV workers (False: NVDEC alone).
HYBRID = True


def nvdec_backend(runtime: Runtime, device_id: int) -> NvdecBackend:
    """The pipeline's NVDEC backend of GPU ``device_id``: a session of its runtime, whose decoder sessions the
    pipeline's GPU video operators share (another pipeline has its own), closed with the pipeline."""
    return runtime.session(("nvdec", device_id), lambda: NvdecBackend(device_id=device_id, runtime=runtime))


def gpu_backend(runtime: Runtime, device_id: int):
    """The backend of the pipeline's GPU video operators: NVDEC and the CPU sharing each batch (the hybrid backend,
    on :func:`nvdec_backend`'s sessions), or NVDEC alone where :data:`HYBRID` is False; a session of the pipeline's
    runtime (one per pipeline and GPU, shared by its operators, closed with it)."""
    nvdec = nvdec_backend(runtime, device_id)
    if not HYBRID:
        return nvdec
    return runtime.session(("video hybrid", device_id),
                           lambda: HybridBackend(device_id=device_id, nvdec=nvdec, runtime=runtime))


def decode_samples(data: Batch, sources: list[str], args: BatchArgs, backend, pool) -> list[Clip]:
    """Decode a batch's samples in one call to the backend (the hybrid backend shares out all their groups of
    pictures at once); an error names its sample."""
    def request(i: int) -> ClipRequest:
        try:
            return sample_request(data[i].cpu(), sources[i], args.sample(i))
        except Exception as e:  # noqa: BLE001 - re-raised naming the sample
            raise SampleError(i, sources[i], e) from e

    n = len(data)
    requests = list(pool.map(request, range(n))) if pool is not None and n > 1 else [request(i) for i in range(n)]
    try:
        return read_clips(requests, backend)
    except Exception as e:  # noqa: BLE001 - re-raised naming the sample
        i = getattr(e, "request_index", 0)
        raise SampleError(i, sources[i], e) from e


@SCHEMA.operator_class("mixed")
class VideoMixed(Operator):
    """The mixed decoder (:func:`video_mixed`). Its backend gets ready when the pipeline is built, as
    ``readers.video``'s does (its CPU worker processes start; the file is not known yet): the first batch's CPU
    jobs would otherwise wait for them."""

    def __init__(self, spec) -> None:
        super().__init__(spec)
        self.backend = gpu_backend(runtime_of(spec), spec.device_id or 0)
        if hasattr(self.backend, "get_ready"):
            self.backend.get_ready()

    def run(self, ctx: BatchContext, data: Batch, *, args: BatchArgs) -> tuple[Batch, ...]:
        return video_mixed(ctx, data, args=args, backend=self.backend)


def video_mixed(ctx: BatchContext, data: Batch, *, args: BatchArgs, backend) -> tuple[Batch, ...]:
    """NVDEC and the CPU decode the batch together on ``backend`` (:func:`gpu_backend`; see
    ``sluice.backends.video.hybrid``); frames end on the GPU."""
    device = ctx.device
    sources = ctx.source_info or [""] * len(data)
    n_out = _num_outputs({k: args.const(k) for k in ("enable_timestamps", "enable_frame_num")})
    if not len(data):
        return tuple(Batch([]) for _ in range(n_out))
    with torch.cuda.device(device):
        clips = decode_samples(data, sources, args, backend, ctx.thread_pool)
        results = [clip_outputs(clip, args.sample(i), device) for i, clip in enumerate(clips)]
    torch.cuda.current_stream(device).wait_stream(torch.cuda.default_stream(device))
    return tuple(Batch(list(col), "FHWC" if k == 0 else "", sources) for k, col in enumerate(zip(*results)))
