"""decoders.audio on the CPU decodes a batch in chunks across the pipeline's threads: the same output with 1, 2 and
4 threads, with the compiled core and without it, equal to soundfile's decode; bad headers and corrupt float
samples fail naming the operator and the file (CPU and mixed decoders)."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import soundfile
import torch

from sluice import fn, native, pipeline_def, types
from sluice.backends.audio import decode_audio
from sluice.errors import PipelineError
from sluice.ops.audio.decoder import decode_batch

from _audio_signals import encode, sweep

RATE = 8000


def clips() -> dict[str, bytes]:
    """Files of several formats, channel counts and lengths (two of one shape), named in read order."""
    x = sweep(RATE, rate=RATE, amp=0.8)
    stereo = np.stack([x, -0.4 * x], axis=1)
    return {"0.wav": encode(stereo, RATE, "WAV", "PCM_16"), "1.flac": encode(stereo[:6000], RATE, "FLAC", "PCM_24"),
            "2.wav": encode(x[:5000], RATE, "WAV", "FLOAT"), "3.ogg": encode(x, RATE, "OGG", "VORBIS"),
            "4.wav": encode(stereo[::-1].copy(), RATE, "WAV", "PCM_U8"), "5.wav": encode(x[:7000], RATE, "WAV",
                                                                                        "PCM_24")}


def decoded(root, threads: int, batch: int, **kw):
    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=1)
    def pipe():
        data, _ = fn.readers.file(file_root=str(root))
        return fn.decoders.audio(data, **kw)

    p = pipe()
    audio, rate = p.run()
    p.close()
    return audio, rate


@pytest.mark.parametrize("use_core", [True, False])
def test_threads_give_the_same_output_as_soundfile(tmp_path, use_core):
    if use_core and not native.available():
        pytest.skip("the compiled core is not built")
    files = clips()
    (tmp_path / "c").mkdir()
    for name, data in files.items():
        (tmp_path / "c" / name).write_bytes(data)
    cases = [({"dtype": types.INT16}, False),                                             # ragged
             ({"dtype": types.FLOAT, "downmix": True, "start_time": 0.1, "duration": 0.5}, True),
             ({"dtype": types.INT32, "downmix": True, "duration": 0.8, "out_of_bounds_policy": "pad"}, True)]
    names = ["int16", "float32", "int32"]
    with native.fallback() if not use_core else contextlib.nullcontext():
        for (kw, dense), dtype in zip(cases, names):
            outputs = [decoded(tmp_path, threads, len(files), **kw) for threads in (1, 2, 4)]
            for audio, rate in outputs:
                assert audio.is_dense_tensor() == dense and (audio.dense is not None) == dense
                assert (audio.packed is not None) != dense            # ragged: samples back to back in one buffer
                assert rate.as_tensor().tolist() == [RATE] * len(files)
                for i, data in enumerate(files.values()):
                    ref, _ = decode_audio(data, dtype=dtype, downmix=kw.get("downmix", False),
                                          start_time=kw.get("start_time", 0.0), duration=kw.get("duration"),
                                          out_of_bounds_policy=kw.get("out_of_bounds_policy", "error"))
                    assert audio[i].dtype == getattr(torch, dtype)
                    np.testing.assert_array_equal(audio[i].numpy(), ref)
            if not dense:                                     # and the reference is soundfile's
                full, _ = soundfile.read(io.BytesIO(files["1.flac"]), dtype="int16", always_2d=True)
                np.testing.assert_array_equal(outputs[2][0][1].numpy(), full)


def bad_float_wav() -> bytes:
    x = 0.5 * sweep(400, rate=RATE)
    x[123] = np.nan
    x[200] = 4.5e37                                           # a flipped exponent bit
    buf = io.BytesIO()
    soundfile.write(buf, x.astype(np.float32), RATE, format="WAV", subtype="FLOAT")
    return buf.getvalue()


def test_corrupt_headers_and_samples_name_the_operator_and_the_file(tmp_path):
    good = encode(sweep(400, rate=RATE), RATE, "WAV", "PCM_16")
    rate_flipped = bytearray(good)
    rate_flipped[24:28] = (2_000_000_000).to_bytes(4, "little")
    for name, data, match in (("nan.wav", bad_float_wav(), r"nan\.wav.*frame 123 holds a NaN"),
                              ("rate.wav", bytes(rate_flipped), r"rate\.wav.*2000000000 Hz")):
        folder = tmp_path / name.split(".")[0]
        folder.mkdir()
        (folder / "a.wav").write_bytes(good)
        (folder / name).write_bytes(data)
        with pytest.raises(PipelineError, match=match) as info:
            decoded(folder, 2, 2)
        assert "decoders.audio" in str(info.value)
    audio, _ = decoded(tmp_path / "nan", 2, 2, finite=False)       # kept as they are
    ref, _ = soundfile.read(io.BytesIO(bad_float_wav()), dtype="float32", always_2d=True)
    np.testing.assert_array_equal(audio[1].numpy(), ref)


@pytest.mark.parametrize("use_core", [True, False])
def test_damaged_ogg_names_the_operator_and_the_file(tmp_path, use_core):
    """An Ogg/Vorbis file cut at 99 % or with flipped bits used to decode silently short (or to nothing)."""
    if use_core and not native.available():
        pytest.skip("the compiled core is not built")
    ogg = encode(sweep(2 * RATE, rate=RATE), RATE, "OGG", "VORBIS")
    flipped = bytearray(ogg)
    for pos in range(len(ogg) // 2, len(ogg), len(ogg) // 16):
        flipped[pos] ^= 0x10
    for name, data, match in (("cut.ogg", ogg[: len(ogg) * 99 // 100], r"cut\.ogg.*Ogg stream is truncated"),
                              ("flipped.ogg", bytes(flipped), r"flipped\.ogg.*Ogg page at byte \d+ is damaged")):
        folder = tmp_path / f"{name}-{use_core}"
        folder.mkdir()
        (folder / "a.ogg").write_bytes(ogg)
        (folder / name).write_bytes(data)
        with native.fallback() if not use_core else contextlib.nullcontext():
            with pytest.raises(PipelineError, match=match) as info:
                decoded(folder, 2, 2)
        assert "decoders.audio" in str(info.value)


def test_mixed_decoder_checks_float_wavs_too():
    """The mixed decoder's batched WAV path (run on CPU tensors): finite refuses the corrupt float WAV naming it;
    finite=False keeps its values, read as integers with libsndfile's clipping."""
    files = [encode(sweep(400, rate=RATE), RATE, "WAV", "PCM_16"), bad_float_wav()]
    data = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in files]
    args = {"dtype": types.INT16, "downmix": False, "sample_rate": 0.0, "quality": 50.0, "start_time": 0.0,
            "duration": 0.0, "out_of_bounds_policy": "error", "finite": True}
    with pytest.raises(Exception, match=r"b\.wav.*frame 123") as info:
        decode_batch(data, ["a.wav", "b.wav"], [args] * 2, device=torch.device("cpu"))
    assert getattr(info.value, "index", None) == 1
    audio, _ = decode_batch(data, ["a.wav", "b.wav"], [dict(args, finite=False)] * 2, device=torch.device("cpu"))
    ref, _ = soundfile.read(io.BytesIO(files[1]), dtype="int16", always_2d=True)
    np.testing.assert_array_equal(audio[1].numpy(), ref)
    assert ref[200, 0] == 32767                               # clipped, not wrapped around
    flipped = bytearray(files[0])
    flipped[24:28] = (2_000_000_000).to_bytes(4, "little")   # left to libsndfile, then refused
    data[0] = torch.frombuffer(flipped, dtype=torch.uint8)
    with pytest.raises(Exception, match=r"a\.wav.*2000000000 Hz"):
        decode_batch(data, ["a.wav", "b.wav"], [dict(args, finite=False)] * 2, device=torch.device("cpu"))


