"""Every form of fn.external_source, including parallel=True in worker processes (fork and spawn)."""

import os
import signal

import numpy as np
import pytest
import torch

import sluice
from sluice import fn, types
from sluice.errors import PipelineError

BS = 3


def _collect(pipe, max_iters=20):
    out = []
    for _ in range(max_iters):
        try:
            batches = pipe.run()
        except StopIteration:
            return out, True
        out.append([[int(np.asarray(s).reshape(-1)[0]) for s in b.as_cpu().samples] for b in batches])
    return out, False


def _pipe(device_id=None, **source_args):
    @sluice.pipeline_def(batch_size=BS, num_threads=2, device_id=device_id, seed=0, py_num_workers=2,
                         py_start_method=source_args.pop("start", "fork"))
    def pipe():
        out = fn.external_source(**source_args)
        return tuple(out) if isinstance(out, list) else out

    return pipe()


def sample_source(info):  # module level: picklable for spawn
    if info.idx_in_epoch >= 7:
        raise StopIteration
    return np.array([info.idx_in_epoch * 10 + info.epoch_idx], np.int64)


def batch_source(info):
    if info.iteration >= 2:
        raise StopIteration
    return [np.array([info.iteration * 100 + i]) for i in range(BS)]


def generator():
    for k in range(2):
        yield [np.array([k]) for _ in range(BS)]


def test_batch_callable_forms():
    out, _ = _collect(_pipe(source=lambda: [np.array([5])] * BS), 2)
    assert out == [[[5, 5, 5]]] * 2
    out, _ = _collect(_pipe(source=lambda it: np.full((BS, 2), it)), 3)
    assert [o[0][0] for o in out] == [0, 1, 2]
    out, ended = _collect(_pipe(source=batch_source, batch_info=True))
    assert ended and out == [[[0, 1, 2]], [[100, 101, 102]]]


@pytest.mark.parametrize("parallel", [False, True])
def test_per_sample_callable_gives_partial_last_batch_then_ends(parallel):
    pipe = _pipe(source=sample_source, batch=False, parallel=parallel)
    for epoch in range(2):
        out, ended = _collect(pipe)
        assert ended
        assert out == [[[0 + epoch, 10 + epoch, 20 + epoch]], [[30 + epoch, 40 + epoch, 50 + epoch]], [[60 + epoch]]]
        pipe.reset()


def test_parallel_spawn():
    pipe = _pipe(source=sample_source, batch=False, parallel=True, start="spawn")
    out, ended = _collect(pipe)
    assert ended and [s for b in out for s in b[0]] == [0, 10, 20, 30, 40, 50, 60]
    pipe.close()


def test_parallel_batch_callable_and_generator():
    out, ended = _collect(_pipe(source=batch_source, batch_info=True, parallel=True, batch=True))
    assert ended and out == [[[0, 1, 2]], [[100, 101, 102]]]
    out, ended = _collect(_pipe(source=generator, parallel=True, batch=True))
    assert ended and out == [[[0, 0, 0]], [[1, 1, 1]]]


def test_iterables_generators_and_cycle():
    batches = [[np.array([k])] * BS for k in range(2)]
    pipe = _pipe(source=batches)
    out, ended = _collect(pipe)
    assert ended and [o[0][0] for o in out] == [0, 1]
    pipe.reset()
    out, _ = _collect(pipe)
    assert [o[0][0] for o in out] == [0, 1]  # iterated anew after reset
    out, ended = _collect(_pipe(source=batches, cycle="quiet"), 5)
    assert not ended and [o[0][0] for o in out] == [0, 1, 0, 1, 0]
    out, ended = _collect(_pipe(source=generator))
    assert ended and len(out) == 2
    samples = [np.array([k]) for k in range(5)]
    out, ended = _collect(_pipe(source=samples, batch=False))
    assert ended and out == [[[0, 1, 2]], [[3, 4]]]


def test_num_outputs_and_accepted_data_kinds():
    class ArrayLike:
        def __array__(self, dtype=None, copy=None):
            return np.array([7, 8], np.int16)

    data = (torch.zeros(BS, 2), [b"\x01\x02", bytearray(b"\x03"), ArrayLike()])
    out, _ = _collect(_pipe(source=lambda: data, num_outputs=2), 1)
    assert out == [[[0, 0, 0], [1, 3, 7]]]


def test_dtype_and_ndim_are_checked():
    with pytest.raises(PipelineError, match=r"should be types.FLOAT \(dtype=\)"):
        _pipe(source=lambda: [np.zeros(2, np.int32)] * BS, dtype=types.FLOAT).run()
    with pytest.raises(PipelineError, match="should have ndim=2"):
        _pipe(source=lambda: [np.zeros(2)] * BS, ndim=2).run()
    with pytest.raises(PipelineError, match="more than the pipeline's batch_size"):
        _pipe(source=lambda: [np.zeros(2)] * (BS + 1)).run()


def killer(info):
    if info.idx_in_epoch == 4:
        os.kill(os.getpid(), signal.SIGKILL)
    return np.zeros(1)


def test_dead_worker_is_an_error_not_a_hang():
    pipe = _pipe(source=killer, batch=False, parallel=True)
    with pytest.raises(PipelineError, match=r"worker process \d+ died \(exit code -9\)"):
        for _ in range(5):
            pipe.run()
    pipe.close()


def raiser(info):
    raise KeyError("missing key")


def test_callback_error_in_worker_reaches_caller():
    with pytest.raises(PipelineError, match="KeyError: 'missing key'"):
        _pipe(source=raiser, batch=False, parallel=True).run()


@pytest.mark.cuda
def test_cuda_tensors_and_gpu_device():
    pipe = _pipe(source=lambda: torch.arange(BS, device="cuda").reshape(BS, 1), device="gpu", device_id=0)
    (out,) = pipe.run()
    assert out.device == "gpu" and out.as_tensor().flatten().tolist() == [0, 1, 2]


def fail_on_sample_2(info):  # module level: picklable for spawn
    if info.idx_in_epoch == 2:
        how = os.environ.get("SLUICE_TEST_FAILURE", "raise")
        if how == "exit":
            os._exit(3)
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise KeyError("missing key")
    return np.zeros(1)


@pytest.mark.parametrize("start,how,reason", [
    ("fork", "raise", "KeyError: 'missing key'"),
    ("fork", "exit", r"worker process \d+ died \(exit code 3\)"),
    ("fork", "kill", r"worker process \d+ died \(exit code -9\)"),
    ("spawn", "raise", "KeyError: 'missing key'"),
    ("spawn", "exit", r"worker process \d+ died \(exit code 3\)"),
])
def test_parallel_failure_names_the_operator_and_the_sample(monkeypatch, start, how, reason):
    """Samples 0-1 go to worker 0, sample 2 to worker 1 (batch of 3, two workers): the error names sample 2 of
    iteration 0, whichever way its worker failed."""
    monkeypatch.setenv("SLUICE_TEST_FAILURE", how)  # inherited by fork and spawn workers alike
    pipe = _pipe(source=fail_on_sample_2, batch=False, parallel=True, start=start, name="src")
    try:
        with pytest.raises(PipelineError, match=reason) as info:
            pipe.run()
        assert type(info.value) is PipelineError
        message = str(info.value)
        assert "fn.external_source" in message and "'src'" in message, message
        assert "on sample 2, iteration 0" in message, message
        assert info.value.sample == 2 and info.value.op_name == "external_source"
    finally:
        pipe.close()
