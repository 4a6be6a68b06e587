"""The mixed audio decoder's batched WAV path (header parse, one staging buffer, one batched conversion) against
soundfile's decode, exactly, run on CPU tensors (``decode_batch(device=cpu)``); then the real mixed operator on the
GPU against the CPU operator (cuda-marked)."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import soundfile
import torch
from _audio_signals import encode, sweep, tones

from sluice import types
from sluice.backends.audio import decode_audio, parse_wav, resample_soxr
from sluice.ops.audio.decoder import decode_batch, decode_sample
from sluice.pipeline.batch import Batch

RATE = 8000
SUBTYPES = ["PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE"]
DTYPES = {"float32": types.FLOAT, "int16": types.INT16, "int32": types.INT32}


def signal(n: int, channels: int, seed: int = 0) -> np.ndarray:
    x = sweep(n, rate=RATE, amp=0.9, seed=seed)
    x[::97] = 1.0            # full scale, both signs, and values that round at half steps
    x[1::97] = -1.0
    cols = [x, -0.6 * x, 0.3 * x + 0.1][:channels]
    return np.stack(cols, axis=1) if channels > 1 else x


def args(dtype="float32", downmix=False, start_time=0.0, duration=0.0, policy="error", sample_rate=0.0):
    return {"dtype": DTYPES[dtype], "downmix": downmix, "sample_rate": sample_rate, "quality": 50.0,
            "start_time": start_time, "duration": duration, "out_of_bounds_policy": policy}


def as_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)


def mixed_on_cpu(files: list[bytes], per: list[dict]):
    """The mixed decoder's batch work on the CPU, three ways: staged on the host, rows copied straight from the
    files where they lie, and rows cut from the batch's one buffer moved whole (as from readers.file's
    page-locked batch buffer); all must agree exactly."""
    sources = [f"f{i}.wav" for i in range(len(files))]
    separate = [as_tensor(f) for f in files]
    audio, rate = decode_batch(separate, sources, per, device=torch.device("cpu"))
    buffer = torch.frombuffer(bytearray(b"".join(files) or b"\0"), dtype=torch.uint8)
    ends = np.cumsum([0] + [len(f) for f in files]).tolist()
    views = [buffer[a:b] for a, b in zip(ends[:-1], ends[1:])]
    for data in (separate, views):
        direct, direct_rate = decode_batch(data, sources, per, device=torch.device("cpu"), direct=True)
        assert [float(r) for r in direct_rate] == [float(r) for r in rate]
        for a, b in zip(audio, direct):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    return audio, rate


def reference(data: bytes, a: dict) -> np.ndarray:
    return decode_audio(data, dtype={v: k for k, v in DTYPES.items()}[a["dtype"]], downmix=a["downmix"],
                        start_time=a["start_time"], duration=a["duration"] or None,
                        out_of_bounds_policy=a["out_of_bounds_policy"])[0]


@pytest.mark.parametrize("fmt", ["WAV", "WAVEX"])
@pytest.mark.parametrize("subtype", SUBTYPES)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_every_subtype_equals_soundfile(fmt, subtype, dtype):
    files = [encode(signal(700, ch, seed=ch), RATE, fmt, subtype) for ch in (1, 2, 3)]
    for downmix in (False, True):
        per = [args(dtype, downmix)] * 3
        assert all(parse_wav(f) is not None for f in files)          # the batched path, not the CPU fallback
        audio, rate = mixed_on_cpu(files, per)
        assert rate.as_tensor().tolist() == [RATE] * 3
        for i, f in enumerate(files):
            ref, _ = soundfile.read(io.BytesIO(f), dtype=dtype, always_2d=True)
            if downmix:
                ref = reference(f, per[i])
            assert audio[i].dtype == getattr(torch, dtype)
            np.testing.assert_array_equal(audio[i].numpy(), ref)


@pytest.mark.parametrize("subtype", ["PCM_U8", "PCM_16", "PCM_24", "FLOAT"])
def test_windows_equal_cpu_decoder(subtype):
    files = [encode(signal(RATE, 2, seed=s), RATE, "WAV", subtype) for s in range(4)]
    cases = [
        [args(start_time=0.25, duration=0.5)] * 4,                                        # dense, same window
        [args(start_time=t, duration=d) for t, d in ((0.0, 0.1), (0.013, 0.2), (0.6071, 0.3), (0.999, 0.001))],
        [args(start_time=t, duration=0.5, policy="pad") for t in (0.0, 0.7, 0.9, 1.2)],  # zero-filled tails
        [args(start_time=t, duration=0.5, policy="trim_to_shape") for t in (0.0, 0.7, 0.9, 1.2)],
        [args("int16", True, start_time=0.75)] * 4,                                         # to the end, downmix
    ]
    for per in cases:
        audio, _ = mixed_on_cpu(files, per)
        for i, f in enumerate(files):
            np.testing.assert_array_equal(audio[i].numpy(), reference(f, per[i]))


def test_same_windows_give_a_dense_batch_ragged_ones_do_not():
    files = [encode(signal(RATE, 1, seed=s), RATE, "WAV", "PCM_16") for s in range(3)]
    dense, _ = mixed_on_cpu(files, [args(start_time=0.1, duration=0.2)] * 3)
    assert dense.dense is not None and dense.dense.shape == (3, 1600, 1)
    ragged, _ = mixed_on_cpu(files, [args(start_time=0.1, duration=d) for d in (0.1, 0.2, 0.3)])
    assert ragged.dense is None and ragged.shape() == [(800, 1), (1600, 1), (2400, 1)]


def test_other_formats_and_resampling_fall_back_to_the_cpu_decoder():
    flac = encode(signal(RATE, 2), RATE, "FLAC", "PCM_16")
    wav = encode(signal(RATE, 2, seed=1), RATE, "WAV", "PCM_24")
    assert parse_wav(flac) is None
    per = [args(downmix=True), args(downmix=True)]
    audio, rate = mixed_on_cpu([flac, wav], per)
    for i, f in enumerate([flac, wav]):
        np.testing.assert_array_equal(audio[i].numpy(), reference(f, per[i]))
    resampled, rate = mixed_on_cpu([wav, wav], [args(sample_rate=4000.0)] * 2)
    assert rate.as_tensor().tolist() == [4000.0, 4000.0] and resampled[0].shape == (4000, 2)


@pytest.mark.parametrize("dtype", ["float32", "int16"])
def test_sample_rate_resamples_on_the_device_like_soxr(dtype):
    """sample_rate: the mixed decoder resamples with the GPU's windowed sinc (audio_resample's kernel), the CPU
    decoder with soxr; they agree to 1e-3 of full scale away from the edges, as the kernel's soxr test states."""
    x = tones(RATE, RATE, freqs=(440.0, 1200.0, 2500.0), amps=(0.4, 0.3, 0.1))
    files = [encode(np.stack([x, -x], 1), RATE, "WAV", "PCM_16"), encode(x, RATE, "FLAC", "PCM_16"),
             encode(x, RATE, "WAV", "FLOAT")]
    per = [args(dtype, downmix=True, sample_rate=6000.0)] * 3
    audio, rate = mixed_on_cpu(files, per)
    assert rate.as_tensor().tolist() == [6000.0] * 3
    scale = 1.0 if dtype == "float32" else 32767.0
    for i, f in enumerate(files):
        ref, _ = decode_audio(f, dtype="float32", downmix=True)
        ref = resample_soxr(ref, RATE, 6000.0) * scale
        got = audio[i].numpy().astype(np.float64)
        assert got.shape == ref.shape == (6000,) and audio[i].dtype == getattr(torch, dtype)
        assert np.abs(got - ref)[600:-600].max() <= 1e-3 * scale + 1
    # sample_rate equal to the file's: no resampling, but the same float round trip as the CPU decoder
    same, _ = mixed_on_cpu(files[:1], [args("int16", downmix=True, sample_rate=float(RATE))])
    np.testing.assert_array_equal(same[0].numpy(), decode_sample_ref(files[0], "int16", float(RATE)))


