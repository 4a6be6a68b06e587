"""The executor: determinism, prefetching, errors that reach the caller, and the GPU checks at build."""


import numpy as np
import pytest
import torch

import sluice
from sluice import fn, types
from sluice.errors import PipelineBrokenError, PipelineError


def _random_pipe(num_threads, exec_async=True, seed=42):
    @sluice.pipeline_def(batch_size=8, num_threads=num_threads, device_id=None, seed=seed, exec_async=exec_async)
    def pipe():
        data = fn.external_source(source=lambda: [np.zeros((2, 2), np.float32)] * 8)
        coin = fn.random.coin_flip(probability=0.3)
        uni = fn.random.uniform(range=[0, 10], shape=[3])
        noise = fn.random.normal(data, stddev=2.0)  # shape-like: one value per element
        per_sample = fn.random.uniform(range=[0, 1], shape=[2])
        choice = fn.random.choice(fn.constant(idata=[5, 6, 7]))
        return coin, uni, noise, per_sample * fn.cast(coin, dtype=types.FLOAT), choice

    return pipe()


def _take(pipe, n=3):
    return [[b.as_tensor().clone() for b in pipe.run()] for _ in range(n)]


def test_same_seed_same_values_whatever_the_threads():
    one = _take(_random_pipe(1))
    four = _take(_random_pipe(4))
    sync = _take(_random_pipe(4, exec_async=False))
    for a, b, c in zip(one, four, sync):
        for x, y, z in zip(a, b, c):
            assert torch.equal(x, y) and torch.equal(x, z)
    other = _take(_random_pipe(4, seed=43))
    assert not all(torch.equal(x, y) for x, y in zip(one[0], other[0]))


def test_random_values_vary_between_samples_and_iterations():
    runs = _take(_random_pipe(2), 4)
    coins = torch.stack([r[0] for r in runs])
    assert 0 < coins.float().mean() < 1
    assert not torch.equal(runs[0][1], runs[1][1])
    assert runs[0][2].shape == (8, 2, 2)
    assert set(runs[0][4].tolist()) <= {5, 6, 7}


def test_schedule_run_and_outputs_keep_order():
    @sluice.pipeline_def(batch_size=2, num_threads=2, device_id=None, prefetch_queue_depth=3)
    def pipe():
        return fn.external_source(source=lambda i: [np.array([i]), np.array([i])])

    p = pipe()
    p.schedule_run()
    p.schedule_run()
    got = [int(p.outputs()[0].at(0)[0]) for _ in range(2)]
    got += [int(p.run()[0].at(0)[0]) for _ in range(3)]
    assert got == [0, 1, 2, 3, 4]


def test_error_in_worker_thread_names_operator_sample_and_file(tmp_path):
    for i in range(4):
        (tmp_path / f"{i}.bin").write_bytes(bytes(range(4 + (i == 2))))

    @sluice.pipeline_def(batch_size=4, num_threads=4, device_id=None)
    def pipe():
        data, _ = fn.readers.file(files=[f"{i}.bin" for i in range(4)], file_root=str(tmp_path))
        return fn.reshape(data, shape=[2, 2])

    p = pipe()
    with pytest.raises(PipelineError) as e:
        p.run()
    msg = str(e.value)
    assert "fn.reshape" in msg and "sample 2" in msg and "2.bin" in msg and "cannot reshape" in msg
    with pytest.raises(PipelineBrokenError, match="can no longer be used"):
        p.run()


def test_error_does_not_hang_with_prefetching():
    calls = []

    def source(i):
        calls.append(i)
        if i == 3:
            raise RuntimeError("source failed at 3")
        return [np.zeros(1)]

    @sluice.pipeline_def(batch_size=1, num_threads=2, device_id=None, prefetch_queue_depth=4)
    def pipe():
        return fn.external_source(source=source)

    p = pipe()
    for _ in range(3):
        p.run()
    with pytest.raises(PipelineError, match="source failed at 3"):
        p.run()


