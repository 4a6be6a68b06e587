"""Where a movable prepare step runs (sluice.pipeline.balance.PrepareBalance): moved to the device stage only when the
slower stage gains enough, back when the device stage becomes the slower one; and on the GPU the same values
wherever the audio decoder's prepare step runs."""

import numpy as np
import pytest
import soundfile as sf
import torch

from sluice import fn, pipeline_def, types
from sluice.pipeline.balance import PrepareBalance


def _feed(b, cpu, device, prepare, n):
    for _ in range(n):
        b.record_prepare(prepare)
        b.record_stage(0, cpu)
        b.record_stage(1, device)
        b.decide()


def test_moves_when_the_cpu_stage_is_the_slower_one():
    b = PrepareBalance(True)
    _feed(b, cpu=4.0e-3, device=1.5e-3, prepare=1.0e-3, n=20)
    assert b.moved  # max(3.0, 2.5) is well below 4.0


def test_stays_when_the_device_stage_is_the_slower_one_or_the_gain_is_small():
    b = PrepareBalance(True)
    _feed(b, cpu=2.0e-3, device=3.0e-3, prepare=1.0e-3, n=40)
    assert not b.moved
    b = PrepareBalance(True)
    _feed(b, cpu=3.0e-3, device=2.5e-3, prepare=1.0e-3, n=40)  # after: max(2.0, 3.5) is slower
    assert not b.moved
    b = PrepareBalance(True)
    _feed(b, cpu=3.1e-3, device=2.9e-3, prepare=0.1e-3, n=40)  # gains 3 %, under the margin
    assert not b.moved


def test_needs_enough_iterations_and_goes_back_when_the_device_stage_slows():
    b = PrepareBalance(True)
    _feed(b, cpu=4.0e-3, device=1.0e-3, prepare=1.0e-3, n=b.WARMUP + b.SETTLE - 1)
    assert not b.moved
    _feed(b, cpu=4.0e-3, device=1.0e-3, prepare=1.0e-3, n=1)
    assert b.moved
    # the device stage now carries the prepare step and has become much the slower one
    _feed(b, cpu=1.0e-3, device=5.0e-3, prepare=0.0, n=b.WARMUP + b.SETTLE + 2)
    assert not b.moved


def test_inactive_never_moves():
    b = PrepareBalance(False)
    _feed(b, cpu=9.0e-3, device=1.0e-3, prepare=1.0e-3, n=40)
    assert not b.moved


@pytest.mark.cuda
@pytest.mark.parametrize("moved", [False, True])
def test_the_audio_decoder_gives_the_same_values_in_either_stage(tmp_path, monkeypatch, moved):
    rng = np.random.default_rng(3)
    files = []
    for i in range(8):
        path = tmp_path / f"{i}.{'wav' if i % 2 else 'flac'}"
        sf.write(path, rng.uniform(-0.8, 0.8, 4000 + 500 * i).astype(np.float32), 16000, subtype="PCM_16")
        files.append(str(path))
    for suffix in ("wav", "flac"):
        chosen = [f for f in files if f.endswith(suffix)]
        monkeypatch.setattr(PrepareBalance, "decide", lambda self, m=moved: setattr(self, "moved", m) or m)

        @pipeline_def(batch_size=4, num_threads=2, device_id=0)
        def pipe():
            enc, _ = fn.readers.file(files=chosen)
            audio, rate = fn.decoders.audio(enc, dtype=types.FLOAT, downmix=True, device="mixed")
            return audio, rate
        p = pipe()
        p.build()
        assert p._executor.movable_prepares
        for _ in range(3):
            audio, rate = p.run()
            for k, path in enumerate(chosen):
                want, sr = sf.read(path, dtype="float32")
                assert torch.equal(audio.as_cpu()[k], torch.from_numpy(want))
                assert float(rate.as_cpu()[k]) == sr
