"""``fn.readers.video``: sequences of frames read from video files, with labels (DALI's VideoReader).

Every file is indexed once (packet index, cached on disk); its frames are cut into sequences of
``sequence_length`` frames ``stride`` apart, a new sequence starting every ``step`` frames (by default every
``stride * sequence_length``, as DALI's reader does: sequences that do not overlap). Sequences are the
reader's samples: sharded, shuffled and padded as by every reader (``readers/_sharding.py``). Decoding goes through
the same backends as ``fn.decoders.video`` (PyAV on ``cpu``, NVDEC on ``gpu``), so only the groups of pictures a
sequence touches are decoded. Optional outputs: the first frame's number, every frame's timestamp, and the audio
of exactly the sequence's time window.

``file_list`` lines are ``path label [start [end]]``: start and end (exclusive) are seconds counted from the
video's first frame (a stream's clock may start anywhere: an MPEG-TS file's at its recorder's), or frame numbers
with ``file_list_format='frames'`` (DALI's ``file_list_frame_num=True``); a missing or 0 end means the end of the
file, a negative start or end counts from it. Timestamps (``enable_timestamps``) count from the first frame too, as
DALI's reader gives them (``(pts - start_time) * time_base``).

A file that cannot be read (missing, a directory, a symlink loop, empty, not a container, truncated, or declaring
more frames than it holds) is a ``PipelineError`` at ``build()`` naming the file and why: the reader never leaves a
file out of the epoch unless ``skip_unreadable_files=True`` asks it to (it then logs how many, and which).
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import numpy as np
import torch

from sluice.backends.video import (Clip, ClipRequest, PendingClips, VideoError, get_index, prepare_clip,
                                   read_audio_window, read_clips)
from sluice.backends.video.pyav import PyAVBackend
from sluice import types
from sluice.errors import ArgumentError, PipelineError, SampleError
from sluice.ops.readers.file import READER_ARGS, ReaderBase, list_files
from sluice.pipeline.batch import Batch
from sluice.runtime import runtime_of
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema, OpSpec
from sluice.ops.decoders.video import gpu_backend
from sluice.backends.video.hybrid import HybridBackend

logger = logging.getLogger(__name__)

VIDEO_FILTERS = ["*.mp4", "*.mov", "*.mkv", "*.webm", "*.avi", "*.m4v"]


def _num_outputs(args: dict[str, Any]) -> int:
    return 2 + sum(bool(args.get(k)) for k in ("enable_frame_num", "enable_timestamps", "enable_audio"))


def _layouts(args: dict[str, Any], _inputs) -> list[str]:
    return ["FHWC"] + [""] * (_num_outputs(args) - 1)


VIDEO_ARGS = [
    Arg("filenames", "str_list", None, "Video files to read."),
    Arg("labels", "int_list", None, "Labels of `filenames`; default 0, 1, 2, ..."),
    Arg("file_root", str, None, "Folder of class sub-folders of videos (or the root of file_list/filenames)."),
    Arg("file_list", str, None, "Text file with lines 'path label [start [end]]'; relative paths are relative to "
        "file_root, or to the working directory (as DALI opens them), not to the list's folder."),
    Arg("file_list_format", str, "timestamps", "Whether file_list start/end are 'timestamps' (seconds) or "
        "'frames'.", choices=("timestamps", "frames")),
    Arg("file_list_frame_num", bool, False, "DALI's spelling of file_list_format='frames'."),
    Arg("file_filters", "str_list", VIDEO_FILTERS, "Glob patterns of the files taken from file_root."),
    Arg("sequence_length", int, REQUIRED, "Frames per sequence."),
    Arg("step", int, -1, "Frames between the starts of consecutive sequences; <= 0: stride * sequence_length "
        "(consecutive sequences do not overlap), as DALI's reader starts them."),
    Arg("stride", int, 1, "Frames between consecutive frames of a sequence."),
    Arg("pad_sequences", bool, False, "Also make the incomplete sequences at the ends of files, padded with "
        "black frames (timestamp -1)."),
    Arg("enable_frame_num", bool, False, "Also output the number of each sequence's first frame."),
    Arg("enable_timestamps", bool, False, "Also output each frame's timestamp in seconds."),
    Arg("enable_audio", bool, False, "Also output the audio samples of each sequence's time window."),
    Arg("audio_sample_rate", int, 0, "Resample the audio to this rate; 0 keeps the file's."),
    Arg("resize_x", float, 0.0, "Output width (bilinear resize on read, on the reader's device); 0 keeps the "
        "aspect ratio from resize_y, or the width."),
    Arg("resize_y", float, 0.0, "Output height; 0 keeps the aspect ratio from resize_x, or the height."),
    Arg("dtype", types.DALIDataType, types.UINT8, "Output type of the frames: UINT8 or FLOAT.",
        choices=(types.UINT8, types.FLOAT)),
    Arg("normalized", bool, False, "With dtype=FLOAT, scale the frames to [0, 1]."),
    Arg("skip_vfr_check", bool, False, "Accepted for DALI compatibility: variable frame rates are read exactly."),
    Arg("skip_unreadable_files", bool, False, "Leave out of the epoch the files that cannot be read (missing, "
        "not a file, truncated, damaged) instead of raising at build(); how many were left out, and why, is "
        "logged as a warning and kept in the reader's ``skipped_files``. Not in DALI, whose reader raises."),
    Arg("file_list_include_preceding_frame", bool, False, "file_list seconds: also take the frames the window's "
        "start and end cut (start rounded down, end up), not only the frames wholly inside it (as DALI rounds)."),
    Arg("additional_decode_surfaces", int, 2, "Accepted for DALI compatibility."),
    *READER_ARGS,
]

SCHEMA = OpSchema(
    "readers.video",
    doc="""Reads sequences of frames from video files, with their labels.

    Outputs: sequences (FHWC uint8 RGB), labels (INT32 [1]), then when enabled the first frame's number
    (INT32 [1]), every frame's timestamp in seconds (FLOAT32 [F], -1 for padded frames) and the audio of the
    sequence's time window (FLOAT32 [samples, channels]).

    A batch's groups of pictures are decoded once for all its sequences that need them, and the next batch's
    decoding starts before the current one is handed out (so the decoders never wait between batches; one more
    batch of frames is held meanwhile).

    Example::

        video, label = fn.readers.video(device="gpu", file_root="/data/clips", sequence_length=16, stride=2,
                                        random_shuffle=True, name="Reader")
        video, label, audio = fn.readers.video(filenames=files, sequence_length=8, enable_audio=True)
    """,
    inputs=0,
    outputs=_num_outputs,
    devices=("cpu", "gpu"),
    requires={"cpu": ("av",), "gpu": ("av", "PyNvVideoCodec")},
    stateful=True,
    output_layout=_layouts,
    args=VIDEO_ARGS,
)


def _parse_file_list(op: str, file_list: str, root: str | None) -> list[tuple[str, int, float | None, float | None]]:
    if not os.path.isfile(file_list):
        raise ArgumentError(f"{op}: file_list '{file_list}' does not exist")
    # DALI's video reader opens file_list paths as written, relative to the working directory, not to the list's
    # folder (get_file_label_pair of dali/operators/reader/loader/video_loader.cc); file_root, where given, is
    # their root. They are made absolute here, against the working directory of the build (_resolved).
    base = root or ""
    entries = []
    with open(file_list) as f:
        for number, line in enumerate(f, 1):
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            if not 2 <= len(parts) <= 4:
                raise ArgumentError(f"{op}: line {number} of '{file_list}' should be 'path label [start [end]]': "
                                    f"{line.strip()!r}")
            try:
                label = int(parts[1])
                start = float(parts[2]) if len(parts) > 2 else None
                end = float(parts[3]) if len(parts) > 3 else None
            except ValueError:
                raise ArgumentError(f"{op}: line {number} of '{file_list}' has a non-numeric label, start or end: "
                                    f"{line.strip()!r}") from None
            entries.append((_resolved(os.path.join(base, parts[0])), label, start, end))
    return entries


def _resolved(path: str) -> str:
    """A video path made absolute against the working directory now, when the reader is built: every backend then
    opens the same file whatever its own working directory (the GPU backend's CPU worker processes are shared by
    the pipeline's GPU video operators and keep the folder they started in) or a later ``os.chdir``."""
    return os.path.abspath(path)


def _index_or_why(path: str):
    """(the file's index, None), or (None, why it cannot be read as a video)."""
    try:
        idx = get_index(path)
    except (VideoError, OSError, ValueError) as e:
        return None, str(e) or type(e).__name__
    except Exception as e:  # noqa: BLE001 - whatever else fails on this file is named with it
        return None, f"{type(e).__name__}: {e}"
    return (None, idx.damage) if idx.damage else (idx, None)


def _frame_range(idx, start: float | None, end: float | None, as_frames: bool,
                 preceding: bool = False) -> tuple[int, int]:
    """[first, stop) frames of a file_list entry: frame numbers, or the frames wholly shown in [start, end) seconds
    counted from the first frame (DALI: pts - the stream's start_time), with ``preceding`` also those the window's
    ends cut; a negative start or end counts from the end (DALI: ``frame_count + start``).

    DALI's reader rounds ``start * fps`` up and ``end * fps`` down (with file_list_include_preceding_frame, start
    down and end up); on a constant frame rate these are the same frames, and on a variable one the frames whose
    display intervals lie inside the window (or meet it)."""
    n = idx.num_frames
    if as_frames:
        first = 0 if start is None else int(math.ceil(start))
        first = first + n if first < 0 else first
        stop = n if not end else (int(math.floor(end)) if end > 0 else n + int(math.floor(end)))
    else:
        times = idx.times - _time_origin(idx)
        duration = idx.end_time - _time_origin(idx)
        if start is None:
            first = 0
        else:
            t_start = start if start >= 0 else duration + start
            first = int(np.searchsorted(times, t_start + 1e-9, side="right")) - 1 if preceding else \
                int(np.searchsorted(times, t_start - 1e-9, side="left"))  # shown at t_start / starting from it
        if not end:
            stop = n
        else:
            t_end = end if end > 0 else duration + end
            if preceding:  # frames that start before t_end
                stop = int(np.searchsorted(times, t_end - 1e-9, side="left"))
            else:  # frames that stop being shown by t_end
                stop = int(np.searchsorted(np.append(times[1:], duration), t_end + 1e-9, side="right"))
    return max(first, 0), min(stop, n)


def _time_origin(idx) -> float:
    """Seconds on the stream's clock of its first frame: where file_list seconds and output timestamps count from
    (FFmpeg's stream start_time, from which DALI's reader counts)."""
    return float(idx.times[0]) if idx.num_frames else 0.0


_INTERP = {types.INTERP_NN: "nearest", types.INTERP_LINEAR: "bilinear", types.INTERP_CUBIC: "bicubic"}


def output_size(h: int, w: int, resize_x: float = 0, resize_y: float = 0, resize_shorter: float = 0,
                resize_longer: float = 0) -> tuple[int, int]:
    """(height, width) after a DALI-style resize: explicit sizes, one of them (aspect kept), or a side length."""
    if resize_shorter:
        s = resize_shorter / min(h, w)
        return int(round(h * s)), int(round(w * s))
    if resize_longer:
        s = resize_longer / max(h, w)
        return int(round(h * s)), int(round(w * s))
    out_h = int(round(resize_y)) if resize_y else (int(round(h * resize_x / w)) if resize_x else h)
    out_w = int(round(resize_x)) if resize_x else (int(round(w * resize_y / h)) if resize_y else w)
    return out_h, out_w


def resize_frames(frames: torch.Tensor, resize_x: float = 0, resize_y: float = 0, resize_shorter: float = 0,
                  resize_longer: float = 0, interp_type=types.INTERP_LINEAR) -> torch.Tensor:
    """Resize FHWC uint8 frames (DALI's VideoReaderResize) on the frames' device, all frames in one call."""
    h, w = frames.shape[1:3]
    out_h, out_w = output_size(h, w, resize_x, resize_y, resize_shorter, resize_longer)
    if (out_h, out_w) == (h, w) or frames.shape[0] == 0:
        return frames
    mode = _INTERP.get(interp_type, "bilinear")
    x = frames.permute(0, 3, 1, 2).float()
    kwargs = {} if mode == "nearest" else {"align_corners": False, "antialias": out_h < h or out_w < w}
    x = torch.nn.functional.interpolate(x, size=(out_h, out_w), mode=mode, **kwargs)
    return x.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()


@SCHEMA.operator_class("cpu")
class VideoReader(ReaderBase):
    """Sequences of video frames; on ``gpu`` the frames are decoded by NVDEC and resized on the GPU."""

    op_name = "fn.readers.video"

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        a = spec.args
        op = self.op_name
        if not a.get("sequence_length") or a["sequence_length"] < 1:
            raise ArgumentError(f"{op}: sequence_length is required and must be >= 1, got {a.get('sequence_length')}")
        self.length = int(a["sequence_length"])
        self.stride = int(a["stride"] or 1)
        if self.stride < 1:
            raise ArgumentError(f"{op}: stride must be >= 1, got {self.stride}")
        # DALI's VideoLoader: ``if (step_ < 0) step_ = count_ * stride_`` (its documentation says sequence_length)
        self.step = int(a["step"]) if a["step"] and a["step"] > 0 else self.stride * self.length
        entries = self._entries(a)
        if not entries:
            raise ArgumentError(f"{op}: no video files found (file_root={a['file_root']!r}, file_list="
                                f"{a['file_list']!r}, filenames={a['filenames']!r})")
        self.as_frames = a["file_list_format"] == "frames" or bool(a["file_list_frame_num"])
        # the files are indexed on the pipeline's CPU pool (num_threads threads; none with one thread)
        pool = runtime_of(spec).cpu_pool
        indexed = (list(pool.map(lambda e: _index_or_why(e[0]), entries)) if pool is not None and len(entries) > 1
                   else [_index_or_why(e[0]) for e in entries])
        self.skipped_files = [(e[0], why) for e, (_, why) in zip(entries, indexed) if why]
        if self.skipped_files:
            self._unreadable(entries)
            entries = [e for e, (_, why) in zip(entries, indexed) if not why]
        self.indexes = [idx for idx, why in indexed if not why]
        self.paths = [e[0] for e in entries]
        self.file_labels = [e[1] for e in entries]
        self.samples: list[tuple[int, int]] = []
        span = (self.length - 1) * self.stride
        for f, (entry, idx) in enumerate(zip(entries, self.indexes)):
            self.samples.extend((f, s) for s in self.sequence_starts(f, idx, entry))
        if not self.samples:
            raise ArgumentError(f"{op}: no file has {span + 1} frames for a sequence of {self.length} frames with "
                                f"stride {self.stride} (pass pad_sequences=True to pad short ones)")
        short = sorted({self.paths[f] for f in range(len(self.paths))} - {self.paths[f] for f, _ in self.samples})
        if short:
            logger.warning("%s: %d of %d files are shorter than a sequence (%d frames with stride %d) and give no "
                           "sample: %s (pass pad_sequences=True to pad them)", op, len(short), len(self.paths),
                           span + 1, self.stride, ", ".join(short[:5]) + (", ..." if len(short) > 5 else ""))
        self.setup_order(len(self.samples))
        self._ahead: tuple[list, PendingClips] | None = None  # the next batch's samples and decoding
        self.backend = self._backend(spec)
        if hasattr(self.backend, "get_ready") and self.samples:  # worker processes, NVDEC decoders: started now
            self.backend.get_ready(self.paths[self.samples[0][0]])

    def sequence_starts(self, f: int, idx, entry) -> list[int]:
        """The first frames of file ``f``'s sequences (``entry``: its file-list entry; ``idx``: its index)."""
        first, stop = _frame_range(idx, entry[2], entry[3], self.as_frames,
                                   bool(self.spec.args["file_list_include_preceding_frame"]))
        span = (self.length - 1) * self.stride
        last_start = stop - 1 if self.spec.args["pad_sequences"] else stop - 1 - span
        return list(range(first, last_start + 1, self.step))

    def _unreadable(self, entries) -> None:
        """Files that cannot be read: an error naming the first (and how many more), or, with
        ``skip_unreadable_files``, a warning that says how many are left out of the epoch and why."""
        op = self.op_name
        path, why = self.skipped_files[0]
        more = len(self.skipped_files) - 1
        if not self.spec.args["skip_unreadable_files"]:
            others = f" (and {more} more file{'s' * (more > 1)} that cannot be read)" if more else ""
            raise PipelineError(f"{op}: cannot read video file '{path}': {why}{others}; pass "
                                f"skip_unreadable_files=True to leave such files out of the epoch",
                                "readers.video", None, path)
        logger.warning("%s: skip_unreadable_files: %d of %d files left out of the epoch: %s", op,
                       len(self.skipped_files), len(entries),
                       "; ".join(f"'{p}': {w}" for p, w in self.skipped_files[:5]) + ("; ..." if more > 4 else ""))
        if len(self.skipped_files) == len(entries):
            raise PipelineError(f"{op}: none of the {len(entries)} video files can be read (the first: '{path}': "
                                f"{why})", "readers.video", None, path)

    def _backend(self, spec: OpSpec):
        # A batch's groups of pictures shared out to PyAV worker processes, one per pipeline thread (threads would
        # share the GIL: 2.3x slower on small frames here), frames kept on the CPU and converted as FFmpeg does.
        return HybridBackend(sessions=0, cpu_workers=max(1, spec.num_threads), cpu=PyAVBackend(threads=1),
                             output_device="cpu", runtime=runtime_of(spec))

    def close(self) -> None:
        """Stop the batch decoding ahead; end the CPU backend's worker processes and threads (the GPU backend is
        the pipeline's, shared by its GPU video operators: its runtime closes it)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead[1].cancel()
        if self.spec.device == "cpu" and hasattr(self.backend, "close"):
            self.backend.close()

    def _entries(self, a: dict[str, Any]) -> list[tuple[str, int, float | None, float | None]]:
        if a["file_list"] is not None:
            if a["filenames"] is not None:
                raise ArgumentError(f"{self.op_name}: give only one of file_list and filenames")
            return _parse_file_list(self.op_name, a["file_list"], a["file_root"])
        files = dict(file_root=a["file_root"], file_list=None, files=a["filenames"], labels=a["labels"],
                     file_filters=a["file_filters"], case_sensitive_filter=False, dir_filters=None)
        paths, labels = list_files(self.op_name, files, clients=self.s3)
        return [(_resolved(p), lab, None, None) for p, lab in zip(paths, labels)]

    def request(self, sample: int) -> ClipRequest:
        """The resolved frame request of sample ``sample`` (a sequence), nothing decoded yet."""
        f, start = self.samples[sample]
        wanted = start + self.stride * np.arange(self.length)
        return prepare_clip(self.paths[f], frames=wanted,
                            pad_mode="constant" if self.spec.args["pad_sequences"] else "none", fill_value=0,
                            index=self.indexes[f])

    def load(self, sample: int) -> tuple[torch.Tensor, ...]:
        return self.outputs(sample, read_clips([self.request(sample)], self.backend)[0])

    def outputs(self, sample: int, clip: Clip) -> tuple[torch.Tensor, ...]:
        """The reader's outputs for a decoded sequence: resized / converted frames, label, and what is enabled."""
        f, start = self.samples[sample]
        a = self.spec.args
        idx = self.indexes[f]
        frames = resize_frames(clip.frames, a["resize_x"], a["resize_y"], a.get("resize_shorter") or 0,
                               a.get("resize_longer") or 0, a.get("interp_type") or types.INTERP_LINEAR)
        if a["dtype"] == types.FLOAT:
            frames = frames.float().div_(255.0) if a["normalized"] else frames.float()
        dev = frames.device
        out = [frames, torch.tensor([self.file_labels[f]], dtype=torch.int32, device=dev)]
        if a["enable_frame_num"]:
            out.append(torch.tensor([start], dtype=torch.int32, device=dev))
        if a["enable_timestamps"]:
            stamps = np.where(clip.frame_numbers >= 0, clip.timestamps - _time_origin(idx), clip.timestamps)
            out.append(torch.as_tensor(stamps, dtype=torch.float32).to(dev))
        if a["enable_audio"]:
            real = clip.frame_numbers[clip.frame_numbers >= 0]
            t0 = float(idx.times[real[0]])
            last = int(real[-1])
            t1 = float(idx.times[last + 1]) if last + 1 < idx.num_frames else idx.end_time
            audio, _ = read_audio_window(self.paths[f], t0, t1, sample_rate=a["audio_sample_rate"])
            out.append(torch.from_numpy(audio).to(dev))
        return tuple(out)

    def _decode_ahead(self, samples: list[tuple[int, int]]) -> list[Clip]:
        """The clips of ``samples`` (this batch), with the next batch's decoding started before this one's is
        waited for: the backend's workers then go from this batch's last jobs (where most of them would wait for
        a few) straight to the next batch's. The next batch is known (the sample order is), and its decoding is
        used when that batch comes, or cancelled when another does (a checkpoint restored)."""
        ahead, self._ahead = self._ahead, None
        pending = ahead[1] if ahead is not None and ahead[0] == samples else None
        if ahead is not None and pending is None:
            ahead[1].cancel()
        if pending is None:
            pending = PendingClips([self.request(i) for i, _ in samples], self.backend)
        following = self.peek_samples()
        try:
            self._ahead = (following, PendingClips([self.request(i) for i, _ in following], self.backend))
        except Exception:  # noqa: BLE001 - raised again, naming its sample, when that batch is read
            self._ahead = None
        return pending.result()

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> tuple[Batch, ...]:
        samples = self.next_samples(ctx)
        picks = [i for i, _ in samples]
        paths = [self.paths[self.samples[i][0]] for i in picks]
        pool = ctx.thread_pool

        def each(fn, n: int) -> list:
            return list(pool.map(fn, range(n))) if pool is not None and n > 1 else [fn(k) for k in range(n)]

        def named(fn):
            def call(k: int):
                try:
                    return fn(k)
                except Exception as e:  # noqa: BLE001 - re-raised naming the sample and its file
                    raise SampleError(k, paths[k], e) from e
            return call

        if hasattr(self.backend, "submit_batch"):  # the whole batch's groups of pictures shared out at once
            try:
                clips = self._decode_ahead(samples)
            except Exception as e:  # noqa: BLE001
                k = getattr(e, "request_index", 0)
                raise SampleError(k, paths[k], e) from e
            if self.spec.device == "gpu":  # the clips were stacked on this thread's stream; workers use the default
                torch.cuda.default_stream().wait_stream(torch.cuda.current_stream())
            results = each(named(lambda k: self.outputs(picks[k], clips[k])), len(picks))
        else:
            results = each(named(lambda k: self.load(picks[k])), len(picks))
        layouts = _layouts(self.spec.args, [])
        if self.spec.device == "gpu" and results:  # frames were made on the worker threads' default stream
            torch.cuda.current_stream().wait_stream(torch.cuda.default_stream())
        return tuple(Batch(list(col), layouts[j], paths) for j, col in enumerate(zip(*results)))


@SCHEMA.operator_class("gpu")
class VideoReaderGPU(VideoReader):
    """NVDEC and the CPU decode each batch's sequences together (``sluice.backends.video.hybrid``; NVDEC alone where
    ``sluice.ops.decoders.video.HYBRID`` is False); outputs on the GPU."""

    def _backend(self, spec: OpSpec):
        return gpu_backend(runtime_of(spec), spec.device_id or 0)

    def load(self, sample: int) -> tuple[torch.Tensor, ...]:
        with torch.cuda.device(self.spec.device_id or 0):
            return super().load(sample)

    def outputs(self, sample: int, clip: Clip) -> tuple[torch.Tensor, ...]:
        with torch.cuda.device(self.spec.device_id or 0):
            return super().outputs(sample, clip)

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> tuple[Batch, ...]:
        with torch.cuda.device(self.spec.device_id or 0):
            return super().run(ctx, *inputs, args=args)


RESIZE_SCHEMA = OpSchema(
    "readers.video_resize",
    doc="""Reads sequences of frames from video files and resizes them on read (DALI's VideoReaderResize).

    The arguments of ``fn.readers.video`` plus ``resize_shorter`` / ``resize_longer`` and ``interp_type``
    (INTERP_NN, INTERP_LINEAR, INTERP_CUBIC); on ``gpu`` the resize runs on the GPU.

    Example::

        video, label = fn.readers.video_resize(device="gpu", file_root=root, sequence_length=8, resize_shorter=128)
    """,
    inputs=0,
    outputs=_num_outputs,
    devices=("cpu", "gpu"),
    requires={"cpu": ("av",), "gpu": ("av", "PyNvVideoCodec")},
    stateful=True,
    output_layout=_layouts,
    args=[*VIDEO_ARGS,
          Arg("resize_shorter", float, 0.0, "Length of the shorter side after the resize (aspect kept)."),
          Arg("resize_longer", float, 0.0, "Length of the longer side after the resize (aspect kept)."),
          Arg("interp_type", types.DALIInterpType, types.INTERP_LINEAR, "Interpolation.",
              choices=tuple(_INTERP))],
)


@RESIZE_SCHEMA.operator_class("cpu")
class VideoResizeReader(VideoReader):
    op_name = "fn.readers.video_resize"


@RESIZE_SCHEMA.operator_class("gpu")
class VideoResizeReaderGPU(VideoReaderGPU):
    op_name = "fn.readers.video_resize"