def decode_sample_ref(data: bytes, dtype: str, rate: float) -> np.ndarray:
    out, _ = decode_sample(as_tensor(data), "", **args(dtype, downmix=True, sample_rate=rate))
    return out.numpy()


def test_odd_headers_fall_back_and_keep_the_cpu_errors():
    good = encode(signal(RATE, 1), RATE, "WAV", "PCM_16")
    truncated = good[: len(good) // 2]
    with pytest.raises(Exception, match=r"f1\.wav.*truncated") as info:
        mixed_on_cpu([good, truncated], [args()] * 2)
    assert getattr(info.value, "index", 1) == 1
    with pytest.raises(Exception, match=r"f0\.wav.*empty"):
        mixed_on_cpu([b"", good], [args()] * 2)
    with pytest.raises(Exception, match=r"f1\.wav"):
        mixed_on_cpu([good, b"RIFF\x00\x00\x00\x00WAVEjunkjunkjunk" + bytes(40)], [args()] * 2)
    with pytest.raises(Exception, match=r"f0\.wav.*reaches past its end"):
        mixed_on_cpu([good], [args(start_time=0.9, duration=0.5)])


def test_parse_wav_walks_chunks_and_rejects_what_libsndfile_should_judge():
    base = encode(signal(101, 2), RATE, "WAV", "PCM_16")                    # odd frame count
    info = parse_wav(base)
    assert (info.samplerate, info.channels, info.frames, info.sample_format, info.block_align) == \
        (RATE, 2, 101, "s16", 4)
    # a LIST chunk of odd length (padded) before the data chunk moves the payload
    fmt_end = 12 + 8 + struct.unpack_from("<I", base, 16)[0]
    extra = b"LIST" + struct.pack("<I", 5) + b"abcde\x00"
    moved = base[:fmt_end] + extra + base[fmt_end:]
    moved = moved[:4] + struct.pack("<I", len(moved) - 8) + moved[8:]
    assert parse_wav(moved).data_offset == info.data_offset + len(extra)
    audio, _ = mixed_on_cpu([moved], [args("int16")])
    np.testing.assert_array_equal(audio[0].numpy(), soundfile.read(io.BytesIO(moved), dtype="int16")[0])
    # a data chunk that ends inside a frame (libsndfile drops the partial frame), and a chunk after the data
    size_at = info.data_offset - 4
    partial = base[:size_at] + struct.pack("<I", struct.unpack_from("<I", base, size_at)[0] - 2) + base[size_at + 4:]
    trailing = base + b"LIST" + struct.pack("<I", 4) + b"abcd"
    for f in (partial, trailing):
        audio, _ = mixed_on_cpu([f], [args("int32")])
        np.testing.assert_array_equal(audio[0].numpy(), soundfile.read(io.BytesIO(f), dtype="int32", always_2d=True)[0])
    assert parse_wav(partial).frames == 100
    assert parse_wav(base[:-10]) is None                                      # data chunk cut short
    assert parse_wav(encode(signal(100, 1), RATE, "WAV", "ULAW")) is None      # a compressed WAV codec
    assert parse_wav(b"RIFX" + base[4:]) is None


def test_whole_file_windows_are_those_plan_windows_finds():
    """The operator's shortcut for batches with no start_time / duration (the usual one) gives every window field
    plan_windows gives, for WAVs of every layout, an empty one, and files the CPU decoder must take."""
    from sluice.ops.audio.decoder import _wav_windows

    files = [encode(signal(RATE + 7 * i, 1 + i % 3, seed=i), RATE, "WAV", sub)
             for i, sub in enumerate(["PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE"])]
    files += [encode(np.zeros((0, 2)), RATE, "WAV", "PCM_16"), encode(signal(RATE, 2), RATE, "FLAC", "PCM_16"),
              encode(signal(100, 1), RATE, "WAV", "ULAW")]
    sources = [f"f{i}" for i in range(len(files))]
    zeros = [0.0] * len(files)
    planned = _wav_windows([as_tensor(f) for f in files], sources, zeros, zeros, "error", zeros)
    whole = _wav_windows([as_tensor(f) for f in files], sources, zeros, zeros, "error", zeros, whole=True)
    assert planned.wav.tolist()[:6] == [True] * 6 and planned.wav.tolist()[7:] == [False, False]
    for name in ("wav", "rate", "n_out", "channels", "first", "nbytes", "start", "target"):
        a, b = getattr(planned, name), getattr(whole, name)
        assert a.dtype == b.dtype and np.array_equal(a[planned.wav], b[planned.wav]), name
    assert planned.items() == whole.items()


def test_empty_batch_and_empty_file():
    audio, rate = mixed_on_cpu([], [])
    assert len(audio) == 0 and len(rate) == 0
    empty = encode(np.zeros((0, 2)), RATE, "WAV", "PCM_16")
    audio, _ = mixed_on_cpu([empty], [args()])
    assert audio[0].shape == (0, 2)


# ---------------------------------------------------------------------------------------------------- on the GPU
def _pipeline(files, device, **kw):
    from sluice import fn, pipeline_def

    @pipeline_def(batch_size=len(files), num_threads=2, device_id=0, seed=1)
    def pipe():
        data = fn.external_source(source=lambda: [np.frombuffer(f, np.uint8) for f in files])
        audio, rate = fn.decoders.audio(data, device=device, **kw)
        return audio, rate.cpu() if device == "mixed" else rate

    return pipe()


@pytest.mark.cuda
@pytest.mark.parametrize("subtype", SUBTYPES)
def test_mixed_operator_equals_cpu_operator_on_gpu(subtype):
    files = [encode(signal(RATE, ch, seed=ch), RATE, "WAV", subtype) for ch in (1, 2, 2, 1)]
    files[2] = encode(signal(RATE, 2, seed=9), RATE, "FLAC", "PCM_16")       # a CPU-decoded sample among them
    for kw in ({"dtype": types.FLOAT}, {"dtype": types.INT16, "downmix": True},
               {"dtype": types.INT32, "downmix": True, "start_time": 0.3, "duration": 0.9,
                "out_of_bounds_policy": "pad"}):
        gpu_audio, gpu_rate = _pipeline(files, "mixed", **kw).run()
        cpu_audio, cpu_rate = _pipeline(files, "cpu", **kw).run()
        assert gpu_audio.device == "gpu"
        for i in range(len(files)):
            torch.testing.assert_close(gpu_audio[i].cpu(), cpu_audio[i], rtol=0, atol=0)
        assert gpu_rate.as_tensor().tolist() == cpu_rate.as_tensor().tolist()


@pytest.mark.cuda
def test_mixed_decoder_reading_from_the_readers_page_locked_buffer_equals_cpu(tmp_path):
    """readers.file puts a GPU pipeline's batch in one page-locked buffer; the mixed decoder then moves it in one
    DMA and cuts the rows out on the GPU (a FLAC among the WAVs is decoded on the CPU and copied from there)."""
    from sluice import fn, pipeline_def

    subtypes = ["PCM_16", "PCM_24", "FLOAT", "PCM_U8", "PCM_32"]
    for k, subtype in enumerate(subtypes):
        (tmp_path / f"{k}.wav").write_bytes(encode(signal(RATE, 1 + k % 2, seed=k), RATE, "WAV", subtype))
    (tmp_path / "5.flac").write_bytes(encode(signal(RATE, 2, seed=7), RATE, "FLAC", "PCM_16"))
    names = sorted(q.name for q in tmp_path.iterdir())

    def build(device):
        @pipeline_def(batch_size=len(names), num_threads=2, device_id=0, seed=1)
        def pipe():
            data, _ = fn.readers.file(file_root=str(tmp_path), files=names)
            audio, rate = fn.decoders.audio(data, device=device, dtype=types.FLOAT, downmix=True)
            return audio, rate.cpu() if device == "mixed" else rate
        return pipe()

    gpu_audio, gpu_rate = build("mixed").run()
    cpu_audio, cpu_rate = build("cpu").run()
    for i in range(len(names)):
        torch.testing.assert_close(gpu_audio[i].cpu(), cpu_audio[i], rtol=0, atol=0)
    assert gpu_rate.as_tensor().tolist() == cpu_rate.as_tensor().tolist()


@pytest.mark.cuda
def test_mixed_resampling_on_gpu_equals_the_same_computation_on_cpu_tensors():
    files = [encode(signal(RATE, 2, seed=s), RATE, "WAV", "PCM_24") for s in range(3)]
    per = [args("float32", downmix=True, sample_rate=16000.0)] * 3
    on_cpu, _ = mixed_on_cpu(files, per)
    on_gpu, rate = decode_batch([as_tensor(f) for f in files], ["a", "b", "c"], per, device=torch.device("cuda", 0),
                                pin=True)
    assert on_gpu.dense is not None and on_gpu.dense.is_cuda and rate.as_cpu().as_tensor().tolist() == [16000.0] * 3
    torch.testing.assert_close(on_gpu.dense.cpu(), on_cpu.as_tensor(), rtol=0, atol=1e-4)  # float32 sums


@pytest.mark.cuda
def test_mixed_operator_uniform_batch_is_dense_and_feeds_resample():
    from sluice import fn, pipeline_def

    files = [encode(signal(RATE, 1, seed=s), RATE, "WAV", "PCM_16") for s in range(4)]

    @pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=1)
    def pipe():
        data = fn.external_source(source=lambda: [np.frombuffer(f, np.uint8) for f in files])
        audio, rate = fn.decoders.audio(data, device="mixed", downmix=True)
        return audio, fn.audio_resample(audio, in_rate=rate.cpu(), out_rate=4000.0)

    audio, resampled = pipe().run()
    assert audio.dense is not None and audio.dense.is_cuda and resampled.shape() == [(4000,)] * 4
    assert isinstance(audio, Batch)


