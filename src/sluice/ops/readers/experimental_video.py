"""``fn.experimental.readers.video``: DALI 2.4's newer video reader, on sluice's video reader machinery
(:mod:`sluice.ops.readers.video`: the per-file packet index, the hybrid PyAV / NVDEC decoding of each batch's groups
of pictures, the reader's sharding and shuffling), with that operator's arguments and outputs:

* outputs ``video`` (FHWC), ``labels`` only when labels are known (``labels`` with ``filenames``, or ``file_list``,
  or ``file_root``), ``frame_num`` when ``enable_frame_num`` is ``"scalar"`` / ``True`` (the first frame's number,
  ``(1,)``) or ``"sequence"`` (every frame's number, ``(F,)``, -1 for constant padding), ``timestamps`` with
  ``enable_timestamps``;
* ``step`` defaults to ``stride * sequence_length`` (consecutive sequences do not overlap), and a sequence must fit
  in its file's frames (``start + stride * sequence_length <= end``) unless ``pad_mode`` pads it: then sequences
  start at every ``step`` before the end, and frames past it are ``constant`` (``fill_value``), ``edge`` /
  ``repeat``, ``reflect_1001`` / ``symmetric`` or ``reflect_101`` / ``reflect`` (mirrored at the range's end);
* ``uniform_sample``: one sequence per file, of frames ``floor(linspace(start, end - 1, sequence_length) + 0.5)``;
* ``file_list`` lines ``path label [start [end]]``: seconds (``file_list_format="timestamps"``) rounded to frames by
  ``file_list_rounding`` (``start_down_end_up``: the start's frame is the one shown at ``start``, the end's the
  first shown at or after ``end``; ``start_up_end_down``, ``all_up``, ``all_down``), or frame numbers
  (``"frames"``, negative from the end); ``file_list_include_end`` makes ``end`` inclusive. A missing or 0 end is
  the end of the file.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from sluice import types
from sluice.backends.video import ClipRequest, prepare_clip
from sluice.errors import ArgumentError
from sluice.ops.readers.file import READER_ARGS
from sluice.ops.readers.video import VIDEO_ARGS, VideoReader, VideoReaderGPU
from sluice.runtime import runtime_of
from sluice.schema import REQUIRED, Arg, OpSchema, OpSpec

__all__ = ["SCHEMA", "frame_num_policy", "range_of_entry", "padded_frames", "uniform_frames"]

_FRAME_NUM = {"none": "none", "false": "none", "scalar": "scalar", "true": "scalar", "sequence": "sequence"}
_PAD = {"none": "none", "constant": "constant", "edge": "edge", "repeat": "edge", "reflect_1001": "reflect_1001",
        "symmetric": "reflect_1001", "reflect_101": "reflect_101", "reflect": "reflect_101"}
_ROUNDING = ("start_down_end_up", "start_up_end_down", "all_up", "all_down")


def frame_num_policy(value: Any) -> str:
    """``"none"``, ``"scalar"`` or ``"sequence"`` from DALI's ``enable_frame_num`` (a string or a bool)."""
    key = str(value).lower()
    if key not in _FRAME_NUM:
        raise ArgumentError(f"fn.experimental.readers.video: invalid enable_frame_num ({value!r}). Supported values "
                            "are 'none' (or False), 'scalar' (or True), 'sequence'.")
    return _FRAME_NUM[key]


def _has_labels(args: dict[str, Any]) -> bool:
    return args.get("labels") is not None or bool(args.get("file_list")) or bool(args.get("file_root"))


def _num_outputs(args: dict[str, Any]) -> int:
    return (1 + _has_labels(args) + (frame_num_policy(args.get("enable_frame_num", "none")) != "none")
            + bool(args.get("enable_timestamps")))


def _layouts(args: dict[str, Any], _inputs) -> list[str]:
    return ["FHWC"] + [""] * (_num_outputs(args) - 1)


