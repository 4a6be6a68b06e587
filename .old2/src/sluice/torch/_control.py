"""What the iterators and the proxy need from a :class:`~sluice.Pipeline` beyond ``run()``, in one place."""

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
    pipe.schedule_run(count=1)
    return pipe.outputs()


def consumed(pipe: Pipeline) -> int:
    """How many iterations the caller has taken from ``pipe``."""
    return pipe.iterations_consumed


def has_ended(pipe: Pipeline) -> bool:
    """Whether ``pipe`` raised StopIteration (a source ended) and waits for ``reset()``."""
    return pipe.epoch_ended


def restore(pipe: Pipeline, checkpoint: Any) -> None:
    """Put a pipeline that may already be running back at ``checkpoint`` (bytes, a file or a dict).

    The pipeline's executor is stopped and built again from the same graph, then restored as
    ``Pipeline(checkpoint=...)`` would be (with the checkpointed run's seed); prefetched iterations are discarded.
    """
    pipe.restore(checkpoint)
