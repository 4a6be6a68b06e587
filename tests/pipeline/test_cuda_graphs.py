"""CUDA graphs for the device stage (sluice.pipeline.cuda_graphs): which nodes are grouped, and on the GPU the same
values as the eager run, batch after batch, with shapes that change, and a capture that fails falling back."""

from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf
import torch

from sluice import fn, pipeline_def, types
from sluice.pipeline import cuda_graphs
from sluice.pipeline.batch import Batch
from sluice.pipeline.cuda_graphs import GraphedRun, qualifies


def _node(i, name, safe=True, inputs=(), arg_inputs=None, device="gpu", random=False, const=None):
    schema = SimpleNamespace(name=name, graph_safe=safe, random=random, stateful=random)
    node = SimpleNamespace(id=i, schema=schema, device=device, inputs=list(inputs), arg_inputs=arg_inputs or {},
                           const_args=const or {}, outputs=[None])
    node.describe = lambda: name
    node.outputs = [SimpleNamespace(op=node, index=0)]
    return node


def test_which_nodes_qualify():
    src = _node(0, "src", device="cpu")
    assert qualifies(_node(1, "a", inputs=[src.outputs[0]]))
    assert not qualifies(_node(1, "a", safe=False, inputs=[src.outputs[0]]))
    assert not qualifies(_node(1, "a", inputs=[src.outputs[0]], device="mixed"))
    assert not qualifies(_node(1, "a", inputs=[src.outputs[0]], random=True))
    assert not qualifies(_node(1, "a", inputs=[src.outputs[0]], arg_inputs={"x": src.outputs[0]}))
    assert not qualifies(_node(1, "a"))  # no inputs: its batch size would come from the executor
    spec = _node(1, "spectrogram", safe=lambda a: not a.get("window_fn"), inputs=[src.outputs[0]],
                 const={"window_fn": [1.0, 2.0]})
    assert not qualifies(spec)
    spec.const_args = {"window_fn": None}
    assert qualifies(spec)


def test_a_run_reads_its_inputs_and_hands_out_what_later_nodes_read():
    src = _node(0, "src", device="mixed")
    a = _node(1, "a", inputs=[src.outputs[0]])
    b = _node(2, "b", inputs=[a.outputs[0]])
    c = _node(3, "c", inputs=[b.outputs[0], src.outputs[0]])
    after = _node(4, "after", safe=False, inputs=[a.outputs[0]])
    run = cuda_graphs._make_run([a, b, c], [src, a, b, c, after], [c.outputs[0]], lambda *x: None)
    assert run.external == [(0, 0)]
    assert run.needed == [(1, 0), (3, 0)]  # a's output is read by `after`, c's is the pipeline's


def test_the_schemas_declare_what_may_be_captured():
    from sluice.schema import REGISTRY

    safe = {name for name, s in REGISTRY.items() if s.graph_safe}
    assert {"audio_resample", "spectrogram", "mel_filter_bank", "to_decibels", "mfcc"} <= safe
    assert not REGISTRY["mfcc"].graph_safe({"lifter": 22.0})
    assert REGISTRY["mfcc"].graph_safe({"lifter": 0.0})
    assert not REGISTRY["preemphasis_filter"].graph_safe  # copies its per-sample coefficients over each batch


# ---- on the GPU ------------------------------------------------------------------------------------------------
def _wavs(tmp_path, lengths):
    rng = np.random.default_rng(1)
    files = []
    for i, n in enumerate(lengths):
        path = tmp_path / f"{i:03d}.wav"
        t = np.arange(n) / 44100.0
        x = 0.5 * np.sin(2 * np.pi * (200 + 40 * i) * t) + 0.05 * rng.standard_normal(n)
        sf.write(path, x.astype(np.float32), 44100, subtype="PCM_16")
        files.append(str(path))
    return files


def _logmel(files, batch):
    @pipeline_def(batch_size=batch, num_threads=2, device_id=0, seed=1)
    def pipe():
        enc, _ = fn.readers.file(files=files, name="r")
        a, _ = fn.decoders.audio(enc, dtype=types.FLOAT, downmix=True)
        a = fn.audio_resample(a.gpu(), in_rate=44100.0, out_rate=16000.0)
        s = fn.spectrogram(a, nfft=512, window_length=400, window_step=160)
        m = fn.mel_filter_bank(s, sample_rate=16000, nfilter=80, freq_high=8000)
        return fn.to_decibels(m, multiplier=10.0, cutoff_db=-80), a
    p = pipe()
    p.build()
    return p