@pytest.mark.cuda
def test_gpu_pipeline_decodes_into_page_locked_memory_and_moves_it_whole(tmp_path):
    from sluice.pipeline.batch import is_page_locked

    (tmp_path / "c").mkdir()
    for i in range(4):
        (tmp_path / "c" / f"{i}.wav").write_bytes(encode(sweep(RATE, rate=RATE, seed=i), RATE, "WAV", "PCM_16"))

    @pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=1)
    def pipe():
        data, _ = fn.readers.file(file_root=str(tmp_path))
        audio, _ = fn.decoders.audio(data, dtype=types.FLOAT, downmix=True)
        return audio, audio.gpu()

    p = pipe()
    for _ in range(3):                                        # batches reuse the allocator's page-locked blocks
        host, dev = p.run()
        assert host.dense is not None and is_page_locked(host.dense)
        assert dev.dense is not None and dev.dense.is_cuda
        torch.testing.assert_close(dev.dense.cpu(), host.dense, rtol=0, atol=0)
    p.close()


def test_files_held_in_one_tensor_dense_or_packed():
    """A dense batch of encoded files (files of one size) or a packed one (readers.file's, back to back) goes to
    the core as one buffer."""
    from sluice.ops.audio.decoder import decode_files
    from sluice.pipeline.batch import Batch

    files = [encode(sweep(1000, rate=RATE, seed=s), RATE, "WAV", "PCM_24") for s in range(3)]
    dense = Batch.from_dense(torch.from_numpy(np.stack([np.frombuffer(f, np.uint8) for f in files])))
    files.append(encode(sweep(900, rate=RATE), RATE, "FLAC", "PCM_16"))
    flat = torch.frombuffer(bytearray(b"".join(files)), dtype=torch.uint8)
    packed = Batch.from_packed(flat, np.array([[len(f)] for f in files]))
    for batch in (dense, packed):
        n = len(batch)
        audio, rates = decode_files(batch, ["a", "b", "c", "d"][:n], dtype="int32", downmix=False,
                                    start_time=[0.1] * n, duration=[0.0] * n)
        assert rates.tolist() == [RATE] * n and (audio.dense is not None) == (n == 3)
        for i, f in enumerate(files[:n]):
            np.testing.assert_array_equal(audio[i].numpy(), decode_audio(f, dtype="int32", start_time=0.1)[0])
