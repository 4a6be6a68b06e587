"""``fn.experimental.inputs.video``: encoded videos given by ``pipe.feed_input`` streamed out as batches of
consecutive sequences, DALI's operator of that name, on sluice's video decoding (:mod:`sluice.ops.decoders.video`'s
backends: PyAV on ``cpu``, NVDEC with the CPU helping on ``mixed``).

Each ``feed_input(name, [video])`` queues one encoded video (bytes or a uint8 array; one per call, DALI's input batch
size 1). Every iteration returns up to ``batch_size`` sequences of ``sequence_length`` consecutive frames of the
video at the front of the queue, continuing where the previous iteration stopped; the last batch of a video may
hold fewer sequences, and its last sequence fewer frames (``last_sequence_policy="partial"``) or padded with black
frames (``"pad"``). The next iteration starts the next queued video. Running with nothing queued is an error naming
the operator. Decoding reads each group of pictures once per batch, so streaming a long video costs its length.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import torch

from sluice.backends.video import PyAVBackend, get_index, prepare_clip, read_clips
from sluice.backends.video.pyav import default_threads
from sluice.errors import ArgumentError
from sluice.pipeline.batch import Batch, to_tensor
from sluice.runtime import runtime_of
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, Operator, OpSchema, OpSpec
from sluice.ops.decoders.video import gpu_backend

__all__ = ["SCHEMA", "sequence_plan"]

SCHEMA = OpSchema(
    "experimental.inputs.video",
    doc="""Streams and decodes videos given by ``Pipeline.feed_input``: batches of consecutive sequences of
    ``sequence_length`` frames (FHWC uint8 RGB), video after video.

    Feed one encoded video per ``feed_input`` call; the operator keeps a queue. The last sequence of a video is
    shorter (``last_sequence_policy="partial"``) or padded with black frames (``"pad"``). Example::

        @pipeline_def(batch_size=4, num_threads=2, device_id=0)
        def pipe():
            return fn.experimental.inputs.video(name="video", sequence_length=16, device="mixed")

        p = pipe()
        p.feed_input("video", [np.fromfile("long.mp4", np.uint8)])
        clips, = p.run()
    """,
    inputs=0,
    outputs=1,
    devices=("cpu", "mixed"),
    requires={"cpu": ("av",), "mixed": ("av", "PyNvVideoCodec")},
    stateful=True,
    output_layout="FHWC",
    args=[
        Arg("sequence_length", int, REQUIRED, "Frames per sequence.", min=1),
        Arg("last_sequence_policy", str, "partial", "The last sequence of a video: 'partial' (fewer frames) or "
            "'pad' (black frames added).", choices=("partial", "pad")),
        Arg("affine", bool, True, "Accepted for DALI compatibility (decoding threads are the pipeline's)."),
        Arg("blocking", bool, False, "Accepted for DALI compatibility: running with no video queued raises."),
        Arg("no_copy", bool, False, "Accepted for DALI compatibility: fed data is not copied where it can be "
            "shared."),
    ],
)


def sequence_plan(position: int, num_frames: int, length: int, batch_size: int,
                  pad: bool) -> tuple[list[np.ndarray], int]:
    """The frame numbers of the sequences of one batch starting at frame ``position`` of a video of ``num_frames``
    (``-1``-free; with ``pad`` the last sequence asks for frames past the end, which decode as black), and the next
    position."""
    seqs = []
    while len(seqs) < batch_size and position < num_frames:
        stop = position + length
        frames = np.arange(position, stop if pad else min(stop, num_frames), dtype=np.int64)
        seqs.append(frames)
        position = stop
    return seqs, position


class _InputsVideo(Operator):
    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        self.queue: collections.deque = collections.deque()
        self.current: tuple[np.ndarray, Any] | None = None
        self.position = 0
        self.name = f"fn.experimental.inputs.video '{spec.name}'"

    def feed(self, data: Any, layout: str | None = None) -> None:
        """Queue one encoded video (a one-sample batch: ``[bytes]``, ``[array]``, or the array itself)."""
        samples = list(data) if isinstance(data, (list, tuple)) else [data]
        if len(samples) != 1:
            raise ArgumentError(f"{self.name}: feed_input takes one video at a time (input batch size 1), got "
                                f"{len(samples)}; call feed_input once per video")
        video = to_tensor(samples[0]).cpu().reshape(-1)
        if video.dtype != torch.uint8 or not video.numel():
            raise ArgumentError(f"{self.name}: a video is its encoded bytes (uint8, not empty), got {video.dtype} "
                                f"of {video.numel()} elements")
        self.queue.append(video.numpy())

    def backend(self):
        raise NotImplementedError

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
        if self.current is None:
            if not self.queue:
                raise RuntimeError(f"{self.name}: no video to decode; give one with pipe.feed_input("
                                   f"'{self.spec.name}', [encoded_video]) before run()")
            data = self.queue.popleft()
            self.current, self.position = (data, get_index(data, name=self.spec.name)), 0
        data, index = self.current
        length = int(self.spec.args["sequence_length"])
        pad = self.spec.args["last_sequence_policy"] == "pad"
        seqs, self.position = sequence_plan(self.position, index.num_frames, length, self.spec.batch_size, pad)
        if self.position >= index.num_frames:
            self.current = None
        requests = [prepare_clip(data, frames=s, pad_mode="constant", index=index, name=self.spec.name)
                    for s in seqs]
        clips = read_clips(requests, self.backend())
        return self.finish([c.frames for c in clips], ctx)

    def finish(self, frames: list[torch.Tensor], ctx: BatchContext) -> Batch:
        return Batch(frames, "FHWC")

    def state_dict(self) -> dict[str, Any]:
        return {"queue": list(self.queue), "current": None if self.current is None else self.current[0],
                "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.queue = collections.deque(state["queue"])
        data = state["current"]
        self.current = None if data is None else (data, get_index(data, name=self.spec.name))
        self.position = state["position"]


_CPU_BACKEND = PyAVBackend(threads=default_threads())


@SCHEMA.operator_class("cpu")
class InputsVideoCPU(_InputsVideo):
    """PyAV decodes the batch's sequences."""

    def backend(self):
        return _CPU_BACKEND


@SCHEMA.operator_class("mixed")
class InputsVideoMixed(_InputsVideo):
    """NVDEC and the CPU decode the batch's groups of pictures together; frames end on the GPU."""

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        self._backend = gpu_backend(runtime_of(spec), spec.device_id or 0)

    def backend(self):
        return self._backend

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
        with torch.cuda.device(ctx.device):
            return super().run(ctx, *inputs, args=args)

    def finish(self, frames: list[torch.Tensor], ctx: BatchContext) -> Batch:
        out = Batch([f.to(ctx.device) for f in frames], "FHWC")
        torch.cuda.current_stream(ctx.device).wait_stream(torch.cuda.default_stream(ctx.device))
        return out