def _run(files, batch, iterations, graphs, monkeypatch):
    monkeypatch.setattr("sluice.pipeline.cuda_graphs.ENABLED", graphs)
    p = _logmel(files, batch)
    outs = []
    for _ in range(iterations):
        mel, audio = p.run()
        outs.append((mel.as_cpu(), audio.as_cpu()))  # copies: a later replay must not change them
    runs = [s for st in p._executor.stages for s in st.steps if isinstance(s, GraphedRun)]
    return outs, runs


@pytest.mark.cuda
def test_a_log_mel_pipeline_gives_the_eager_values_batch_after_batch(tmp_path, monkeypatch):
    files = _wavs(tmp_path, [22050] * 12)
    graphed, runs = _run(files, 4, 6, True, monkeypatch)
    eager, none = _run(files, 4, 6, False, monkeypatch)
    assert not none and len(runs) == 1
    assert [n.schema.name for n in runs[0].nodes] == ["audio_resample", "spectrogram", "mel_filter_bank",
                                                     "to_decibels"]
    assert runs[0].replays >= 4  # batch 1 eager, then every batch replayed
    for (gm, ga), (em, ea) in zip(graphed, eager):
        assert gm.shape() == em.shape() and ga.shape() == ea.shape()
        assert gm.source_info == em.source_info
        torch.testing.assert_close(ga.as_tensor(), ea.as_tensor(), rtol=0, atol=1e-6)
        torch.testing.assert_close(gm.as_tensor(), em.as_tensor(), rtol=0, atol=1e-3)
    # and the batches differ from each other: nothing is stuck at the captured batch
    assert not torch.equal(graphed[0][0].as_tensor(), graphed[1][0].as_tensor())


@pytest.mark.cuda
def test_changing_lengths_are_captured_per_shape_or_run_eagerly(tmp_path, monkeypatch):
    # three lengths, one per batch in turn: each shape is captured once and replayed afterwards
    files = _wavs(tmp_path, [8000] * 2 + [12000] * 2 + [16000] * 2)
    graphed, runs = _run(files, 2, 9, True, monkeypatch)
    eager, _ = _run(files, 2, 9, False, monkeypatch)
    assert runs[0].replays >= 3
    for (gm, _), (em, _) in zip(graphed, eager):
        torch.testing.assert_close(gm.as_tensor(), em.as_tensor(), rtol=0, atol=1e-3)


@pytest.mark.cuda
def test_a_run_that_cannot_be_captured_falls_back_to_eager(monkeypatch):
    def run_node(node, iteration, values):
        x = values[(0, 0)].dense
        if node.schema.name == "syncs":
            float(x.sum().item())  # waits for the GPU: not allowed while capturing
        values[(node.id, 0)] = Batch.from_dense(x * 2 + 1)

    a = _node(1, "syncs")
    run = GraphedRun([a], [(0, 0)], [(1, 0)], run_node)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for k in range(4):
            values = {(0, 0): Batch.from_dense(torch.full((3, 5), float(k), device="cuda"))}
            run.run(k, values)
            assert torch.equal(values[(1, 0)].dense.cpu(), torch.full((3, 5), 2.0 * k + 1))
    assert run.eager_only and run.replays == 0
    torch.cuda.synchronize()
    assert torch.ones(2, device="cuda").sum().item() == 2  # CUDA still works


@pytest.mark.cuda
def test_replayed_outputs_stay_valid_while_later_batches_run():
    def run_node(node, iteration, values):
        values[(node.id, 0)] = Batch.from_dense(values[(0, 0)].dense * 3)

    run = GraphedRun([_node(1, "times3")], [(0, 0)], [(1, 0)], run_node)
    kept = []
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for k in range(6):
            values = {(0, 0): Batch.from_dense(torch.full((2, 4), float(k), device="cuda"))}
            run.run(k, values)
            kept.append(values[(1, 0)].dense)
    torch.cuda.synchronize()
    assert run.replays == 5
    for k, t in enumerate(kept):
        assert torch.equal(t.cpu(), torch.full((2, 4), 3.0 * k))


@pytest.mark.cuda
def test_a_run_meeting_new_shapes_batch_after_batch_stays_eager_and_forgets_them():
    def run_node(node, iteration, values):
        values[(node.id, 0)] = Batch.from_dense(values[(0, 0)].dense + 1)

    run = GraphedRun([_node(1, "plus1")], [(0, 0)], [(1, 0)], run_node)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for k in range(cuda_graphs.MAX_SHAPES + 3):  # every batch a new length: nothing is ever captured
            values = {(0, 0): Batch.from_dense(torch.zeros(2, 5 + k, device="cuda"))}
            run.run(k, values)
            assert torch.equal(values[(1, 0)].dense.cpu(), torch.ones(2, 5 + k))
    assert run.eager_only and run.replays == 0 and not run._seen