def test_gpu_stage_without_gpu_fails_at_build():
    @sluice.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.random.uniform().gpu()

    with pytest.raises(PipelineError, match=r"device_id=None \(CPU only\) but has GPU stages"):
        pipe().build()
    if not torch.cuda.is_available():
        @sluice.pipeline_def(batch_size=2, num_threads=1, device_id=0)
        def pipe0():
            return fn.random.uniform(device="gpu")

        with pytest.raises(PipelineError, match="no CUDA GPU is available"):
            pipe0().build()


def test_pipeline_subclass_with_define_graph_and_feed_input():
    class Legacy(sluice.Pipeline):
        def __init__(self):
            super().__init__(batch_size=2, num_threads=1, device_id=None)
            self.counter = 0

        def define_graph(self):
            self.data = fn.external_source(name="data")
            return self.data * 2

        def iter_setup(self):
            self.feed_input(self.data, np.full((2, 3), self.counter, np.int32), layout="A")  # samples are 1-D
            self.counter += 1

    p = Legacy()
    p.build()
    outs = [p.run()[0] for _ in range(3)]
    assert [int(o.at(0)[0]) for o in outs] == [0, 2, 4]
    assert outs[0].layout() == "A"


def test_feed_input_layout_must_describe_the_samples():
    """As DALI (dali/c_api_2/validation.h): a layout has one letter per dimension of the samples; encoded bytes
    (1-D) labelled HWC are refused, not passed on to be read as images."""
    @sluice.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(name="jpegs")

    p = pipe()
    p.build()
    encoded = [np.frombuffer(b"\xff\xd8\xff\xe0 not really a jpeg", np.uint8)] * 2
    with pytest.raises(sluice.ArgumentError, match="The layout 'HWC' cannot describe 1-dimensional data"):
        p.feed_input("jpegs", encoded, layout="HWC")
    with pytest.raises(sluice.ArgumentError, match="The layout 'HWC' cannot describe 2-dimensional data"):
        p.feed_input("jpegs", np.zeros((2, 4, 5), np.uint8), layout="HWC")  # a batch of two 4 x 5 samples
    p.feed_input("jpegs", np.zeros((2, 4, 5, 3), np.uint8), layout="HWC")
    p.feed_input("jpegs", [bytes(b) for b in encoded])  # no layout: anything goes
    first, second = p.run()[0], p.run()[0]
    assert first.layout() == "HWC" and second.layout() == "" and second.shape() == [(len(encoded[0]),)] * 2

    @sluice.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def with_source():  # the layout argument of external_source is checked the same way
        return fn.external_source(source=lambda: encoded, layout="HWC")

    with pytest.raises(PipelineError, match="The layout 'HWC' cannot describe 1-dimensional data"):
        with_source().run()


def test_gpu_copy_keeps_its_source_name():
    """DALI's .gpu() keeps the name and source of the node (nvidia/dali/data_node.py): feed_input(node.gpu(), ...)
    feeds the external_source."""
    pipe = sluice.Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        audio = fn.external_source(name="audio")
        moved = audio.gpu()
    assert moved.name == audio.name == "audio" and moved.moved_from() is audio
    assert moved.gpu() is moved and moved.op.schema.name == "_transfer"


@pytest.mark.cuda
def test_feed_input_through_a_gpu_node():
    class AudioPipe(sluice.Pipeline):
        def __init__(self):
            super().__init__(batch_size=2, num_threads=1, device_id=0)

        def define_graph(self):
            self.audio = fn.external_source(name="audio").gpu()
            return self.audio * 2

        def iter_setup(self):
            self.feed_input(self.audio, [np.arange(4, dtype=np.float32)] * 2)

    p = AudioPipe()
    p.build()
    (out,) = p.run()
    assert out.device == "gpu" and out.as_cpu().at(1).tolist() == [0.0, 2.0, 4.0, 6.0]


