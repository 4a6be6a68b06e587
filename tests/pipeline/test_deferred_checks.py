"""BatchContext.defer: an operator's check that waits on GPU work runs when the iteration is handed to the
caller, and its failure fails that iteration, naming the operator and the sample."""

from __future__ import annotations

import numpy as np
import pytest

from sluice import fn, pipeline_def
from sluice.errors import PipelineError, SampleError
from sluice.pipeline.graph import make_node
from sluice.schema import BatchArgs, BatchContext, OpSchema

CHECKED = OpSchema("test_deferred_check", doc="Passes its input through; defers a check that fails on "
                   "iteration 1, sample 2.", inputs=1, outputs=1, devices=("cpu",), register=False)
RUNS: list[tuple[int, bool]] = []  # (iteration, whether the check ran inside op.run)


@CHECKED.batch_kernel("cpu")
def _checked(ctx: BatchContext, data, *, args: BatchArgs):
    state = {"in_run": True}

    def check() -> None:
        RUNS.append((ctx.iteration, state["in_run"]))
        if ctx.iteration == 1:
            raise SampleError(2, "", ValueError("damaged stream"))
    ctx.defer(check)
    state["in_run"] = False
    return data


@pytest.mark.parametrize("exec_async", [True, False])
def test_deferred_check_fails_its_iteration_when_taken(exec_async):
    RUNS.clear()

    @pipeline_def(batch_size=4, num_threads=2, device_id=None, exec_async=exec_async,
                  exec_pipelined=exec_async, prefetch_queue_depth=2)
    def pipe():
        data = fn.external_source(source=lambda: [np.full(3, i, np.float32) for i in range(4)])
        return make_node(CHECKED, [data], {})

    p = pipe()
    p.build()
    (out,) = p.run()
    assert np.asarray(out[0]).tolist() == [0, 0, 0]
    with pytest.raises(PipelineError) as err:
        p.run()
    msg = str(err.value)
    assert "test_deferred_check" in msg and "sample 2" in msg and "damaged stream" in msg and "iteration 1" in msg
    assert RUNS[:2] == [(0, False), (1, False)]  # run after op.run returned, when the outputs were taken


def test_outside_a_pipeline_the_check_runs_at_once():
    import torch

    ctx = BatchContext("x", 1, [""], [""], torch.device("cpu"), None, 0, 1)
    with pytest.raises(SampleError):
        ctx.defer(lambda: (_ for _ in ()).throw(SampleError(0, "", ValueError("bad"))))
