"""Pipeline and pipeline_def: define a graph of operators once, then run it batch after batch.

Example::

    @sluice.pipeline_def(batch_size=32, num_threads=4, device_id=0, seed=42)
    def train_pipe(root):
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
        images = fn.decoders.image(jpegs, device="mixed")
        return fn.resize(images, resize_x=224, resize_y=224), labels

    pipe = train_pipe("/data/train")
    images, labels = pipe.run()     # Batches on the GPU / CPU
"""

from __future__ import annotations

import atexit
import functools
import inspect
import io
import logging
import os
import pickle
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from sluice._workers import cores_per_rank
from sluice.errors import ArgumentError, EndOfEpoch, PipelineBrokenError, PipelineError
from sluice.pipeline import conditionals
from sluice.pipeline.batch import Batch
from sluice.pipeline.executor import _END, Executor, _Failure
from sluice.pipeline.graph import DataNode, OpNode, current_pipeline, enter_pipeline, exit_pipeline

log = logging.getLogger(__name__)

__all__ = ["Pipeline", "pipeline_def"]

_AUTO = -1
_live: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # Stop background threads before the interpreter tears torch down under them.
    for pipe in list(_live):
        pipe.close()


def _int_arg(name: str, value: Any, low: int = 1, default_ok: bool = False) -> int:
    """A Pipeline argument that must be an integer of at least ``low`` (or -1, the default, with ``default_ok``),
    refused with a message naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"Pipeline: argument '{name}' expects int, got {value!r} ({type(value).__name__})")
    value = int(value)
    if value < low and not (default_ok and value == -1):
        default = " (or -1 for the default)" if default_ok else ""
        raise ArgumentError(f"Pipeline: argument '{name}' must be at least {low}{default}, got {value}")
    return value


def _default_device_id() -> int | None:
    """The GPU a pipeline uses when none is named: LOCAL_RANK under torchrun, else 0; None without CUDA."""
    if not torch.cuda.is_available():
        return None
    return int(os.environ.get("LOCAL_RANK", 0))


class Pipeline:
    """A graph of operators and the machinery that runs it.

    Arguments follow DALI's ``Pipeline``. ``device_id=None`` makes a CPU-only pipeline; the default picks
    ``LOCAL_RANK`` (or 0) when CUDA is available and CPU-only otherwise. ``num_threads=-1`` takes at most 4
    threads within this process's share of the cores (:func:`sluice._workers.cores_per_rank`: the cores it may run
    on, divided among torchrun's ``LOCAL_WORLD_SIZE`` ranks). ``seed=-1`` draws a seed at random.
    ``prefetch_queue_depth`` finished batches are prepared ahead while the caller consumes the current one;
    ``exec_async=False`` runs every iteration in the caller's thread (easier to debug).
    """

    def __init__(self, batch_size: int = -1, num_threads: int = -1, device_id: int | None = _AUTO,
                 seed: int = -1, exec_pipelined: bool = True, prefetch_queue_depth: int | tuple[int, int] = 2,
                 exec_async: bool = True, enable_checkpointing: bool = False, checkpoint: Any = None,
                 py_num_workers: int = 1, py_start_method: str = "fork", max_batch_size: int = -1,
                 set_affinity: bool = False, bytes_per_sample: int = 0, default_cuda_stream_priority: int = 0,
                 enable_memory_stats: bool = False, output_dtype: Any = None, output_ndim: Any = None):
        # As DALI: -1 (the default) picks a value, other values below 1 are refused; where the user wrote them.
        batch_size = _int_arg("batch_size", batch_size, default_ok=True)
        max_batch_size = _int_arg("max_batch_size", max_batch_size, default_ok=True)
        if batch_size < 1 and max_batch_size < 1:
            raise ArgumentError("Pipeline: batch_size must be a positive integer, got -1 (the default, which needs "
                                "max_batch_size)")
        self.max_batch_size = int(max_batch_size if max_batch_size > 0 else batch_size)
        self.batch_size = self.max_batch_size
        num_threads = _int_arg("num_threads", num_threads, default_ok=True)
        # unset: at most 4, within this rank's share of the host's cores (torchrun's LOCAL_WORLD_SIZE ranks)
        self.num_threads = num_threads if num_threads > 0 else min(4, cores_per_rank())
        if device_id is not None and device_id != _AUTO:
            device_id = _int_arg("device_id", device_id, low=0)
        self.device_id = _default_device_id() if device_id == _AUTO else device_id
        if seed is None or _int_arg("seed", seed, low=-(2 ** 63)) < 0:
            seed = int.from_bytes(os.urandom(7), "little")
        self.seed = int(seed)
        if isinstance(prefetch_queue_depth, dict):
            depth = max(prefetch_queue_depth.get("cpu_size", 2), prefetch_queue_depth.get("gpu_size", 2))
        elif isinstance(prefetch_queue_depth, (tuple, list)):
            depth = max(prefetch_queue_depth)
        else:
            depth = int(prefetch_queue_depth)
        if depth < 1:
            raise ArgumentError("Pipeline: prefetch_queue_depth must be at least 1")
        self.prefetch_queue_depth = depth
        self.exec_async = bool(exec_async and exec_pipelined)
        self.exec_pipelined = bool(exec_pipelined)
        self.enable_checkpointing = bool(enable_checkpointing)
        self.py_num_workers = _int_arg("py_num_workers", py_num_workers)
        if py_start_method not in ("fork", "spawn"):
            raise ArgumentError(f"Pipeline: invalid py_start_method ({py_start_method!r}). Supported values are "
                                "'fork', 'spawn'.")
        self.py_start_method = py_start_method
        self._checkpoint_to_restore = checkpoint
        self._outputs: list[DataNode] | None = None
        self._created_nodes: list[OpNode] = []
        self._conditions: Any = None  # a ConditionStack while a pipeline_def(enable_conditionals=True) traces
        self._executor: Executor | None = None
        self._built = False
        self._graph_defined = False
        self._epoch_ended = False
        self._setup_ended = False  # iter_setup raised StopIteration: no more iterations this epoch
        self._consumed = 0  # iterations handed to the caller since the start
        self._lock = threading.RLock()

    # ---- the current pipeline (for `with pipe:` definitions) --------------------------------------------
    @staticmethod
    def current() -> Pipeline | None:
        return current_pipeline()

    def __enter__(self) -> Pipeline:
        enter_pipeline(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        exit_pipeline()

    def _register_node(self, node: OpNode) -> None:
        self._created_nodes.append(node)

    # ---- defining the graph ---------------------------------------------------------------------------
    def define_graph(self) -> Any:
        """Override in subclasses to return the output DataNodes (the legacy DALI style)."""
        raise NotImplementedError("define the graph with @pipeline_def, set_outputs(), or override define_graph()")

    def iter_setup(self) -> None:
        """Override in subclasses to ``feed_input`` before each iteration (the legacy DALI style). Raising
        StopIteration ends the epoch once the iterations already prepared have come out (as in DALI's
        ``Pipeline._run_once``)."""

    def set_outputs(self, *outputs: DataNode) -> None:
        """Name the DataNodes that ``run()`` returns, in order."""
        flat: list[DataNode] = []
        for out in outputs:
            if isinstance(out, (list, tuple)):
                flat.extend(out)
            else:
                flat.append(out)
        for i, out in enumerate(flat):
            if not isinstance(out, DataNode):
                raise ArgumentError(f"pipeline output {i} is a {type(out).__name__}, not a DataNode; return the "
                                    "results of fn.* calls")
        if not flat:
            raise ArgumentError("a pipeline needs at least one output")
        self._outputs = flat
        self._graph_defined = True

    def _define(self) -> None:
        if self._graph_defined:
            return
        with self:
            outputs = self.define_graph()
        if not isinstance(outputs, (list, tuple)):
            outputs = [outputs]
        self.set_outputs(*outputs)

    # ---- building ---------------------------------------------------------------------------------------
    def build(self) -> None:
        """Check the graph and set up its operators (optional: the first ``run()`` builds)."""
        with self._lock:
            if self._built:
                return
            self._define()
            assert self._outputs is not None
            preserved = [n for n in self._created_nodes if n.const_args.get("preserve")]
            checkpoint = _load_checkpoint(self._checkpoint_to_restore)
            if checkpoint is not None:
                self.seed = checkpoint["pipeline_seed"]  # every derived seed follows the checkpointed run's
            self._executor = Executor(self, self._outputs, preserved)
            self._built = True
            if checkpoint is not None:
                self._restore(checkpoint)
                self._checkpoint_to_restore = None
            _live.add(self)  # closed at exit: threads and codec sessions end before the interpreter's teardown
            if self.exec_async:
                self._executor.start()

    @property
    def executor(self) -> Executor:
        self.build()
        assert self._executor is not None
        return self._executor

    # ---- running ----------------------------------------------------------------------------------------
    def _check_usable(self) -> None:
        ex = self.executor
        if ex.broken is not None:
            raise PipelineBrokenError(f"this pipeline failed earlier and can no longer be used "
                                      f"({ex.broken}); build a new one") from ex.broken

    def schedule_run(self, count: int | None = None) -> None:
        """Ask for iterations to be prepared in the background: ``count`` of them, or by default one (the first
        call then fills the prefetch queue, as DALI's does). Give ``count=1`` when each iteration's data is fed
        just before it (``feed_input``), so that no iteration runs ahead of its data."""
        with self._lock:
            self._check_usable()
            if self._epoch_ended:
                return
            if count is None:
                count = self.prefetch_queue_depth if self._pending() == 0 else 1
            for _ in range(count):
                if not self._prepare_one():
                    break

    def _prepare_one(self) -> bool:
        """``iter_setup()``, then ask for one iteration; False, asking for nothing, once ``iter_setup`` has raised
        StopIteration (then ``outputs()`` ends the epoch when the iterations asked for before have come out)."""
        if self._setup_ended:
            return False
        try:
            self.iter_setup()
        except StopIteration:
            self._setup_ended = True
            return False
        self._request()
        return True

    def _request(self) -> None:
        if self.exec_async:
            self.executor.request(1)
        else:
            self._sync_requested = getattr(self, "_sync_requested", 0) + 1

    def _pending(self) -> int:
        if self.exec_async:
            return self.executor.pending()
        return getattr(self, "_sync_requested", 0)

    def outputs(self) -> tuple[Batch, ...]:
        """The oldest prepared iteration's outputs. Raises StopIteration at the end of the data (sources that
        end), and PipelineError, naming the operator and sample, when an operator failed."""
        with self._lock:
            self._check_usable()
            if self._epoch_ended:
                raise StopIteration("the pipeline reached the end of its data; call reset()")
            if self._setup_ended and self._pending() == 0:
                self._epoch_ended = True
                raise StopIteration("iter_setup ended the epoch; call reset()")
            ex = self.executor
            if self.exec_async:
                item = ex.take()
            else:
                if self._pending() <= 0:
                    raise PipelineError("outputs() called with no iteration scheduled; call schedule_run() first")
                self._sync_requested -= 1
                try:
                    batches, deferred = ex.run_iteration(ex.iteration)
                    item = (batches, None, deferred)
                    ex.iteration += 1
                except BaseException as e:  # noqa: BLE001
                    item = _END if isinstance(e, EndOfEpoch) else _Failure(e)
            if item is _END:
                self._epoch_ended = True
                raise StopIteration("the pipeline reached the end of its data; call reset()")
            if isinstance(item, _Failure):
                ex.broken = item.error
                raise item.error
            batches, event, deferred = item
            for check in deferred:  # operators' checks that waited on GPU work (BatchContext.defer)
                try:
                    check()
                except BaseException as e:
                    ex.broken = e
                    raise
            if event is not None:
                consumer = torch.cuda.current_stream(ex.torch_device)
                consumer.wait_event(event)
                for batch in batches:
                    if batch.device == "gpu":
                        _record_stream(batch, consumer)
            self._consumed += 1
            return batches

    @property
    def epoch_ended(self) -> bool:
        """Whether a source ended the epoch (``run()`` raised StopIteration) and the pipeline waits for reset()."""
        return self._epoch_ended

    @property
    def iterations_consumed(self) -> int:
        """How many iterations the caller has taken (the position a checkpoint records)."""
        return self._consumed

    def run(self) -> tuple[Batch, ...]:
        """Run one iteration and return its outputs (a tuple of Batches, in the order of the outputs)."""
        with self._lock:
            self._check_usable()
            if self._pending() == 0 and not self._epoch_ended:
                self.schedule_run()
            elif not self._epoch_ended:
                # Keep the queue full: one new request for the iteration we take now.
                self._prepare_one()
            return self.outputs()

    def reset(self) -> None:
        """Start a new epoch after StopIteration: sources that ended start over. Readers never end an epoch
        themselves (their data is an endless stream, epochs are counted by the iterators), so iterations they
        already prefetched are kept: a reset between epochs loses no sample."""
        with self._lock:
            ex = self.executor
            if not self._epoch_ended:
                return
            ex.drain()
            for op in ex.operators.values():
                op.reset()
            self._epoch_ended = False
            self._setup_ended = False
            self._sync_requested = 0

    # ---- readers ------------------------------------------------------------------------------------------
    def _readers(self) -> dict[str, dict[str, Any]]:
        ex = self.executor
        metas = {}
        for node in ex.nodes:
            meta = ex.operators[node.id].reader_meta()
            if meta is not None:
                metas[node.name] = meta
        return metas

    def reader_meta(self, name: str | None = None) -> dict[str, Any]:
        """Reader metadata (epoch_size, epoch_size_padded, number_of_shards, shard_id, pad_last_batch,
        stick_to_shard) of the reader called ``name``, or of every reader by name."""
        metas = self._readers()
        if name is None:
            return metas
        if name not in metas:
            raise ArgumentError(f"no reader named '{name}' in this pipeline; readers: {sorted(metas) or 'none'}")
        return metas[name]

    def epoch_size(self, name: str | None = None) -> int | dict[str, int]:
        """The number of samples in an epoch of the reader ``name`` (of every reader by name without one)."""
        if name is None:
            return {k: v["epoch_size"] for k, v in self._readers().items()}
        return self.reader_meta(name)["epoch_size"]

    # ---- external sources ---------------------------------------------------------------------------------
    def feed_input(self, data_node: DataNode | str, data: Any, layout: str | None = None,
                   cuda_stream: Any = None, use_copy_kernel: bool = False) -> None:
        """Give an ``external_source`` (by name or DataNode) the data of the next iteration: a list of samples or
        one tensor/array whose first dimension is the batch. A DataNode moved by ``.gpu()`` feeds its source, as
        in DALI. ``layout`` must have one letter per dimension of the samples (DALI refuses others too). Other
        operators fed by ``feed_input`` (``fn.experimental.inputs.video``: an operator with a ``feed`` method) take
        their data the same way."""
        name = data_node.moved_from().op.name if isinstance(data_node, DataNode) else data_node
        ex = self.executor
        node = ex.node_named(name)
        if node is None or not hasattr(ex.operators[node.id], "feed"):
            names = [n.name for n in ex.nodes if hasattr(ex.operators[n.id], "feed")]
            raise ArgumentError(f"feed_input: no external_source named '{name}' (nor another operator fed by "
                                f"feed_input); external sources and fed inputs: {names or 'none'}")
        ex.operators[node.id].feed(data, layout)  # type: ignore[attr-defined]

    # ---- checkpoints ----------------------------------------------------------------------------------------
    def checkpoint(self, filename: str | os.PathLike | None = None, iteration: int | None = None) -> bytes:
        """The state of every reader, source and random generator, so that a pipeline built with
        ``checkpoint=`` continues exactly where this one is. Written to ``filename`` when given.

        ``iteration`` names an earlier position (an iteration consumed, not yet forgotten: those after the last
        checkpoint), for callers that hand batches on later than they take them (the DataLoader proxy)."""
        if not self.enable_checkpointing:
            raise PipelineError("checkpoint() needs a pipeline built with enable_checkpointing=True")
        with self._lock:
            ex = self.executor
            at = self._consumed if iteration is None else iteration
            if not 0 <= at <= self._consumed or (at < self._consumed and at not in ex.snapshots):
                raise ArgumentError(f"checkpoint(iteration={iteration}): only iterations since the last checkpoint "
                                    f"and up to {self._consumed} can be saved")
            # Iterations prefetched but not consumed are produced again by the restored pipeline.
            state = {"version": 1, "pipeline_seed": self.seed, "iteration": at, "operators": ex.state_at(at)}
            data = pickle.dumps(state)
        if filename is not None:
            with open(filename, "wb") as f:
                f.write(data)
        return data

    def _restore(self, checkpoint: dict[str, Any]) -> None:
        ex = self.executor
        ex.iteration = checkpoint["iteration"]
        self._consumed = checkpoint["iteration"]
        ex.load_state(checkpoint["operators"])

    def restore(self, checkpoint: Any) -> None:
        """Put this pipeline (built or not) back at ``checkpoint`` (bytes, a file, or a loaded dict), as
        ``Pipeline(checkpoint=...)`` would build it. Prefetched iterations are discarded; the operators are made
        anew from the same graph."""
        with self._lock:
            if self._executor is not None:
                self._executor.stop()
            self._executor = None
            self._built = False
            self._epoch_ended = False
            self._setup_ended = False
            self._sync_requested = 0
            self._consumed = 0
            self._checkpoint_to_restore = checkpoint
            self.build()

    # ---- life cycle -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the background threads and worker processes: the executor closes its runtime, which owns them."""
        if self._executor is not None:
            self._executor.stop()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _load_checkpoint(checkpoint: Any) -> dict[str, Any] | None:
    """A checkpoint given as bytes, a path, or an already-loaded dict."""
    if checkpoint is None:
        return None
    if isinstance(checkpoint, (str, os.PathLike)):
        with open(checkpoint, "rb") as f:
            checkpoint = f.read()
    if isinstance(checkpoint, (bytes, bytearray)):
        checkpoint = pickle.load(io.BytesIO(checkpoint))
    if not isinstance(checkpoint, dict) or checkpoint.get("version") != 1:
        raise ArgumentError("checkpoint: not a sluice pipeline checkpoint (expected the bytes of "
                            "Pipeline.checkpoint(), or the file it wrote)")
    return checkpoint