_OWN = [
    Arg("filenames", "str_list", None, "Video files to read."),
    Arg("labels", "int_list", None, "Labels of `filenames`; without them (and without file_list / file_root) no "
        "labels are output."),
    Arg("file_root", str, None, "Folder of class sub-folders of videos."),
    Arg("file_list", str, None, "Text file with lines 'path label [start [end]]'."),
    Arg("file_list_format", str, "timestamps", "Whether file_list start/end are 'timestamps' (seconds) or "
        "'frames'.", choices=("timestamps", "frames")),
    Arg("file_list_rounding", str, "start_down_end_up", "How file_list times round to frames: "
        "'start_down_end_up', 'start_up_end_down', 'all_up', 'all_down'.", choices=_ROUNDING),
    Arg("file_list_include_end", bool, True, "The file_list end is inclusive."),
    Arg("sequence_length", int, REQUIRED, "Frames per sequence.", min=1),
    Arg("step", int, -1, "Frames between the starts of consecutive sequences; <= 0: stride * sequence_length."),
    Arg("stride", int, 1, "Frames between consecutive frames of a sequence.", min=1),
    Arg("uniform_sample", bool, False, "One sequence per file, sampled uniformly over its frames (stride, step and "
        "pad_mode are ignored)."),
    Arg("pad_mode", str, "none", "Frames past the end: 'none' (only whole sequences), 'constant', 'edge' / "
        "'repeat', 'reflect_1001' / 'symmetric', 'reflect_101' / 'reflect'.", choices=tuple(_PAD)),
    Arg("fill_value", "int_list", [0], "Pixel value (one, or R, G, B) of constant padding frames."),
    Arg("enable_frame_num", object, "none", "'none' / False, 'scalar' / True (the first frame's number) or "
        "'sequence' (every frame's number, -1 for constant padding)."),
    Arg("enable_timestamps", bool, False, "Also output every frame's timestamp in seconds (-1 for constant "
        "padding)."),
    Arg("image_type", types.DALIImageType, types.RGB, "Colour space of the frames: RGB."),
    Arg("dtype", types.DALIDataType, types.UINT8, "Output type of the frames: UINT8 or FLOAT.",
        choices=(types.UINT8, types.FLOAT)),
    Arg("normalized", bool, False, "With dtype=FLOAT, scale the frames to [0, 1]."),
    Arg("channels", int, 3, "Number of channels (3); accepted for DALI compatibility."),
    Arg("additional_decode_surfaces", int, 2, "Accepted for DALI compatibility."),
    Arg("require_constant_frame_rate", bool, False, "Raise for a file of variable frame rate (frames are read by "
        "their presentation times either way)."),
    Arg("skip_unreadable_files", bool, False, "Leave unreadable files out of the epoch instead of raising (not in "
        "DALI)."),
]

SCHEMA = OpSchema(
    "experimental.readers.video",
    doc="""Loads and decodes sequences of frames from video files (DALI's experimental video reader).

    Outputs: video (FHWC), then labels (INT32 [1], when known), frame numbers (INT32; ``enable_frame_num``) and
    timestamps (FLOAT32 [F]; ``enable_timestamps``). See the module notes for ``step``, ``pad_mode``,
    ``uniform_sample`` and ``file_list``. Example::

        video, label = fn.experimental.readers.video(file_root=root, sequence_length=16, device="gpu")
        clip = fn.experimental.readers.video(filenames=files, sequence_length=8, uniform_sample=True)
    """,
    inputs=0,
    outputs=_num_outputs,
    devices=("cpu", "gpu"),
    requires={"cpu": ("av",), "gpu": ("av", "PyNvVideoCodec")},
    stateful=True,
    output_layout=_layouts,
    args=_OWN + list(READER_ARGS),
)

_OWN_NAMES = {a.name for a in _OWN}


def _base_spec(spec: OpSpec) -> OpSpec:
    """The spec as ``readers.video`` takes it: its own arguments' defaults where this operator has none."""
    args = {a.name: a.default for a in VIDEO_ARGS if a.name not in _OWN_NAMES}
    args.update(spec.args)
    args["enable_frame_num"] = frame_num_policy(spec.args.get("enable_frame_num", "none")) != "none"
    args["file_list_format"] = spec.args.get("file_list_format") or "timestamps"
    return OpSpec(spec.schema, spec.device, args, spec.name, spec.batch_size, spec.num_threads, spec.device_id,
                  spec.seed, spec.pipeline, runtime_of(spec))


def _round_time(times: np.ndarray, t: float, up: bool) -> int:
    """The frame shown at ``t`` (``up=False``: the last starting at or before it) or the first starting at or after
    it (``up``)."""
    if up:
        return int(np.searchsorted(times, t - 1e-9, side="left"))
    return max(int(np.searchsorted(times, t + 1e-9, side="right")) - 1, 0)


def range_of_entry(idx, start: float | None, end: float | None, as_frames: bool, rounding: str,
                   include_end: bool) -> tuple[int, int]:
    """``[first, stop)`` frames of a file_list entry under DALI's experimental reader's rules."""
    n = idx.num_frames
    if as_frames:
        first = 0 if start is None else int(math.floor(start))
        first = n + first if first < 0 else first
        if not end:
            return max(first, 0), n
        last = int(math.floor(end))
        last = n + last if last < 0 else last
    else:
        times = idx.times
        start_up = rounding in ("start_up_end_down", "all_up")
        end_up = rounding in ("start_down_end_up", "all_up")
        first = 0 if start is None else _round_time(times, start, start_up)
        if not end:
            return max(first, 0), n
        t_end = end if end > 0 else idx.end_time + end
        last = _round_time(times, t_end, end_up)
    stop = last + 1 if include_end else last
    return max(first, 0), min(stop, n)


