"""``fn.decoders.audio``: decodes WAV, FLAC, OGG/Vorbis, Opus and MP3 with libsndfile, optionally only a time
window, optionally resampled (soxr) and downmixed."""

from __future__ import annotations

import logging
from concurrent.futures import wait

import numpy as np
import torch

from sluice import types
from sluice.backends.audio import OUT_OF_BOUNDS_POLICIES, decode_audio, open_audio, plan_window, read_into, resample_soxr
from sluice.errors import SampleError
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema, Operator, OpSpec

__all__ = ["SCHEMA"]

logger = logging.getLogger(__name__)

_DTYPES = {types.INT16: "int16", types.INT32: "int32", types.FLOAT: "float32"}

SCHEMA = OpSchema(
    "decoders.audio",
    doc="""Decodes audio files (WAV 8/16/24/32-bit integer and float, FLAC, OGG/Vorbis, OGG/Opus, MP3) on the CPU.

    Outputs the decoded samples and the sample rate (float32, Hz). Multi-channel audio comes out as
    ``(time, channels)`` (layout ``"tc"``) unless ``downmix`` averages the channels into a 1-D signal (layout
    ``"t"``). Floating output is in [-1, 1]; integer output fills the type's range.

    **Time windows.** ``start_time`` and ``duration`` (seconds, may vary per sample) decode only part of the file,
    seeking instead of decoding what comes before (exact to the sample for WAV, FLAC, Vorbis, Opus and MP3, as
    tests/ops/audio/test_decoder_soundfile_compat.py checks). ``duration`` of 0 decodes to the end. A window reaching past the end raises an error naming the file (``out_of_bounds_policy="error"``), is
    padded with silence to exactly ``duration`` seconds (``"pad"``), or is cut at the end of the file
    (``"trim_to_shape"``). This takes the audio of the seconds a video clip covers::

        audio, rate = fn.decoders.audio(data, downmix=True, start_time=t0, duration=clip_seconds,
                                        out_of_bounds_policy="pad")

    With ``sample_rate`` the audio is resampled (libsoxr, ``quality`` 0..100) and the rate output is the new rate.
    Corrupt, truncated, empty or unsupported files raise an error naming the file; a valid file holding no
    frames decodes to an empty signal. Example::

        encoded, _ = fn.readers.file(file_root=root)
        audio, rate = fn.decoders.audio(encoded, dtype=types.FLOAT, downmix=True, sample_rate=16000)
    """,
    inputs=1,
    outputs=2,
    devices=("cpu",),
    output_layout=lambda args, _: ["t" if args["downmix"] else "tc", ""],
    args=[
        Arg("dtype", types.DALIDataType, types.FLOAT, "Output type: types.INT16, types.INT32 or types.FLOAT.",
            choices=tuple(_DTYPES)),
        Arg("downmix", bool, False, "Average all channels into one; the output is then 1-D."),
        Arg("sample_rate", float, 0.0, "Resample to this rate (Hz); 0 keeps the file's rate.", per_sample=True),
        Arg("quality", float, 50.0, "Resampling quality, 0 (fastest) to 100 (best); soxr's QQ/LQ/MQ/HQ/VHQ "
            "recipes for <15, <35, <50, <75 and the rest."),
        Arg("start_time", float, 0.0, "First second to decode (sluice extension).", per_sample=True),
        Arg("duration", float, 0.0, "Seconds to decode from start_time; 0 decodes to the end (sluice extension).",
            per_sample=True),
        Arg("out_of_bounds_policy", str, "error", "What a window reaching past the end of the file does: 'error', "
            "'pad' (silence up to duration) or 'trim_to_shape' (sluice extension).",
            choices=OUT_OF_BOUNDS_POLICIES),
    ],
)


