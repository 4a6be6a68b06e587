"""decoders.audio(sample_rate=...) on the CPU decodes the batch whole (the compiled core in the pipeline's threads)
and resamples only the files whose rate differs, with libsoxr: the result equals the one-file-at-a-time decoder
(decode_sample: soundfile + soxr, the reference) for every file of a batch of mixed rates, channel counts, formats
and lengths, in every output type; files already at the target rate are not resampled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sluice import fn, pipeline_def, types
from sluice.ops.audio.decoder import decode_sample

from _audio_signals import encode, sweep


def mixed_files() -> list[tuple[str, bytes]]:
    out = []
    for i, (rate, channels, fmt, subtype) in enumerate([(16000, 1, "WAV", "PCM_16"), (44100, 2, "WAV", "PCM_16"),
                                                         (8000, 1, "FLAC", "PCM_16"), (22050, 1, "WAV", "FLOAT"),
                                                         (16000, 2, "FLAC", "PCM_24"), (48000, 1, "WAV", "PCM_U8")]):
        x = sweep(rate // 4 + 997 * i, rate=rate, seed=i)
        x = np.stack([x, -0.5 * x], axis=1) if channels == 2 else x
        out.append((f"{i}.{fmt.lower()}", encode(x, rate, fmt, subtype)))
    return out


@pytest.mark.parametrize("dtype,downmix", [(types.FLOAT, True), (types.INT16, True), (types.FLOAT, False),
                                           (types.INT32, False)])
def test_batch_equals_each_file_decoded_and_resampled_alone(tmp_path, dtype, downmix):
    files = mixed_files()
    for name, data in files:
        (tmp_path / name).write_bytes(data)
    paths = [str(tmp_path / name) for name, _ in files]

    @pipeline_def(batch_size=len(paths), num_threads=3, device_id=None, seed=1)
    def pipe():
        data, _ = fn.readers.file(files=paths)
        return fn.decoders.audio(data, dtype=dtype, downmix=downmix, sample_rate=16000.0, quality=60.0)

    with pipe() as p:
        audio, rate = p.run()
    assert rate.dense is not None and rate.dense.tolist() == [16000.0] * len(paths)
    for i, ((name, data), got) in enumerate(zip(files, audio)):
        want, want_rate = decode_sample(torch.frombuffer(bytearray(data), dtype=torch.uint8), name, dtype=dtype,
                                        downmix=downmix, sample_rate=16000.0, quality=60.0, start_time=0.0,
                                        duration=0.0, out_of_bounds_policy="error")
        assert float(want_rate) == 16000.0
        assert got.dtype == want.dtype and got.shape == want.shape, name
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=name)


def test_files_at_the_target_rate_keep_the_decoded_buffer(tmp_path):
    """Nothing to resample and float32 asked for: the decoder's packed buffer is the output (no second copy)."""
    paths = []
    for i, n in enumerate((4000, 9000, 100)):
        (tmp_path / f"{i}.wav").write_bytes(encode(sweep(n, seed=i), 16000, "WAV", "PCM_16"))
        paths.append(str(tmp_path / f"{i}.wav"))

    @pipeline_def(batch_size=3, num_threads=2, device_id=None)
    def pipe():
        data, _ = fn.readers.file(files=paths)
        return fn.decoders.audio(data, dtype=types.FLOAT, downmix=True, sample_rate=16000.0)

    with pipe() as p:
        audio, rate = p.run()
    assert audio.packed is not None and audio.shape() == [(4000,), (9000,), (100,)]
    assert rate.dense.tolist() == [16000.0] * 3


@pytest.mark.cuda
def test_mixed_decoder_hands_ragged_16_bit_wavs_as_views_of_the_read_buffer(tmp_path):
    """Whisper's input: 16-bit mono WAVs of many lengths decoded to INT16 on 'mixed' are the stored samples, views
    of readers.file's buffer on the GPU (no conversion kernel), equal to soundfile's int16 decode."""
    import soundfile

    paths = []
    for i, n in enumerate((16000, 3001, 44100, 1)):
        (tmp_path / f"{i}.wav").write_bytes(encode(sweep(n, seed=i), 16000, "WAV", "PCM_16"))
        paths.append(str(tmp_path / f"{i}.wav"))

    @pipeline_def(batch_size=4, num_threads=2, device_id=0)
    def pipe():
        data, _ = fn.readers.file(files=paths)
        return fn.decoders.audio(data, dtype=types.INT16, downmix=True, device="mixed")

    with pipe() as p:
        audio, rate = p.run()
    assert audio.storage == "packed" and audio.device == "gpu"
    for got, path in zip(audio, paths):
        want, _ = soundfile.read(path, dtype="int16")
        np.testing.assert_array_equal(got.cpu().numpy(), want)
