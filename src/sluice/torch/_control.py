"""What the iterators and the proxy need from a :class:`~sluice.Pipeline` beyond ``run()``.

These helpers reach into the pipeline's private state. Each one stands in for a public method the core should
offer (see the sluice.torch report): keep every such access here, in one place.
"""

from __future__ import annotations

from typing import Any

from sluice.pipeline.batch import Batch
from sluice.pipeline.pipeline import Pipeline

__all__ = ["run_one", "restore", "consumed", "has_ended"]


def run_one(pipe: Pipeline) -> tuple[Batch, ...]:
    """Run exactly one iteration (with data fed just before) and return its outputs.

    ``Pipeline.run()`` fills the whole prefetch queue on its first call, which asks fed external sources for
    ``prefetch_queue_depth`` batches when only one was fed; here exactly one iteration is requested.
    """
    if pipe.exec_async:
        pipe.executor.request(1)
        return pipe.outputs()
    return pipe.run()  # synchronous pipelines run one iteration per outputs() call anyway


def consumed(pipe: Pipeline) -> int:
    """How many iterations the caller has taken from ``pipe``."""
    return pipe._consumed


def has_ended(pipe: Pipeline) -> bool:
    """Whether ``pipe`` raised StopIteration (a source ended) and waits for ``reset()``."""
    return pipe._epoch_ended


def restore(pipe: Pipeline, checkpoint: Any) -> None:
    """Put a pipeline that may already be running back at ``checkpoint`` (bytes, a file or a dict).

    The pipeline's executor is stopped and built again from the same graph, then restored as
    ``Pipeline(checkpoint=...)`` would be (with the checkpointed run's seed); prefetched iterations are discarded.
    """
    with pipe._lock:
        if pipe._executor is not None:
            pipe._executor.stop()
        pipe._executor = None
        pipe._built = False
        pipe._epoch_ended = False
        pipe._sync_requested = 0
        pipe._consumed = 0
        pipe._checkpoint_to_restore = checkpoint
        pipe.build()
