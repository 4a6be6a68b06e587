"""``fn.readers.sequence``: folders of frame images read as videos (DALI's SequenceReader).

``file_root`` holds one sub-folder per stream; a stream's frames are its image files in lexicographic order.
Sequences of ``sequence_length`` frames ``stride`` apart start every ``step`` frames, and are the reader's samples
(sharded, shuffled and padded like every reader's). Frames are decoded with sluice's CPU image decoders
(libjpeg-turbo / OpenCV / Pillow) in the pipeline's threads; all frames of a sequence must have the same size.
"""

from __future__ import annotations

import fnmatch
import os

import numpy as np
import torch

from sluice.backends.image import cpu as image_cpu
from sluice.errors import ArgumentError, SampleError
from sluice.ops.readers.file import DEFAULT_FILTERS, READER_ARGS, ReaderBase, read_file
from sluice.pipeline.batch import Batch
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema, OpSpec

IMAGE_FILTERS = [p for p in DEFAULT_FILTERS if p not in ("*.flac", "*.ogg", "*.wav", "*.mp3", "*.opus")]

SCHEMA = OpSchema(
    "readers.sequence",
    doc="""Reads sequences of frames from folders of images, one folder per stream, as FHWC uint8 RGB.

    Example::

        frames = fn.readers.sequence(file_root="/data/streams", sequence_length=8, step=4, stride=2)
    """,
    inputs=0,
    outputs=1,
    devices=("cpu",),
    requires={"cpu": ("simplejpeg", "cv2", "PIL")},
    stateful=True,
    output_layout="FHWC",
    args=[
        Arg("file_root", str, REQUIRED, "Folder holding one sub-folder of frame images per stream."),
        Arg("sequence_length", int, REQUIRED, "Frames per sequence.", min=1),
        Arg("step", int, 1, "Frames between the starts of consecutive sequences.", min=1),
        Arg("stride", int, 1, "Frames between consecutive frames of a sequence.", min=1),
        Arg("image_type", str, "RGB", "Output colour format.", choices=("RGB", "BGR", "GRAY")),
        Arg("file_filters", "str_list", IMAGE_FILTERS, "Glob patterns of the frame files."),
        *READER_ARGS,
    ],
)


def list_streams(op: str, root: str, patterns: list[str]) -> list[list[str]]:
    """The frame files of each stream folder of ``root`` (folders and files in lexicographic order)."""
    if not os.path.isdir(root):
        raise ArgumentError(f"{op}: file_root '{root}' does not exist or is not a folder")
    streams = []
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if not os.path.isdir(folder):
            continue
        frames = sorted(f for f in os.listdir(folder)
                        if any(fnmatch.fnmatch(f.lower(), p.lower()) for p in patterns))
        if frames:
            streams.append([os.path.join(folder, f) for f in frames])
    return streams


@SCHEMA.operator_class("cpu")
class SequenceReader(ReaderBase):
    op_name = "fn.readers.sequence"

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        a = spec.args
        self.length, self.step, self.stride = int(a["sequence_length"]), int(a["step"]), int(a["stride"])
        if self.length < 1 or self.step < 1 or self.stride < 1:
            raise ArgumentError(f"{self.op_name}: sequence_length, step and stride must be >= 1, got "
                                f"{self.length}, {self.step}, {self.stride}")
        self.streams = list_streams(self.op_name, a["file_root"], a["file_filters"] or ["*"])
        span = (self.length - 1) * self.stride
        self.samples = [(s, start) for s, frames in enumerate(self.streams)
                        for start in range(0, len(frames) - span, self.step)]
        if not self.samples:
            raise ArgumentError(f"{self.op_name}: no stream folder in '{a['file_root']}' has {span + 1} frames for "
                                f"a sequence of {self.length} frames with stride {self.stride}")
        self.setup_order(len(self.samples))

    def load(self, sample: int) -> torch.Tensor:
        stream, start = self.samples[sample]
        paths = self.streams[stream][start:start + (self.length - 1) * self.stride + 1:self.stride]
        frames = []
        for path in paths:
            data = read_file(path)
            if data.numel() == 0:
                raise ValueError(f"frame file '{path}' is empty (0 bytes)")
            img = image_cpu.decode(data.numpy(), output_type=self.spec.args["image_type"], source=path)
            if frames and img.shape != frames[0].shape:
                raise ValueError(f"frame '{path}' is {img.shape[1]}x{img.shape[0]} but the sequence's first frame "
                                 f"'{paths[0]}' is {frames[0].shape[1]}x{frames[0].shape[0]}: all frames of a "
                                 f"stream must have one size")
            frames.append(img)
        return torch.from_numpy(np.stack(frames))

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
        picks = [i for i, _ in self.next_samples(ctx)]
        names = [os.path.dirname(self.streams[self.samples[i][0]][0]) for i in picks]

        def one(k: int) -> torch.Tensor:
            try:
                return self.load(picks[k])
            except Exception as e:  # noqa: BLE001 - re-raised naming the sample and its stream
                raise SampleError(k, names[k], e) from e

        pool = ctx.thread_pool
        data = list(pool.map(one, range(len(picks)))) if pool is not None and len(picks) > 1 else \
            [one(k) for k in range(len(picks))]
        return Batch(data, "FHWC", names)