def decode_sample(data: torch.Tensor, source: str, *, dtype, downmix, sample_rate, quality, start_time, duration,
                  out_of_bounds_policy, **_) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode one file (the general path: any window, resampling, any shape)."""
    target = float(sample_rate or 0.0)
    resample = target > 0
    # Decode in float32 when resampling, so that soxr works on floats; convert to dtype afterwards.
    out, rate = decode_audio(_bytes(data), dtype="float32" if resample else _DTYPES[dtype], downmix=downmix,
                             start_time=float(start_time), duration=float(duration) or None,
                             out_of_bounds_policy=out_of_bounds_policy, source=source)
    if resample and target != rate:
        out = resample_soxr(out, rate, target, quality)
        rate = target
    if resample and dtype is not types.FLOAT:
        info = np.iinfo(_DTYPES[dtype])
        out = np.clip(np.rint(out.astype(np.float64) * info.max), info.min, info.max).astype(_DTYPES[dtype])
    return torch.from_numpy(np.ascontiguousarray(out)), _rate(rate)


def _bytes(data: torch.Tensor) -> np.ndarray:
    if data.dtype != torch.uint8 or data.dim() != 1:
        raise ValueError(f"decoders.audio expects encoded files as 1-D uint8 tensors, got {data.dtype} of shape "
                         f"{tuple(data.shape)}")
    return data.numpy()


def _rate(rate: float) -> torch.Tensor:
    return torch.tensor(float(rate), dtype=torch.float32)


@SCHEMA.operator_class("cpu")
class AudioDecoder(Operator):
    """Decodes a batch in the pipeline's threads.

    Without resampling, files are opened first (headers only); when all outputs will have one shape, every
    thread then decodes straight into its row of one batch buffer, which is page-locked when the pipeline has a
    GPU, so that ``.gpu()`` is a single asynchronous copy with no host copies in between. Otherwise each file is
    decoded on its own (:func:`decode_sample`).
    """

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        self._pin = spec.device_id is not None and torch.cuda.is_available()

    def run(self, ctx: BatchContext, data: Batch, *, args: BatchArgs) -> tuple[Batch, Batch]:
        n = len(data)
        sources = ctx.source_info or [""] * n
        pool = ctx.thread_pool

        def each(fn, items):
            if pool is None or len(items) < 2:
                return [fn(i) for i in items]
            futures = [pool.submit(fn, i) for i in items]
            wait(futures)  # all finish before any error propagates: no file is closed while a thread reads it
            return [f.result() for f in futures]

        def guarded(fn):
            def call(i):
                try:
                    return fn(i)
                except Exception as exc:  # noqa: BLE001 - re-raised naming the sample and its file
                    raise SampleError(i, sources[i], exc) from exc
            return call

        per = [args.sample(i) for i in range(n)]
        if n == 0:
            return Batch([]), Batch([])
        if any(float(a["sample_rate"] or 0.0) > 0 for a in per):
            results = each(guarded(lambda i: decode_sample(data[i], sources[i], **per[i])), list(range(n)))
            return Batch([r[0] for r in results]), Batch([r[1] for r in results])

        handles: list = [None] * n       # every file opened so far, closed whatever happens

        def open_one(i):
            a = per[i]
            f = handles[i] = open_audio(_bytes(data[i]), sources[i])
            return f, plan_window(f, start_time=float(a["start_time"]), duration=float(a["duration"]) or None,
                                  out_of_bounds_policy=a["out_of_bounds_policy"], source=sources[i])

        try:
            opened = each(guarded(open_one), list(range(n)))
            downmix, dtype = per[0]["downmix"], _DTYPES[per[0]["dtype"]]
            shapes = [plan.shape(downmix) for _, plan in opened]
            if all(s == shapes[0] for s in shapes):
                buf = torch.empty((n,) + shapes[0], dtype=getattr(torch, dtype), pin_memory=self._pin)
                rows = buf.numpy()
                each(guarded(lambda i: read_into(opened[i][0], opened[i][1], rows[i], sources[i])), list(range(n)))
                audio = Batch.from_dense(buf)
            else:
                def one(i):
                    out = np.empty(shapes[i], dtype)
                    read_into(opened[i][0], opened[i][1], out, sources[i])
                    return torch.from_numpy(out)
                audio = Batch(each(guarded(one), list(range(n))))
        finally:
            for f in handles:
                if f is not None:
                    f.close()
        return audio, Batch.from_dense(torch.tensor([float(p.rate) for _, p in opened], dtype=torch.float32))
