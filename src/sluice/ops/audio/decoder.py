"""``fn.decoders.audio``: decodes WAV, FLAC, OGG/Vorbis, Opus and MP3 with libsndfile, optionally only a time
window, optionally resampled (soxr) and downmixed."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import torch

from sluice import types
from sluice.backends.audio import (FINITE_LIMIT, OUT_OF_BOUNDS_POLICIES, decode_error, plan_windows, resample_length,
                                   resample_soxr)
from sluice.errors import SampleError
from sluice.kernels.audio.batching import pad_stack
from sluice.kernels.audio.pcm import PAD_BYTE, SAMPLE_BYTES, pcm_to_audio
from sluice.kernels.audio.resample import resample_batch
from sluice.native.audio import OK, WAV_FORMATS, host_tensor, open_files
from sluice.ops.readers.file import batch_region, contiguous_bytes, is_page_locked_buffer
from sluice.pipeline.pool import map_all, share_items, share_range
from sluice.pipeline.batch import Batch, host_empty
from sluice.schema import Arg, BatchArgs, BatchContext, DeviceForm, Operator, OpSchema, OpSpec

__all__ = ["SCHEMA", "decode_batch", "decode_files"]

logger = logging.getLogger(__name__)

_DTYPES = {types.INT16: "int16", types.INT32: "int32", types.FLOAT: "float32"}

SCHEMA = OpSchema(
    "decoders.audio",
    doc="""Decodes audio files (WAV 8/16/24/32-bit integer and float, FLAC, OGG/Vorbis, OGG/Opus, MP3).

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
    Corrupt, truncated, empty or unsupported files raise an error naming the file, as do a header declaring a
    sample rate outside 1 Hz..1 MHz and (with ``finite``, a sluice extension, on by default) a file of float
    samples whose window holds a NaN, an infinity or a value beyond 1e6 (a corrupt file: a flipped bit gives 1e37);
    ``finite=False`` keeps such values. A valid file holding no frames decodes to an empty signal. Damage that the
    codec itself conceals is tolerated as libsndfile reports it: where libsndfile reads a damaged OGG stream short
    without an error, the signal is what it read; what libsndfile reports as an error is one. Example::

        encoded, _ = fn.readers.file(file_root=root)
        audio, rate = fn.decoders.audio(encoded, dtype=types.FLOAT, downmix=True, sample_rate=16000)

    On the CPU a batch is decoded by sluice's compiled core with the GIL released: plain WAVs are converted
    there, other formats are decoded by libsndfile (soundfile's copy) fed from memory; headers are read in one
    call, then each of the pipeline's threads decodes a run of files straight into one output buffer (page-locked
    when the pipeline has a GPU, so that ``.gpu()`` is one asynchronous copy). The values are soundfile's exactly.

    **device="mixed"** (a sluice extension: DALI's audio decoder runs on the CPU only) outputs both the audio
    and the rates on the GPU. PCM and IEEE-float WAVs (8/16/24/32-bit integer, 32/64-bit float, also
    WAVE_FORMAT_EXTENSIBLE) are not decoded on the CPU: only their headers are parsed; the bytes of each window
    go from the reader's buffer into one page-locked staging buffer, the batch crosses to the GPU in ONE copy,
    and the sample conversion and downmix run there as one batched operation per sample format, with
    libsndfile's arithmetic: the values equal the CPU decoder's exactly (tests/ops/audio/test_mixed_decoder*.py).
    The time window arguments behave as on the CPU. Other formats (FLAC, OGG, MP3, Opus, compressed WAV codecs)
    are decoded per file on the CPU inside the operator, then copied with the rest; a WAV whose header is odd
    (truncated data chunk, unknown length) takes that path too, so it is accepted or rejected with the CPU
    decoder's errors. ``sample_rate`` resamples on the GPU, one batched call per rate pair, with
    ``audio_resample``'s windowed-sinc kernel (``quality`` sets its lobes) instead of soxr: within the band the two
    agree to 1e-3 of full scale. The rate output keeps a host copy: pass it as an argument input
    with ``rate.cpu()``, which costs no GPU synchronisation::

        audio, rate = fn.decoders.audio(encoded, device="mixed", downmix=True)
        audio = fn.audio_resample(audio, in_rate=rate.cpu(), out_rate=16000.0)
    """,
    inputs=1,
    outputs=2,
    devices=("cpu", "mixed"),
    requires={"cpu": ("soundfile", "soxr"), "mixed": ("soundfile",)},
    # feeding only .gpu(), the CPU decoder becomes the mixed one when it resamples nothing (soxr and the GPU
    # resampler differ): the same values, half the bytes copied for 16-bit files
    device_form=DeviceForm("mixed", when=lambda args: not args.get("sample_rate")),
    output_layout=lambda args, _: ["t" if args["downmix"] else "tc", ""],
    args=[
        Arg("dtype", types.DALIDataType, types.FLOAT, "Output type: types.INT16, types.INT32 or types.FLOAT.",
            choices=tuple(_DTYPES)),
        Arg("downmix", bool, False, "Average all channels into one; the output is then 1-D."),
        Arg("sample_rate", float, 0.0, "Resample to this rate (Hz); 0 keeps the file's rate.", per_sample=True, min=0),
        Arg("quality", float, 50.0, "Resampling quality, 0 (fastest) to 100 (best); soxr's QQ/LQ/MQ/HQ/VHQ "
            "recipes for <15, <35, <50, <75 and the rest."),
        Arg("start_time", float, 0.0, "First second to decode (sluice extension).", per_sample=True),
        Arg("duration", float, 0.0, "Seconds to decode from start_time; 0 decodes to the end (sluice extension).",
            per_sample=True),
        Arg("out_of_bounds_policy", str, "error", "What a window reaching past the end of the file does: 'error', "
            "'pad' (silence up to duration) or 'trim_to_shape' (sluice extension).",
            choices=OUT_OF_BOUNDS_POLICIES),
        Arg("finite", bool, True, f"Refuse files of float samples holding NaN, infinity or values beyond "
            f"{FINITE_LIMIT:g} (corrupt files), naming the file; False keeps the values (sluice extension)."),
    ],
)


def decode_sample(data: torch.Tensor, source: str, *, dtype, downmix, sample_rate, quality, start_time, duration,
                  out_of_bounds_policy, finite=True, **_) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode one file (the general path: any window, resampling, any shape)."""
    target = float(sample_rate or 0.0)
    resample = target > 0
    # Decode in float32 when resampling, so that soxr works on floats; convert to dtype afterwards.
    try:
        audio, rates = decode_files(Batch([data]), [source], dtype="float32" if resample else _DTYPES[dtype],
                                    downmix=downmix, start_time=[start_time], duration=[duration],
                                    out_of_bounds_policy=out_of_bounds_policy, finite=finite)
    except SampleError as exc:
        raise exc.cause from None
    out, rate = audio[0].numpy(), int(rates[0])
    if resample and target != rate:
        out = resample_soxr(out, rate, target, quality)
        rate = target
    if resample and dtype is not types.FLOAT:
        info = np.iinfo(_DTYPES[dtype])
        out = np.clip(np.rint(out.astype(np.float64) * info.max), info.min, info.max).astype(_DTYPES[dtype])
    return torch.from_numpy(np.ascontiguousarray(out)), _rate(rate)


def _rate(rate: float) -> torch.Tensor:
    return torch.tensor(float(rate), dtype=torch.float32)


def _each(pool, fn, items: list, sources: list[str]) -> list:
    """``fn(i)`` for every item, in the pool's threads when there is one; all finish before the first error
    propagates (no file is closed while a thread reads it), raised as a :class:`SampleError` naming the file."""
    def call(i):
        try:
            return fn(i)
        except Exception as exc:
            raise SampleError(i, sources[i], exc) from exc

    return map_all(pool, call, items)


def _raise_first(errors: dict, sources: list[str]) -> None:
    """Raise the error of the first sample that has one, as a :class:`SampleError` naming its file."""
    if errors:
        i = min(errors)
        raise SampleError(i, sources[i], errors[i]) from errors[i]


def _encoded(data: Batch | list[torch.Tensor], sources: list[str], found=False) -> dict:
    """The batch's files as :func:`open_files` takes them: the one buffer that holds them back to back (readers.file
    reads a GPU pipeline's batch so, packed; a dense batch is one too) with each file's offset and size, else one
    uint8 array per file. ``found``: :func:`batch_region` of the batch, when the caller has it."""
    batch = data if isinstance(data, Batch) else Batch(list(data))
    if not _bytes_at_once(batch):
        for i, s in enumerate(batch.samples):
            if s.dtype != torch.uint8 or s.dim() != 1:
                raise SampleError(i, sources[i], ValueError(
                    f"decoders.audio expects encoded files as 1-D uint8 tensors, got {s.dtype} of shape "
                    f"{tuple(s.shape)}"))
    dense = batch.dense
    if dense is not None and dense.is_contiguous():
        n, size = dense.shape                     # files of one size, held as one tensor: no per-file views
        return {"data": dense.reshape(-1).numpy(), "offsets": np.arange(n) * size, "sizes": np.full(n, size)}
    found = batch_region(batch) if found is False else found
    if found is None:
        return {"data": [s.numpy() for s in batch.samples]}
    region, offsets, sizes = found
    return {"data": region.numpy(), "offsets": offsets, "sizes": sizes}


def _bytes_at_once(batch: Batch) -> bool:
    """Whether a dense or packed batch is of 1-D uint8 samples, known without looking at each."""
    if batch.dense is not None:
        return batch.dense.dtype == torch.uint8 and batch.dense.dim() == 2
    return batch.packed is not None and batch.packed[0].dtype == torch.uint8 and batch.packed[1].shape[1] == 1


def _floats(values) -> np.ndarray:
    """Per-sample float arguments (None meaning 0) as one array."""
    return np.array([float(v or 0.0) for v in values], dtype=np.float64)


def decode_files(data: Batch, sources: list[str], *, dtype: str, downmix: bool, start_time, duration,
                 out_of_bounds_policy: str = "error", finite: bool = True, pool=None,
                 pin: bool = False, device_id: int | None = None) -> tuple[Batch, np.ndarray]:
    """Decode a batch of encoded files (1-D uint8 tensors) without resampling: the CPU decoder's work.

    One call reads every header (:func:`sluice.native.audio.open_files`); the windows are planned for the whole
    batch at once; then the batch is decoded straight into one output buffer by the calling thread and ``pool``'s
    threads, each taking the next few files when free (one core call each, the GIL released). The
    output is one dense tensor (page-locked with ``pin``, on ``device_id``'s context) when every sample has one
    shape, else a packed batch (one flat buffer, page-locked likewise).
    ``start_time`` and ``duration`` hold one value per file (seconds; a duration of 0 reads to the end).
    Returns the audio and the sample rates; a failure raises a :class:`SampleError` naming the first failing
    sample and its file."""
    n = len(data)
    with open_files(**_encoded(data, sources), sources=sources) as files:
        start, n_read, n_out, errors = plan_windows(files.rate, files.frames, _floats(start_time), _floats(duration),
                                                    out_of_bounds_policy, sources, valid=files.status == OK)
        _raise_first({**files.failures, **errors}, sources)
        width = np.ones(n, np.int64) if downmix else files.channels
        audio, out, offsets = _output(n_out, width, getattr(torch, dtype), downmix, pin, device_id)
        # each thread takes the next file when it is free (a fixed share per thread left the batch waiting for a
        # thread that started late): the core's threads in one call (share_items), else pool threads by chunks
        failed = share_items(pool, n, lambda lo, hi, core: files.decode(
            lo, hi, out, offsets, start, n_read, n_out, dtype, downmix, finite, core))
        _raise_first({i: e for part in failed for i, e in part.items()}, sources)
        return audio, files.rate


def _output(n_out: np.ndarray, width: np.ndarray, dtype: torch.dtype, downmix: bool, pin: bool,
            device_id: int | None) -> tuple[Batch, np.ndarray, np.ndarray]:
    """The batch's output buffer: ``(audio batch, the buffer as an array, byte offset of each sample in it)``."""
    n = len(n_out)
    shapes = [(int(f),) if downmix else (int(f), int(c)) for f, c in zip(n_out.tolist(), width.tolist())]
    counts = n_out * width
    if all(shape == shapes[0] for shape in shapes):
        shape = (n,) + shapes[0]
        dense = host_empty(shape, dtype, pin=True, device=device_id) if pin else host_tensor(shape, dtype)
        return Batch.from_dense(dense), dense.numpy(), np.arange(n, dtype=np.int64) * counts[0] * dtype.itemsize
    # Shapes differ: one flat buffer holding the samples back to back, a packed batch (views made only when asked
    # for; it crosses to a GPU in one copy too).
    total = (int(counts.sum()),)
    flat = host_empty(total, dtype, pin=True, device=device_id) if pin else host_tensor(total, dtype)
    offsets = (np.cumsum(counts) - counts) * dtype.itemsize
    return Batch.from_packed(flat, np.array(shapes, dtype=np.int64)), flat.numpy(), offsets


def resample_files(audio: Batch, rates: np.ndarray, targets: np.ndarray, sources: list[str], *, dtype: str,
                   downmix: bool, quality: float, pool=None, pin: bool = False,
                   device_id: int | None = None) -> tuple[Batch, np.ndarray]:
    """The CPU decoder's ``sample_rate`` for a decoded batch (float32, packed or dense, from :func:`decode_files`):
    each sample whose rate differs from its target is resampled by libsoxr, and every sample is converted to
    ``dtype`` as :func:`decode_sample` does, into one output buffer (page-locked with ``pin``), in chunks taken by
    the pipeline's threads. Returns the batch and the output rates. A batch that needs neither (already at its
    rates, float32 asked for) is returned as it is."""
    n = len(audio)
    resample = (targets > 0) & (targets != rates)
    out_rates = np.where(resample, targets, rates)
    if dtype == "float32" and not resample.any():
        return audio, out_rates
    flat, shapes, offsets = audio.packed_form()
    frames = shapes[:, 0]
    n_out = np.where(resample, resample_length(frames, rates, np.where(resample, targets, 1.0)), frames)
    width = np.ones(n, np.int64) if downmix else shapes[:, 1]
    out, host, out_offsets = _output(n_out, width, getattr(torch, dtype), downmix, pin, device_id)
    values = flat.numpy()
    raw, raw_item = host.reshape(-1).view(np.uint8), host.itemsize     # the output buffer's bytes
    info = np.iinfo(dtype) if dtype != "float32" else None

    def convert(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            x = values[offsets[i]: offsets[i] + int(np.prod(shapes[i]))].reshape(tuple(shapes[i]))
            try:
                y = resample_soxr(x, float(rates[i]), float(targets[i]), quality) if resample[i] else x
            except Exception as exc:
                raise SampleError(i, sources[i], exc) from exc
            dst = raw[out_offsets[i]: out_offsets[i] + y.size * raw_item].view(host.dtype)
            if info is None:
                dst[:] = y.reshape(-1)
            else:
                np.clip(np.rint(y.reshape(-1).astype(np.float64) * info.max), info.min, info.max, out=dst,
                        casting="unsafe")

    share_range(pool, n, convert)
    return out, out_rates


@SCHEMA.operator_class("cpu")
class AudioDecoder(Operator):
    """Decodes a batch with the compiled core in the pipeline's threads (see :func:`decode_files`), into
    page-locked memory when a GPU operator takes the output (``pin_outputs``, set by the executor); with
    ``sample_rate`` the samples whose rate differs are then resampled by libsoxr in the same threads
    (:func:`resample_files`)."""

    def run(self, ctx: BatchContext, data: Batch, *, args: BatchArgs) -> tuple[Batch, Batch]:
        n = len(data)
        sources = ctx.source_info or [""] * n
        if n == 0:
            return Batch([]), Batch([])
        dtype = _DTYPES[args.const("dtype")]
        targets = _floats(args["sample_rate"])
        resampling = bool((targets > 0).any())
        # with sample_rate the files decode to float32 for soxr, and convert to dtype afterwards (decode_sample)
        audio, rates = decode_files(data, sources, dtype="float32" if resampling else dtype,
                                    downmix=args.const("downmix"), start_time=args["start_time"],
                                    duration=args["duration"], out_of_bounds_policy=args.const("out_of_bounds_policy"),
                                    finite=args.const("finite"), pool=ctx.thread_pool,
                                    pin=self.pin_outputs and (dtype == "float32" or not resampling),
                                    device_id=self.spec.device_id)
        if resampling:
            audio, rates = resample_files(audio, rates.astype(np.float64), targets, sources, dtype=dtype,
                                          downmix=args.const("downmix"), quality=args.const("quality"),
                                          pool=ctx.thread_pool, pin=self.pin_outputs, device_id=self.spec.device_id)
        return audio, Batch.from_dense(torch.from_numpy(rates.astype(np.float32)))


# ------------------------------------------------------------------------------------------------ mixed
@dataclass
class _Item:
    """One sample of a mixed batch: a WAV payload window to copy (``fmt`` a PCM format), or samples decoded on the
    CPU (``fmt`` "native", ``decoded``)."""

    rate: float
    n_out: int                      # output frames (before resampling)
    channels: int                   # channels of the rows in staging (1 for decoded, downmixed samples)
    fmt: str                        # a key of SAMPLE_BYTES, or "native" for samples decoded on the CPU
    first: int = 0                  # WAV: byte offset of the window in the file
    nbytes: int = 0                 # bytes to copy (the rest of the row is silence)
    start: int = 0                  # WAV: the window's first frame (named by errors)
    decoded: torch.Tensor | None = None
    target: float = 0.0             # sample_rate: > 0 converts to float32, resamples on the device, converts back


@dataclass
class _Windows:
    """A batch's WAV headers and windows as arrays (:func:`_wav_windows`): ``wav`` marks the plain PCM / float WAVs
    (the others need the CPU decoder); ``fmt`` indexes WAV_FORMATS; ``first``/``nbytes`` place each payload window
    in its file; ``target`` is the sample_rate argument (0: none); ``found`` is :func:`batch_region` of the batch."""

    wav: np.ndarray
    rate: np.ndarray
    n_out: np.ndarray
    channels: np.ndarray
    fmt: np.ndarray
    first: np.ndarray
    nbytes: np.ndarray
    start: np.ndarray
    target: np.ndarray
    found: tuple | None

    def items(self) -> list[_Item | None]:
        """One :class:`_Item` per plain WAV, None for the others."""
        # one tolist() per column: indexing the arrays per sample made a NumPy scalar of every field
        columns = zip(self.wav.tolist(), self.rate.tolist(), self.n_out.tolist(), self.channels.tolist(),
                      self.fmt.tolist(), self.first.tolist(), self.nbytes.tolist(), self.start.tolist(),
                      self.target.tolist())
        return [_Item(r, o, c, WAV_FORMATS[f], fi, nb, st, target=t) if ok else None
                for ok, r, o, c, f, fi, nb, st, t in columns]


def _wav_windows(data, sources: list[str], start_time, duration, out_of_bounds_policy: str,
                 sample_rate, whole: bool = False) -> _Windows:
    """The WAV payload window of each sample (per-sample arguments as sequences), the batch's headers parsed in
    one call; a window that is wrong raises naming its file. ``whole``: every start_time and duration is 0 (the
    windows are the whole files, as :func:`plan_windows` would find)."""
    batch = data if isinstance(data, Batch) else Batch(list(data))
    found = batch_region(batch)
    with open_files(**_encoded(batch, sources, found), sources=sources, sndfile=False) as files:
        fmt, offset, align = files.payloads()
    wav = files.status == OK
    if whole:
        n_read = n_out = np.maximum(files.frames.astype(np.int64), 0)
        start = np.zeros_like(n_read)
    else:
        start, n_read, n_out, errors = plan_windows(files.rate, files.frames, _floats(start_time), _floats(duration),
                                                    out_of_bounds_policy, sources, valid=wav)
        _raise_first(errors, sources)
    return _Windows(wav, files.rate.astype(np.float64), n_out, files.channels, fmt, offset + start * align,
                    n_read * align, start, _floats(sample_rate), found)


def _row_bytes(frames: int, channels: int, fmt: str, dtype: torch.dtype) -> int:
    width = dtype.itemsize if fmt == "native" else SAMPLE_BYTES[fmt]
    return max(8, -(-frames * channels * width // 8) * 8)     # 8-byte aligned rows: any sample type views them


@dataclass
class _Plan:
    """A mixed batch's host work (:func:`plan_batch`): the output type and downmix, the WAV windows, the samples the
    CPU decoded; each sample's :class:`_Item` is made only when asked for (the usual batch never needs them)."""

    dtype: torch.dtype
    downmix: bool
    windows: _Windows | None = None
    decoded: dict[int, _Item] = field(default_factory=dict)   # samples decoded on the CPU, by index
    _items: list[_Item] | None = None

    @property
    def items(self) -> list[_Item]:
        if self._items is None:
            items = self.windows.items()
            for i, item in self.decoded.items():
                items[i] = item
            self._items = items
        return self._items


def plan_batch(data: Batch | list[torch.Tensor], sources: list[str], per: list[dict], pool=None,
               windows: _Windows | None = None) -> _Plan:
    """The host work of a mixed batch: its WAV headers parsed in one call and windows planned, and every other file
    decoded on the CPU (in ``pool``). A pipeline runs it in its CPU stage (``MixedAudioDecoder.prepare``), so that
    the device stage only moves and converts. ``windows``: the batch's WAV windows already parsed
    (:func:`_wav_windows`)."""
    dtype_name = {a["dtype"] for a in per}
    downmix = {bool(a["downmix"]) for a in per}
    if len(dtype_name) != 1 or len(downmix) != 1:
        raise ValueError("decoders.audio: dtype and downmix must be the same for every sample of a batch")
    dtype, downmix = getattr(torch, _DTYPES[dtype_name.pop()]), downmix.pop()
    if windows is None:
        windows = _wav_windows(data, sources, [a["start_time"] for a in per], [a["duration"] for a in per],
                               per[0]["out_of_bounds_policy"], [a["sample_rate"] for a in per])
    cpu = np.flatnonzero(~windows.wav).tolist()

    def decode_on_cpu(i):
        target = float(per[i]["sample_rate"] or 0.0)
        a = dict(per[i], sample_rate=0.0, dtype=types.FLOAT if target > 0 else per[i]["dtype"])
        x, rate = decode_sample(data[i], sources[i], **a)
        return _Item(float(rate), x.shape[0], 1 if x.dim() == 1 else x.shape[1], "native", nbytes=x.nbytes,
                     decoded=x, target=target)

    return _Plan(dtype, downmix, windows, dict(zip(cpu, _each(pool, decode_on_cpu, cpu, sources))))


#: Integer PCM formats a uniform batch converts straight from the reader's buffer (float formats take the general
#: path, which also runs their ``finite`` check).
_STRIDED_FORMATS = ("u8", "s16", "s32")
_STRIDED_CODES = frozenset(WAV_FORMATS.index(f) for f in _STRIDED_FORMATS)


def _strided_batch(data, plan: _Plan, device: torch.device) -> tuple[Batch, Batch] | None:
    """The usual batch converted with no row copies and no per-sample Python: every sample a plain integer PCM WAV
    of one format and channel count, read whole with no padding, its window at the same distance from the next
    one's in readers.file's page-locked buffer (files of one size). The buffer goes over in one DMA and one strided
    view of it is converted by one ``pcm_to_audio``: the audio ``(n, frames[, channels])`` and the rates. None
    when the batch is not like that."""
    w = plan.windows
    if w is None or plan.decoded or device.type != "cuda" or not len(w.wav):
        return None
    code, channels, frames = int(w.fmt[0]), int(w.channels[0]), int(w.n_out[0])
    if code not in _STRIDED_CODES or not w.wav.all() or w.target.any():
        return None
    fmt = WAV_FORMATS[code]
    if ((w.fmt != code).any() or (w.channels != channels).any() or (w.n_out != frames).any()
            or (w.nbytes != frames * channels * SAMPLE_BYTES[fmt]).any()):
        return None
    if w.found is None or not is_page_locked_buffer(w.found[0]):
        return None
    region, offsets, _ = w.found
    starts = offsets + w.first
    nbytes = int(w.nbytes[0])
    step = int(starts[1] - starts[0]) if len(starts) > 1 else nbytes
    width = SAMPLE_BYTES[fmt]
    if (len(starts) > 1 and not (np.diff(starts) == step).all()) or step % width or starts[0] % width or step < 1:
        return None
    on_device = region.to(device, non_blocking=True)
    raw = on_device.as_strided((len(starts), nbytes), (step, 1), int(starts[0]))
    audio = pcm_to_audio(raw, fmt, channels=channels, frames=frames, dtype=plan.dtype, downmix=plan.downmix)
    host_rates = torch.from_numpy(w.rate.astype(np.float32))
    return Batch.from_dense(audio), _MirroredBatch.mirror(host_rates.to(device, non_blocking=True), host_rates)


#: WAV sample formats stored as the output type itself, for each output type (no conversion: the stored bytes are
#: the samples). Float WAVs are left out: ``finite`` checks them.
_STORED_AS = {torch.int16: "s16", torch.int32: "s32"}


def _view_batch(plan: _Plan, device: torch.device) -> tuple[Batch, Batch] | None:
    """A batch of plain WAVs whose stored samples already are the output (16-bit files decoded to INT16, 32-bit to
    INT32; one channel, or no downmix), read whole, with no resampling, lying in readers.file's page-locked buffer:
    that buffer goes to the device in one DMA and the output is a packed batch of views of it (each file's payload
    where it lies), with no kernel at all, whatever the lengths. None when the batch is not like that."""
    w = plan.windows
    fmt = _STORED_AS.get(plan.dtype)
    if w is None or plan.decoded or device.type != "cuda" or not len(w.wav) or fmt is None:
        return None
    code = WAV_FORMATS.index(fmt)
    channels = int(w.channels[0])
    if not w.wav.all() or w.target.any() or (w.fmt != code).any() or (w.channels != channels).any() or \
            (plan.downmix and channels > 1):
        return None
    width = SAMPLE_BYTES[fmt]
    if (w.nbytes != w.n_out * channels * width).any() or w.found is None or not is_page_locked_buffer(w.found[0]):
        return None
    region, offsets, _ = w.found
    starts = offsets + w.first
    if (starts % width).any():
        return None
    on_device = region.to(device, non_blocking=True)
    samples = on_device[: on_device.numel() // width * width].view(plan.dtype)
    shapes = w.n_out[:, None] if plan.downmix else np.stack([w.n_out, w.channels], 1)
    host_rates = torch.from_numpy(w.rate.astype(np.float32))
    return (Batch.from_packed(samples, shapes, offsets=starts // width),
            _MirroredBatch.mirror(host_rates.to(device, non_blocking=True), host_rates))


def decode_batch(data: Batch | list[torch.Tensor], sources: list[str], per: list[dict], *, device: torch.device,
                 pool=None, pin: bool = False, direct: bool | None = None, defer=None,
                 plan: _Plan | None = None) -> tuple[Batch, Batch]:
    """The mixed decoder's work for one batch, on any ``device`` (the operator runs it on the GPU; tests on the CPU).

    WAV payloads are not decoded on the CPU: their headers are parsed (one call for the batch, with the rules of
    :func:`sluice.backends.audio.parse_wav`), each window's bytes are
    copied from the reader's buffer straight into one staging buffer (page-locked when ``pin``; the copies run in
    ``pool``, NumPy releasing the GIL), which goes to ``device`` in ONE copy, together with the sample rates; one
    :func:`pcm_to_audio` per (format, channels) group then converts the whole group there. Other files are
    decoded on the CPU (:func:`decode_sample`, without resampling) and travel in the same staging buffer. Samples
    with a ``sample_rate`` are converted to float32, resampled on ``device`` (:func:`resample_batch`, one call per
    rate pair) and converted to ``dtype`` as the CPU decoder does after soxr. ``plan``: the host part
    (:func:`plan_batch`), made already.

    When the files already lie in page-locked memory (readers.file reads a GPU pipeline's batch into one such
    buffer), nothing is staged on the host: that buffer goes to ``device`` in one DMA and each payload window is
    copied from there into its row (``direct``; None decides by that, True forces it, for tests); a batch of
    integer PCM files of one size is converted from a strided view of it, without the row copies, and files whose
    stored samples already are the output (16-bit WAVs decoded to INT16) are views of it (:func:`_view_batch`).

    With ``finite`` the float WAVs' windows are checked on ``device`` too; the check reads the result back, so it
    is handed to ``defer`` (``BatchContext.defer``: it runs before the batch reaches the caller), or run now."""
    n = len(data)
    if n == 0:
        return Batch([]), Batch([])
    plan = plan or plan_batch(data, sources, per, pool)
    if direct is None and pin:
        fast = _view_batch(plan, device) or _strided_batch(data, plan, device)
        if fast is not None:
            return fast
    items, dtype, downmix = plan.items, plan.dtype, plan.downmix
    rates = [item.target or item.rate for item in items]             # the rate output: after resampling

    # Staging layout: the rates (float32), then one (rows, row_bytes) block per (format, channels, type) group.
    groups: dict[tuple[str, int, torch.dtype], list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault((item.fmt, item.channels, torch.float32 if item.target > 0 else dtype), []).append(i)
    offset = -(-4 * n // 8) * 8
    blocks = []
    for (fmt, channels, work), idx in groups.items():
        frames = max(items[i].n_out for i in idx)
        row = _row_bytes(frames, channels, fmt, work)
        blocks.append((fmt, channels, work, idx, frames, row, offset))
        offset += row * len(idx)
    region = contiguous_bytes([data[i] for i in range(n)]) if direct or (pin and device.type == "cuda") else None
    if direct is None:
        direct = region is not None and is_page_locked_buffer(region)
    if direct:
        moved = _rows_on_device(data, items, blocks, rates, offset, device, region)
    else:
        staging = torch.empty(offset, dtype=torch.uint8, pin_memory=pin)
        host = staging.numpy()
        host[: 4 * n].view(np.float32)[:] = rates
        rows = {}
        for fmt, _, _, idx, _, row, start in blocks:
            block = host[start: start + row * len(idx)].reshape(len(idx), row)
            rows.update((i, (block[r], PAD_BYTE.get(fmt, 0))) for r, i in enumerate(idx))

        def gather(i):
            item, (dst, pad) = items[i], rows[i]
            dst[: item.nbytes] = _payload(item, data[i]).numpy()
            dst[item.nbytes:] = pad

        _each(pool, gather, list(range(n)), sources)
        moved = staging.to(device, non_blocking=True) if device.type != "cpu" else staging
    samples: list = [None] * n
    dense = None
    for fmt, channels, work, idx, frames, row, start in blocks:
        raw = moved[start: start + row * len(idx)].view(len(idx), row)
        out = pcm_to_audio(raw, fmt, channels=channels, frames=frames, dtype=work, downmix=downmix)
        dense = out if len(idx) == n else None
        for r, i in enumerate(idx):
            samples[i] = out[r, : items[i].n_out]
    check = _finite_check(moved, blocks, items, sources) if per[0].get("finite", True) else None
    if check is not None:
        (defer or (lambda c: c()))(check)
    if any(item.target > 0 for item in items):
        dense = _resample(samples, items, dtype, float(per[0]["quality"]))
    rate_batch = _MirroredBatch.mirror(moved[: 4 * n].view(torch.float32), torch.tensor(rates, dtype=torch.float32))
    if dense is not None and all(s.shape == dense.shape[1:] for s in samples):
        return Batch.from_dense(dense), rate_batch
    return Batch(samples), rate_batch


def _finite_check(moved: torch.Tensor, blocks: list, items: list[_Item], sources: list[str]):
    """``finite`` for the float WAVs of a mixed batch: per float group one reduction on the device finds each row's
    first frame holding NaN, an infinity or a value beyond FINITE_LIMIT; returns the check that reads those back
    and raises naming the first such sample (None when the batch has no float WAV)."""
    found = []
    for fmt, channels, _, idx, frames, row, start in blocks:
        if fmt not in ("f32", "f64"):
            continue
        raw = moved[start: start + row * len(idx)].view(len(idx), row)[:, : frames * channels * SAMPLE_BYTES[fmt]]
        bad = ~(raw.view(torch.float32 if fmt == "f32" else torch.float64).abs() <= FINITE_LIMIT)
        found.append((idx, torch.where(bad.any(dim=1), bad.to(torch.uint8).argmax(dim=1) // channels, -1)))
    if not found:
        return None

    def check() -> None:
        errors = {}
        for idx, first in found:
            for r, frame in enumerate(first.tolist()):
                if frame >= 0:
                    errors[idx[r]] = decode_error(sources[idx[r]], "not_finite", a=items[idx[r]].start + frame)
        _raise_first(errors, sources)

    return check


def _payload(item: _Item, sample: torch.Tensor) -> torch.Tensor:
    """The bytes that go into a sample's row: its WAV payload window (a view of the file's bytes), or the samples
    the CPU decoded."""
    if item.decoded is not None:
        return item.decoded.reshape(-1).view(torch.uint8)
    return sample[item.first: item.first + item.nbytes]


def _rows_on_device(data, items: list[_Item], blocks: list, rates: list[float], size: int,
                    device: torch.device, region: torch.Tensor | None) -> torch.Tensor:
    """The staging layout of :func:`decode_batch` built on ``device`` straight from the samples: a fill per group
    that has padding, then every payload window into its row. When the files lie back to back in ``region``
    (readers.file's page-locked batch buffer) that goes over in one DMA and the rows are cut from it on the device;
    otherwise each window is copied from where it lies. The copies are made in one call each: a copy per sample
    from Python gave the GIL up 64 times a batch, and the pipeline's other threads took it each time."""
    moved = torch.empty(size, dtype=torch.uint8, device=device)
    n = len(items)
    moved[: 4 * n].view(torch.float32).copy_(torch.tensor(rates, dtype=torch.float32))
    on_device = region.to(device, non_blocking=True) if region is not None else None
    base = region.data_ptr() if region is not None else 0
    near, far = ([], []), ([], [])          # (rows, sources) copied on the device / from the host
    for fmt, _, _, idx, _, row, start in blocks:
        block = moved[start: start + row * len(idx)].view(len(idx), row)
        if any(items[i].nbytes < row for i in idx):
            block.fill_(PAD_BYTE.get(fmt, 0))
        for r, i in enumerate(idx):
            item = items[i]
            if not item.nbytes:
                continue
            if on_device is not None and item.decoded is None:
                at = data[i].data_ptr() - base + item.first
                near[0].append(block[r, : item.nbytes])
                near[1].append(on_device[at: at + item.nbytes])
            else:
                far[0].append(block[r, : item.nbytes])
                far[1].append(_payload(item, data[i]))
    for rows, sources in (near, far):
        if rows:
            torch._foreach_copy_(rows, sources, non_blocking=True)
    return moved


def _resample(samples: list, items: list[_Item], dtype: torch.dtype, quality: float) -> torch.Tensor | None:
    """Resample (in place in ``samples``) every sample with a target rate: one :func:`resample_batch` per rate
    pair over the padded group; then convert to ``dtype`` as the CPU decoder does after soxr. Returns the
    padded output when one group covers the whole batch (a dense batch), else None."""
    groups: dict[tuple[float, float], list[int]] = {}
    for i, item in enumerate(items):
        if item.target > 0:
            groups.setdefault((item.rate, item.target), []).append(i)
    dense = None
    for (rate, target), idx in groups.items():
        x, shapes = pad_stack([samples[i] for i in idx])
        lengths = torch.tensor([s[0] for s in shapes], dtype=torch.int64)
        y, out_lengths = resample_batch(x, lengths, rate, target, quality) if rate != target else \
            (x, [s[0] for s in shapes])
        if dtype != torch.float32:
            info = torch.iinfo(dtype)
            y = torch.round(y.to(torch.float64) * info.max).clamp_(info.min, info.max).to(dtype)
        for k, i in enumerate(idx):
            samples[i] = y[k, : out_lengths[k]]
        dense = y if len(idx) == len(items) else None
    return dense


class _MirroredBatch(Batch):
    """A device batch that keeps the host values it was copied from: ``as_cpu()`` (``rate.cpu()`` in a graph, an
    argument input) returns them without waiting for the GPU."""

    __slots__ = ("_host",)

    @classmethod
    def mirror(cls, device_values: torch.Tensor, host_values: torch.Tensor) -> Batch:
        batch = cls.from_dense(device_values)
        batch._host = Batch.from_dense(host_values)
        return batch

    def as_cpu(self) -> Batch:
        return Batch.from_dense(self._host.dense, self.layout(), self.source_info)


@SCHEMA.operator_class("mixed")
class MixedAudioDecoder(Operator):
    """``decoders.audio(device="mixed")``: CPU bytes in, GPU audio out (see :func:`decode_batch`)."""

    prepare_movable = True  # host work only: headers, windows, CPU decodes into page-locked memory

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        self._pin = torch.cuda.is_available()

    def prepare(self, ctx: BatchContext, data: Batch, *, args: BatchArgs):
        """The batch's host work: the headers, windows and CPU decodes of :func:`plan_batch`; or, for a batch
        holding files libsndfile decodes (FLAC, Ogg, MP3 ...), the CPU decoder's batch path (:func:`decode_files`,
        the pipeline's threads, into page-locked memory), whose output the device stage copies over whole. The
        executor runs it in the CPU stage, so that the device stage only moves and converts the batch, or leaves it
        to ``run`` when the CPU stage is the slower one (``prepare_movable``)."""
        n = len(data)
        if n == 0:
            return None
        sources = ctx.source_info or [""] * n
        whole = all(args.is_const(a) and not args.const(a) for a in ("start_time", "duration"))
        windows = _wav_windows(data, sources, args["start_time"], args["duration"],
                               args.const("out_of_bounds_policy"), args["sample_rate"], whole=whole)
        if windows.wav.all():  # plain WAVs (the usual batch): nothing to decode on the CPU, no per-sample dicts
            return _Plan(getattr(torch, _DTYPES[args.const("dtype")]), args.const("downmix"), windows)
        if windows.target.any():
            return plan_batch(data, sources, args.samples(), ctx.thread_pool, windows=windows)
        return decode_files(data, sources, dtype=_DTYPES[args.const("dtype")], downmix=args.const("downmix"),
                            start_time=args["start_time"], duration=args["duration"],
                            out_of_bounds_policy=args.const("out_of_bounds_policy"), finite=args.const("finite"),
                            pool=ctx.thread_pool, pin=ctx.device.type == "cuda", device_id=self.spec.device_id)

    def run(self, ctx: BatchContext, data: Batch, *, args: BatchArgs) -> tuple[Batch, Batch]:
        n = len(data)
        sources = ctx.source_info or [""] * n
        prepared = ctx.prepared if ctx.prepared is not None or not n else self.prepare(ctx, data, args=args)
        if isinstance(prepared, tuple):  # decoded on the CPU (in the CPU stage, or just now): one copy over
            audio, rates = prepared
            host_rates = torch.from_numpy(rates.astype(np.float32))
            return (audio.to(ctx.device, non_blocking=True),
                    _MirroredBatch.mirror(host_rates.to(ctx.device, non_blocking=True), host_rates))
        return decode_batch(data, sources, args.samples(), device=ctx.device, pool=ctx.thread_pool,
                            pin=self._pin and ctx.device.type == "cuda", defer=ctx.defer, plan=prepared)
