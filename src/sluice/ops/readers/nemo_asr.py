"""``fn.readers.nemo_asr``: speech samples listed in NeMo ASR manifests, decoded (DALI's NeMo ASR reader).

A manifest is a JSON-lines file; each line names an audio file (``audio_filepath``, relative to the manifest's
folder unless absolute or a URL) with its ``duration`` (seconds), ``text`` and optionally ``offset`` (seconds).
Only the window ``[offset, offset + duration)`` of each file is decoded, by seeking (the audio decoder's
``plan_window`` / ``read_into`` over libsndfile): a local file is read by libsndfile itself, an object in S3
through ranged requests, so neither is read whole.

Outputs, in DALI's order: the audio (``downmix``: 1-D, else ``(time, channels)``), then with ``read_sample_rate``
its rate (FLOAT, Hz), with ``read_text`` the transcript (UTF-8 bytes, 1-D UINT8), with ``read_idxs`` the line
number of the sample in the manifests (INT64, shape [1]).

Errors name the manifest and its line: a line that is not JSON or lacks ``audio_filepath``, an audio file that
cannot be read or decoded, a window past the end of the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sluice import types
from sluice.backends import storage
from sluice.backends.audio import AudioDecodeError, plan_window, read_into, resample_soxr
from sluice.errors import ArgumentError, SampleError
from sluice.ops.readers._base import as_list
from sluice.ops.readers.file import READER_ARGS, ReaderBase
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import map_all, runs
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema, OpSpec


def _outputs(args: dict[str, Any]) -> int:
    return 1 + bool(args.get("read_sample_rate")) + bool(args.get("read_text")) + bool(args.get("read_idxs"))


SCHEMA = OpSchema(
    "readers.nemo_asr",
    doc="""Reads NeMo ASR manifests (JSON lines with ``audio_filepath``, ``duration``, ``text``, ``offset``) and
    decodes each sample's window of audio.

    Outputs: ``audio[, sample_rate][, text][, idxs]``. ``manifest_filepaths`` and the audio files may be
    ``s3://`` URLs. Samples shorter than ``min_duration`` or longer than ``max_duration`` (by the manifest's
    ``duration``; 0: no bound) are left out. Sharding, shuffling and padding are ``readers.file``'s.

    Example::

        audio, rate, text = fn.readers.nemo_asr(manifest_filepaths=["train.json"], sample_rate=16000,
                                                max_duration=20.0, random_shuffle=True, name="Reader")
        spectrogram = fn.spectrogram(audio, nfft=512, window_length=400, window_step=160)
    """,
    inputs=0,
    outputs=_outputs,
    devices=("cpu",),
    stateful=True,
    output_layout=lambda args, _: ["t" if args["downmix"] else "tc", "", "", ""][:_outputs(args)],
    args=[
        Arg("manifest_filepaths", "str_list", REQUIRED, "NeMo manifests (JSON lines), paths or s3:// URLs."),
        Arg("sample_rate", float, -1.0, "Resample to this rate (Hz); -1 keeps each file's rate."),
        Arg("quality", float, 50.0, "Resampling quality, 0 (fastest) to 100 (best)."),
        Arg("downmix", bool, True, "Average the channels into one (1-D output)."),
        Arg("dtype", types.DALIDataType, types.FLOAT, "Output type: types.INT16, types.INT32 or types.FLOAT.",
            choices=(types.INT16, types.INT32, types.FLOAT)),
        Arg("min_duration", float, 0.0, "Leave out samples shorter than this (seconds; 0: no bound)."),
        Arg("max_duration", float, 0.0, "Leave out samples longer than this (seconds; 0: no bound)."),
        Arg("read_sample_rate", bool, True, "Output each sample's rate."),
        Arg("read_text", bool, True, "Output each sample's transcript (UTF-8 bytes)."),
        Arg("read_idxs", bool, False, "Output each sample's line number in the manifests."),
        *READER_ARGS,
    ],
)

_DTYPES = {types.INT16: "int16", types.INT32: "int32", types.FLOAT: "float32"}


@dataclass
class Entry:
    audio: str
    offset: float
    duration: float | None
    text: str
    where: str  # manifest:line, for errors


def read_manifests(op: str, manifests: list[str], clients: storage.S3Clients | None = None) -> list[Entry]:
    """Every line of the manifests, in order; a line that is not a JSON object naming ``audio_filepath`` is an
    error naming the manifest and the line (``clients``: the pipeline's S3 clients, for manifests in S3)."""
    out = []
    for manifest in manifests:
        try:
            text = storage.read_text(manifest, clients=clients)
        except storage.StorageError as e:
            raise ArgumentError(f"{op}: cannot read the manifest: {e}") from None
        base = storage.dirname(manifest)
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"line {number} of manifest '{manifest}'"
            try:
                row = json.loads(line)
            except ValueError as e:
                raise ArgumentError(f"{op}: {where} is not JSON ({e}): {line[:80]!r}") from None
            if not isinstance(row, dict) or not isinstance(row.get("audio_filepath"), str):
                raise ArgumentError(f"{op}: {where} has no 'audio_filepath': {line[:80]!r}")
            try:
                duration = None if row.get("duration") is None else float(row["duration"])
                offset = float(row.get("offset") or 0.0)
            except (TypeError, ValueError):
                raise ArgumentError(f"{op}: {where} has a non-numeric duration or offset: {line[:80]!r}") from None
            out.append(Entry(storage.join(base, row["audio_filepath"]), offset, duration, str(row.get("text", "")),
                             where))
    return out


def decode_window(e: Entry, dtype: str, downmix: bool, clients: storage.S3Clients | None = None
                  ) -> tuple[np.ndarray, int]:
    """Decode the manifest's window of ``e.audio`` by seeking to it (libsndfile reads a local file itself; an
    object is read by ranged requests, through ``clients``)."""
    import soundfile

    source = e.audio if not storage.is_url(e.audio) else storage.open_file(e.audio, buffer_size=256 << 10,
                                                                           clients=clients)
    try:
        with soundfile.SoundFile(source) as f:
            plan = plan_window(f, start_time=e.offset, duration=e.duration, out_of_bounds_policy="error",
                               source=e.audio)
            out = np.empty(plan.shape(downmix), dtype)
            read_into(f, plan, out, source=e.audio)
    except soundfile.LibsndfileError as exc:
        raise AudioDecodeError(f"cannot decode audio in file {e.audio!r}: {exc}") from None
    finally:
        if not isinstance(source, str):
            source.close()
    return out, plan.rate


@SCHEMA.operator_class("cpu")
class NemoAsrReader(ReaderBase):
    op_name = "fn.readers.nemo_asr"

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        a = spec.args
        entries = read_manifests(self.op_name, as_list(self.op_name, "manifest_filepaths", a["manifest_filepaths"]),
                                 self.s3)
        self.line_no = []
        self.entries = []
        lo, hi = float(a["min_duration"] or 0.0), float(a["max_duration"] or 0.0)
        for i, e in enumerate(entries):
            if e.duration is not None and ((lo > 0 and e.duration < lo) or (hi > 0 and e.duration > hi)):
                continue
            self.entries.append(e)
            self.line_no.append(i)
        if not self.entries:
            raise ArgumentError(f"{self.op_name}: no manifest entry lasts between min_duration={lo} and "
                                f"max_duration={hi} seconds ({len(entries)} entries)")
        self.setup_order(len(self.entries))

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> tuple[Batch, ...]:
        a = self.spec.args
        picks = [i for i, _ in self.next_samples(ctx)]
        n = len(picks)
        target = float(a["sample_rate"])
        dtype = _DTYPES[a["dtype"]]
        work = "float32" if target > 0 else dtype
        audio: list[torch.Tensor] = [None] * n  # type: ignore[list-item]
        rates = np.zeros(n, np.float32)
        names = [self.entries[i].audio for i in picks]
        s3 = self.s3

        def decode(run: range) -> None:
            for k in run:
                e = self.entries[picks[k]]
                try:
                    out, rate = decode_window(e, work, a["downmix"], s3)
                    if target > 0 and target != rate:
                        out, rate = resample_soxr(out, rate, target, a["quality"]), target
                    if work != dtype:  # resampled in float: back to the integer type
                        info = np.iinfo(dtype)
                        out = np.clip(np.rint(out.astype(np.float64) * info.max), info.min, info.max).astype(dtype)
                except Exception as exc:  # noqa: BLE001 - named with its file and manifest line
                    raise SampleError(k, e.audio, _naming(exc, e.where)) from exc
                audio[k] = torch.from_numpy(np.ascontiguousarray(out))
                rates[k] = rate

        map_all(ctx.thread_pool, decode, runs(n, ctx.thread_pool))
        outs = [Batch(audio, "t" if a["downmix"] else "tc", names)]
        if a["read_sample_rate"]:
            outs.append(Batch.from_dense(torch.from_numpy(rates), "", names))
        if a["read_text"]:
            outs.append(Batch([torch.frombuffer(bytearray(self.entries[i].text.encode()), dtype=torch.uint8)
                               if self.entries[i].text else torch.empty(0, dtype=torch.uint8) for i in picks], "",
                              names))
        if a["read_idxs"]:
            outs.append(Batch.from_dense(torch.tensor([[self.line_no[i]] for i in picks], dtype=torch.int64), "",
                                         names))
        return tuple(outs)


def _naming(exc: Exception, where: str) -> Exception:
    """``exc`` with the manifest line added to its message (as an error of the same family)."""
    for family in (ValueError, OSError):
        if isinstance(exc, family):
            return family(f"{exc} ({where})")
    return exc
