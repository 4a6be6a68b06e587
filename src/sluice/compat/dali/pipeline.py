"""``nvidia.dali.pipeline`` on sluice: ``Pipeline`` with DALI's constructor (positional order included) and its
legacy methods, and ``pipeline_def``.

Legacy pipelines subclass :class:`Pipeline`, make operators in ``__init__``, connect them in ``define_graph``
and feed external sources in ``iter_setup``; ``@pipeline_def`` functions work as in DALI.

Example::

    from nvidia.dali.pipeline import Pipeline      # after sluice.compat.install()
    import nvidia.dali.ops as ops

    class Simple(Pipeline):
        def __init__(self, batch_size, num_threads, device_id, root):
            super().__init__(batch_size, num_threads, device_id, seed=12)
            self.input = ops.readers.File(file_root=root)
            self.decode = ops.decoders.Image(device="cpu")

        def define_graph(self):
            jpegs, labels = self.input()
            return self.decode(jpegs), labels
"""

from __future__ import annotations

import functools
import inspect
import sys as _sys
from collections.abc import Callable
from typing import Any

import sluice.pipeline.pipeline as _core
from sluice import types
from sluice.compat._missing import missing
from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.errors import PipelineError
from sluice.pipeline.batch import Batch
from sluice.pipeline.graph import DataNode
from sluice.pipeline.if_rewrite import do_not_convert

__all__ = ["DataNode", "Pipeline", "do_not_convert", "pipeline_def"]


class Pipeline(_core.Pipeline):
    """sluice's Pipeline with DALI's constructor. ``max_streams``, ``bytes_per_sample``, ``set_affinity``,
    ``default_cuda_stream_priority``, ``enable_memory_stats``, ``exec_dynamic`` and
    ``experimental_exec_dynamic`` tune DALI's executor and are accepted without effect; ``output_dtype`` and
    ``output_ndim`` check every output as DALI does; ``py_callback_pickler`` and ``stream`` are not supported
    (NotImplementedError unless None)."""

    def __init__(self, batch_size: int = -1, num_threads: int = -1, device_id: int | None = -1, seed: int = -1,
                 exec_pipelined: bool = True, prefetch_queue_depth: int | tuple[int, int] | dict = 2,
                 exec_async: bool = True, bytes_per_sample: int = 0, set_affinity: bool = False,
                 max_streams: int = -1, default_cuda_stream_priority: int = 0, *, enable_memory_stats: bool = False,
                 enable_checkpointing: bool = False, checkpoint: Any = None, py_num_workers: int = 1,
                 py_start_method: str = "fork", py_callback_pickler: Any = None, output_dtype: Any = None,
                 output_ndim: Any = None, exec_dynamic: bool = False, experimental_exec_dynamic: bool = False,
                 stream: Any = None):
        for name, value in (("py_callback_pickler", py_callback_pickler), ("stream", stream)):
            if value is not None:
                missing(f"Pipeline({name}=...)", hint="Leave it None.")
        super().__init__(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=seed,
                         exec_pipelined=exec_pipelined, prefetch_queue_depth=prefetch_queue_depth,
                         exec_async=exec_async, enable_checkpointing=enable_checkpointing, checkpoint=checkpoint,
                         py_num_workers=py_num_workers, py_start_method=py_start_method,
                         max_batch_size=-1, set_affinity=set_affinity, bytes_per_sample=bytes_per_sample,
                         default_cuda_stream_priority=default_cuda_stream_priority,
                         enable_memory_stats=enable_memory_stats)
        self._expected_dtype = output_dtype
        self._expected_ndim = output_ndim

    def outputs(self) -> tuple[Batch, ...]:
        outs = super().outputs()
        self._check_outputs(outs)
        return outs

    def _check_outputs(self, outs: tuple[Batch, ...]) -> None:
        for kind, expected in (("dtype", self._expected_dtype), ("ndim", self._expected_ndim)):
            if expected is None:
                continue
            per_output = list(expected) if isinstance(expected, (list, tuple)) else [expected] * len(outs)
            for i, (batch, want) in enumerate(zip(outs, per_output)):
                if want is None or not len(batch):
                    continue
                if kind == "dtype":
                    have, want_cmp = batch.dtype, types.to_torch_dtype(want)
                else:
                    have, want_cmp = len(batch.shape()[0]), int(want)
                if have != want_cmp:
                    raise PipelineError(f"pipeline output {i} has {kind} {have}, but output_{kind} says {want!r}")

    # ---- DALI's legacy methods ---------------------------------------------------------------------------
    def share_outputs(self) -> tuple[Batch, ...]:
        """The next prepared outputs (DALI's zero-copy variant of ``outputs()``; sluice never copies)."""
        return self.outputs()

    def release_outputs(self) -> None:
        """Nothing to release: sluice's outputs are ordinary tensors, freed when unused."""

    def empty(self) -> bool:
        """Whether no prepared iteration is waiting."""
        return self._pending() == 0

    def serialize(self, *args: Any, **kwargs: Any) -> bytes:
        missing("Pipeline.serialize()", hint="Rebuild the pipeline from its Python definition instead.")

    @classmethod
    def deserialize(cls, *args: Any, **kwargs: Any) -> Pipeline:
        missing("Pipeline.deserialize()", hint="Rebuild the pipeline from its Python definition instead.")

    def save_graph_to_dot_file(self, *args: Any, **kwargs: Any) -> None:
        missing("Pipeline.save_graph_to_dot_file()")


_PIPELINE_ARGS = set(inspect.signature(Pipeline.__init__).parameters) - {"self"}


def pipeline_def(fn: Callable | None = None, *, enable_conditionals: bool = False, debug: bool = False,
                 **pipeline_kwargs: Any) -> Callable:
    """DALI's ``@pipeline_def``: calling the decorated function returns a built graph in a :class:`Pipeline`;
    pipeline arguments go to the decorator or to the call (the call wins). ``enable_conditionals=True`` runs
    ``if``/``elif``/``else``, ``and``, ``or`` and ``not`` on DataNodes per sample, as DALI does
    (:mod:`sluice.pipeline.conditionals`); ``debug=True`` (eager debug mode) is not supported.

    Example::

        @pipeline_def(batch_size=8, num_threads=2, device_id=None)
        def pipe(root):
            jpegs, labels = fn.readers.file(file_root=root)
            return fn.decoders.image(jpegs), labels

        p = pipe("/data", seed=1)
    """
    if debug:
        missing("pipeline_def(debug=True)", hint="Run the pipeline with exec_async=False to debug it in one thread.")
    unknown = set(pipeline_kwargs) - _PIPELINE_ARGS
    if unknown:
        missing(f"pipeline_def argument(s) {sorted(unknown)}", _PIPELINE_ARGS)

    def decorate(func: Callable) -> Callable:
        own_params = set(inspect.signature(func).parameters)

        @functools.wraps(func)
        def create(*args: Any, **kwargs: Any) -> Pipeline:
            chosen = dict(pipeline_kwargs)
            chosen.update({k: kwargs.pop(k) for k in list(kwargs) if k in _PIPELINE_ARGS and k not in own_params})
            pipe = Pipeline(**chosen)
            outputs = _core._trace(pipe, func, args, kwargs, enable_conditionals)
            pipe.set_outputs(*(outputs if isinstance(outputs, (list, tuple)) else [outputs]))
            return pipe

        return create

    return decorate if fn is None else decorate(fn)


__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