def _record_stream(batch: Batch, stream: torch.cuda.Stream) -> None:
    """Mark the batch's memory as used on the caller's ``stream``, once per allocation: samples that share one
    (a decoder's batch, views of one buffer) need one call; a call per sample, each giving up the GIL, took the
    caller's thread 55 % of its time on a ragged batch of 256."""
    whole = batch.dense if batch.dense is not None else batch.packed[0] if batch.packed is not None else None
    if whole is not None:
        whole.record_stream(stream)
        return
    seen: set[int] = set()
    for sample in batch.samples:
        key = sample.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            sample.record_stream(stream)


_PIPELINE_ARGS = set(inspect.signature(Pipeline.__init__).parameters) - {"self"}


def pipeline_def(fn: Callable | None = None, *, enable_conditionals: bool = False,
                 **pipeline_kwargs: Any) -> Callable:
    """Decorate a function that returns DataNodes; calling it returns a :class:`Pipeline`.

    Pipeline arguments may be given to the decorator and overridden in the call::

        @pipeline_def(batch_size=8, num_threads=2, device_id=None)
        def pipe(root):
            files, labels = fn.readers.file(file_root=root)
            return fn.decoders.image(files), labels

        p = pipe("/data", seed=1)

    ``enable_conditionals=True`` lets ``if``/``elif``/``else``, ``and``, ``or``, ``not`` and ``x if c else y`` take
    DataNodes of one boolean per sample, as in DALI: each branch runs on the samples it gets
    (:mod:`sluice.pipeline.conditionals`)::

        @pipeline_def(enable_conditionals=True, batch_size=8, num_threads=2, device_id=None)
        def flip_some(root):
            files, labels = fn.readers.file(file_root=root)
            images = fn.decoders.image(files)
            if fn.random.coin_flip(dtype=types.BOOL):
                images = fn.flip(images)
            return images, labels
    """

    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        def create(*args: Any, **kwargs: Any) -> Pipeline:
            pipe_args = dict(pipeline_kwargs)
            for key in list(kwargs):
                if key in _PIPELINE_ARGS and key not in inspect.signature(func).parameters:
                    pipe_args[key] = kwargs.pop(key)
            pipe = Pipeline(**pipe_args)
            outputs = _trace(pipe, func, args, kwargs, enable_conditionals)
            if not isinstance(outputs, (list, tuple)):
                outputs = [outputs]
            pipe.set_outputs(*outputs)
            return pipe

        return create

    return decorate(fn) if fn is not None else decorate


def _trace(pipe: Pipeline, func: Callable, args: tuple, kwargs: dict, enable_conditionals: bool) -> Any:
    """Run a pipeline function for ``pipe`` (rewritten for conditionals with ``enable_conditionals``)."""
    if enable_conditionals:
        return conditionals.trace(pipe, func, args, kwargs)
    with pipe:
        return func(*args, **kwargs)
