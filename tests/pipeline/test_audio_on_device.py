"""A CPU audio decoder whose audio goes only to .gpu() decodes on the device (pipeline.passes.fusion.decode_audio_on_device):
the graph rewrite, and the same values as the CPU decoder (cuda)."""

import numpy as np
import pytest
import soundfile as sf
import torch

from sluice import fn, pipeline_def, types
from sluice.pipeline.passes.fusion import decode_audio_on_device


def _wavs(tmp_path, n=6, subtype="PCM_16"):
    rng = np.random.default_rng(0)
    for i in range(n):
        sf.write(tmp_path / f"{i}.wav", rng.uniform(-0.9, 0.9, 1000 + 0 * i).astype(np.float32), 16000,
                 subtype=subtype)
    return [str(tmp_path / f"{i}.wav") for i in range(n)]


def _graph(files, use_rate=False, sample_rate=0.0):
    @pipeline_def(batch_size=3, num_threads=2, device_id=None)
    def pipe():
        enc, _ = fn.readers.file(files=files)
        audio, rate = fn.decoders.audio(enc, dtype=types.FLOAT, downmix=True, sample_rate=sample_rate)
        out = audio.gpu()
        return (out, rate) if use_rate else out
    p = pipe()
    from sluice.pipeline.executor import topological_order
    return topological_order(p._outputs), p._outputs


def _names(nodes):
    return [(n.schema.name, n.device) for n in nodes]


@pytest.mark.parametrize("use_rate,sample_rate,rewritten", [(False, 0.0, True), (True, 0.0, False),
                                                            (False, 8000.0, False)])
def test_the_rewrite_applies_only_where_the_values_stay_the_same(tmp_path, use_rate, sample_rate, rewritten):
    nodes, outputs = _graph(_wavs(tmp_path), use_rate, sample_rate)
    after = decode_audio_on_device(nodes, outputs)
    if rewritten:
        assert ("decoders.audio", "mixed") in _names(after) and ("_transfer", "gpu") not in _names(after)
        mixed = next(n for n in after if n.device == "mixed")
        assert mixed.outputs[0] is outputs[0]  # the transfer's output, which the pipeline returns
    else:
        assert _names(after) == _names(nodes)


@pytest.mark.cuda
@pytest.mark.parametrize("subtype", ["PCM_16", "PCM_U8", "PCM_32", "FLOAT", "PCM_24"])
def test_decoded_on_the_device_equals_the_cpu_decoder(tmp_path, monkeypatch, subtype):
    files = _wavs(tmp_path, 6, subtype)

    def graph():
        enc, _ = fn.readers.file(files=files)
        audio, _ = fn.decoders.audio(enc, dtype=types.FLOAT, downmix=True)
        return audio.gpu()

    for a, b in zip(*_with_and_without_fusion(monkeypatch, graph)):
        assert torch.equal(a, b)


def _with_and_without_fusion(monkeypatch, graph):
    """Two batches of the GPU pipeline whose output ``graph()`` makes, built with the fusion and without it."""
    out = []
    for fused in (True, False):
        monkeypatch.setattr("sluice.pipeline.passes.fusion.ENABLED", fused)

        @pipeline_def(batch_size=3, num_threads=2, device_id=0)
        def pipe():
            return graph()
        p = pipe()
        p.build()
        out.append([p.run()[0].as_cpu().as_tensor().clone() for _ in range(2)])
    return out


def test_a_rate_read_as_an_argument_input_on_the_gpu_moves_with_the_decoder(tmp_path):
    """audio_resample(audio.gpu(), in_rate=rate): the mixed decoder's rate (host values kept) feeds the argument."""
    files = _wavs(tmp_path)

    @pipeline_def(batch_size=3, num_threads=2, device_id=None)
    def pipe():
        enc, _ = fn.readers.file(files=files)
        audio, rate = fn.decoders.audio(enc, dtype=types.INT16, downmix=True)
        return fn.audio_resample(audio.gpu(), in_rate=rate, out_rate=8000.0, dtype=types.FLOAT)
    p = pipe()
    from sluice.pipeline.executor import topological_order
    nodes = topological_order(p._outputs)
    after = decode_audio_on_device(nodes, p._outputs)
    mixed = next(n for n in after if n.device == "mixed")
    resample = next(n for n in after if n.schema.name == "audio_resample")
    assert resample.arg_inputs["in_rate"] is mixed.outputs[1]
    assert ("decoders.audio", "cpu") not in _names(after)
    # the original nodes are untouched
    assert next(n for n in nodes if n.schema.name == "audio_resample").arg_inputs["in_rate"].op.device == "cpu"


@pytest.mark.cuda
def test_resampling_by_the_moved_rate_equals_the_cpu_decoder(tmp_path, monkeypatch):
    files = _wavs(tmp_path, 6)

    def graph():
        enc, _ = fn.readers.file(files=files)
        audio, rate = fn.decoders.audio(enc, dtype=types.INT16, downmix=True)
        return fn.audio_resample(audio.gpu(), in_rate=rate, out_rate=8000.0, dtype=types.FLOAT)

    for a, b in zip(*_with_and_without_fusion(monkeypatch, graph)):
        assert torch.equal(a, b)