def padded_frames(wanted: np.ndarray, first: int, stop: int, pad_mode: str) -> np.ndarray:
    """Frame numbers of ``wanted`` with those at or past ``stop`` padded within ``[first, stop)`` by ``pad_mode``;
    ``-1`` for constant padding."""
    n = stop - first
    rel = np.asarray(wanted, np.int64) - first
    over = rel >= n
    if not over.any():
        return np.asarray(wanted, np.int64)
    if pad_mode == "constant":
        out = np.where(over, -1 - first, rel)
    elif pad_mode == "edge":
        out = np.minimum(rel, n - 1)
    elif pad_mode == "reflect_1001":
        m = rel % (2 * n)
        out = np.where(m < n, m, 2 * n - 1 - m)
    else:  # reflect_101
        period = max(2 * n - 2, 1)
        m = rel % period
        out = np.where(m < n, m, period - m)
    return out + first


def uniform_frames(first: int, stop: int, length: int) -> np.ndarray:
    """``floor(linspace(first, stop - 1, length) + 0.5)``: DALI's uniform sample (halves away from zero)."""
    return np.floor(np.linspace(first, stop - 1, length) + 0.5).astype(np.int64)


class ExperimentalVideoReader(VideoReader):
    """readers.video with DALI's experimental reader's sampling, padding, file-list and output rules."""

    op_name = "fn.experimental.readers.video"

    def __init__(self, spec: OpSpec):
        a = spec.args
        self.own_args = dict(a)
        self.frame_num = frame_num_policy(a.get("enable_frame_num", "none"))
        self.pad_mode = _PAD[a.get("pad_mode") or "none"]
        self.uniform = bool(a.get("uniform_sample"))
        self.has_labels = _has_labels(a)
        if a.get("image_type") not in (None, types.RGB):
            raise ArgumentError(f"{self.op_name}: image_type {a['image_type']} is not supported; frames are RGB")
        if a.get("channels", 3) != 3:
            raise ArgumentError(f"{self.op_name}: channels must be 3 (the decoded frames' channels)")
        if a.get("dtype") == types.FLOAT and self.pad_mode == "constant":
            raise ArgumentError(f"{self.op_name}: pad_mode='constant' cannot be combined with dtype=FLOAT (as in "
                                "DALI)")
        self.ranges: dict[int, tuple[int, int]] = {}
        super().__init__(_base_spec(spec))
        if self.own_args.get("require_constant_frame_rate"):
            for path, idx in zip(self.paths, self.indexes):
                if len(idx.times) > 2 and np.ptp(np.diff(idx.times)) > 1e-6 * max(1.0, idx.end_time):
                    raise ArgumentError(f"{self.op_name}: '{path}' has a variable frame rate "
                                        "(require_constant_frame_rate=True)")

    def sequence_starts(self, f: int, idx, entry) -> list[int]:
        a = self.own_args
        first, stop = range_of_entry(idx, entry[2], entry[3], a.get("file_list_format") == "frames",
                                     a.get("file_list_rounding") or "start_down_end_up",
                                     bool(a.get("file_list_include_end", True)))
        self.ranges[f] = (first, stop)
        if stop <= first:
            return []
        if self.uniform:
            return [first]
        step = int(a.get("step") or -1)
        step = step if step > 0 else self.stride * self.length
        if self.pad_mode == "none":
            return list(range(first, stop - self.stride * self.length + 1, step))
        return list(range(first, stop, step))

    def request(self, sample: int) -> ClipRequest:
        f, start = self.samples[sample]
        first, stop = self.ranges[f]
        if self.uniform:
            wanted = uniform_frames(first, stop, self.length)
        else:
            wanted = padded_frames(start + self.stride * np.arange(self.length), first, stop, self.pad_mode)
        idx = self.indexes[f]
        frames = np.where(wanted < 0, idx.num_frames, wanted)  # past the end: the backend's constant fill
        return prepare_clip(self.paths[f], frames=frames, pad_mode="constant", index=idx,
                            fill_value=self.own_args.get("fill_value") or [0])

    def outputs(self, sample: int, clip) -> tuple[torch.Tensor, ...]:
        frames, label, *rest = super().outputs(sample, clip)
        dev = frames.device
        out = [frames] + ([label] if self.has_labels else [])
        if self.frame_num != "none":
            rest = rest[1:]  # the base's first-frame number
            numbers = torch.as_tensor(clip.frame_numbers, dtype=torch.int32)
            out.append((numbers[:1] if self.frame_num == "scalar" else numbers).to(dev))
        out.extend(rest)
        return tuple(out)

    def run(self, ctx, *inputs, args):
        outs = super().run(ctx, *inputs, args=args)
        return tuple(b.with_layout(lay) for b, lay in zip(outs, _layouts(self.own_args, [])))


@SCHEMA.operator_class("cpu")
class ExperimentalVideoReaderCPU(ExperimentalVideoReader):
    pass


@SCHEMA.operator_class("gpu")
class ExperimentalVideoReaderGPU(ExperimentalVideoReader, VideoReaderGPU):
    """NVDEC (with the CPU helping, as readers.video's GPU operator); outputs on the GPU."""