@pytest.mark.parametrize("exec_async", [True, False])
def test_iter_setup_stop_iteration_ends_the_epoch_after_prepared_iterations(exec_async):
    """As DALI's Pipeline._run_once: StopIteration from iter_setup stops asking for iterations; those already
    prepared (the prefetch queue) still come out, then run() raises StopIteration; reset() starts over."""
    class Counting(sluice.Pipeline):
        def __init__(self):
            super().__init__(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=3,
                             exec_async=exec_async)
            self.fed = 0

        def define_graph(self):
            self.data = fn.external_source(name="data")
            return self.data

        def iter_setup(self):
            if self.fed == 4:
                raise StopIteration
            self.feed_input(self.data, [np.int32([self.fed])])
            self.fed += 1

    p = Counting()
    p.build()
    assert [int(p.run()[0].at(0)[0]) for _ in range(4)] == [0, 1, 2, 3]
    with pytest.raises(StopIteration):
        p.run()
    p.reset()
    p.fed = 2
    assert [int(p.run()[0].at(0)[0]) for _ in range(2)] == [2, 3]
    with pytest.raises(StopIteration):
        p.run()


def test_feed_input_missing_data_is_a_clear_error():
    @sluice.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(name="images")

    p = pipe()
    with pytest.raises(PipelineError, match=r"no data was fed.*feed_input\('images'"):
        p.run()
    with pytest.raises(sluice.ArgumentError, match="no external_source named 'labels'"):
        pipe().feed_input("labels", [np.zeros(1)] * 2)


def test_set_outputs_with_context_manager():
    pipe = sluice.Pipeline(batch_size=2, num_threads=1, device_id=None, seed=1)
    with pipe:
        pipe.set_outputs(fn.constant(fdata=[1.0, 2.0]), fn.random.uniform(preserve=True))
    a, b = pipe.run()
    assert a.as_tensor().tolist() == [[1.0, 2.0], [1.0, 2.0]]


def test_checkpoint_requires_enabling():
    pipe = _random_pipe(1)
    with pytest.raises(PipelineError, match="enable_checkpointing=True"):
        pipe.checkpoint()


@pytest.mark.cuda
def test_gpu_path_prefetches_on_a_stream_and_stays_on_gpu():
    @sluice.pipeline_def(batch_size=16, num_threads=2, device_id=0, seed=1, prefetch_queue_depth=3)
    def pipe():
        x = fn.external_source(source=lambda i: np.full((16, 8, 8), i, np.float32))
        g = x.gpu()
        return g * 2 + 1, fn.random.coin_flip(device="gpu"), (g > 3).cpu()

    p = pipe()
    for i in range(5):
        y, coin, cmp_ = p.run()
        assert y.device == "gpu" and y.as_tensor().is_cuda and coin.as_tensor().is_cuda
        assert torch.all(y.as_tensor() == 2 * i + 1)
        assert cmp_.device == "cpu" and bool(cmp_.as_tensor().all()) == (i > 3)
    assert p.executor.stream is not None and p.executor.stream != torch.cuda.current_stream()


def test_checkpoint_of_an_earlier_iteration_and_restore_in_place():
    def make():
        @sluice.pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=5, enable_checkpointing=True,
                             prefetch_queue_depth=3)
        def pipe():
            return fn.random.uniform(range=[0, 1], shape=[2])

        return pipe()

    p = make()
    got = [p.run()[0].as_tensor().clone() for _ in range(4)]
    ckpt = p.checkpoint(iteration=2)  # as if batches 2 and 3 were not handed on yet
    with pytest.raises(sluice.ArgumentError, match="only iterations"):
        p.checkpoint(iteration=1)  # older than the last checkpoint: forgotten
    q = make()
    q.restore(ckpt)
    assert torch.equal(q.run()[0].as_tensor(), got[2]) and q.iterations_consumed == 3
    p.restore(ckpt)
    assert torch.equal(p.run()[0].as_tensor(), got[2])
    assert not p.epoch_ended
def test_record_stream_once_per_allocation():
    """A ragged GPU batch is marked for the caller's stream once per allocation its samples share, not per sample."""
    from sluice.pipeline.batch import Batch
    from sluice.pipeline.pipeline import _record_stream

    calls = []

    class Sample(torch.Tensor):
        def record_stream(self, stream):
            calls.append((self.untyped_storage().data_ptr(), stream))

    one = torch.zeros(30, dtype=torch.uint8)
    other = torch.zeros(4, dtype=torch.uint8)
    samples = [one[:10], one[10:20], one[20:], other]
    _record_stream(Batch([t.as_subclass(Sample) for t in samples]), "s")
    assert sorted(calls) == sorted([(one.data_ptr(), "s"), (other.data_ptr(), "s")])