def test_mixed_operator_class_on_cpu_tensors_and_rate_host_copy():
    """The registered mixed operator, run as the executor runs it but on CPU tensors; ``rate.cpu()``'s transfer
    kernel returns the rates' host copy."""
    from sluice.pipeline.pool import ThreadPool

    from sluice.ops.audio.decoder import SCHEMA
    from sluice.schema import BatchArgs, BatchContext, OpSpec, _finish_outputs, get_schema

    files = [encode(signal(RATE, 2, seed=s), RATE, "WAV", "PCM_16") for s in range(3)]
    const = {name: a.default for name, a in SCHEMA.args.items()}
    const.update(downmix=True, dtype=types.INT16)
    spec = OpSpec(SCHEMA, "mixed", const, "dec", 3, 2, None, 0)
    op = SCHEMA.kernel_for("mixed")(spec)
    data = Batch([as_tensor(f) for f in files], "", [f"f{i}.wav" for i in range(3)])
    with ThreadPool(2) as pool:
        ctx = BatchContext("decoders.audio", 3, data.source_info, [""], torch.device("cpu"), pool)
        audio, rate = _finish_outputs(SCHEMA, spec, op.run(ctx, data, args=BatchArgs(const, {}, 3)), [data])
    assert audio.layout() == "t" and audio.dense is not None
    for i, f in enumerate(files):
        np.testing.assert_array_equal(audio[i].numpy(), decode_audio(f, dtype="int16", downmix=True)[0])
    transfer = get_schema("_transfer").kernels["cpu"].kernel
    host = transfer(ctx, rate, args=BatchArgs({"to": "cpu"}, {}, 3))
    assert host.as_tensor().tolist() == [RATE] * 3 and host.device == "cpu"
