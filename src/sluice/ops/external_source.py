"""``fn.external_source``: data from Python (callables, iterables, generator functions, or ``feed_input``).

Forms of ``source``, as DALI has them:

* a callable with ``batch=True`` (the default): called once per iteration with no argument, with the iteration
  number when it takes one argument, or with a :class:`~sluice.types.BatchInfo` when ``batch_info=True``;
  it returns a batch (a list of samples, or one array/tensor whose first dimension is the batch);
* a callable with ``batch=False``: called once per sample with a :class:`~sluice.types.SampleInfo`;
* an iterable or a generator function: each ``next()`` gives a batch (or a sample with ``batch=False``);
* ``None``: the data comes from ``pipe.feed_input(name, data)``.

Raising ``StopIteration`` ends the epoch: the pipeline's ``run()`` raises StopIteration, and after
``pipe.reset()`` the source starts over (iterables are iterated anew, generator functions called again), unless
``cycle`` is ``True``/``"quiet"``, which restarts silently. With ``num_outputs`` the source returns a tuple.
Samples may be NumPy arrays, torch tensors (CPU or CUDA), bytes, or anything with ``__array__``,
``__cuda_array_interface__`` or ``__dlpack__``.

``parallel=True`` runs a callable (per sample, or per batch with ``batch_info``) or a generator function in
``py_num_workers`` worker processes (the pipeline's argument; start method ``py_start_method``) of the
pipeline's worker-process mechanism (:mod:`sluice._workers`), and returns the data through shared memory,
``prefetch_queue_depth`` iterations ahead. A worker that dies is started again once (a generator function's is
not: its position is lost); an error, or a second death, names the operator and the sample; nothing waits forever.
"""

from __future__ import annotations

import collections
import inspect
import logging
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from sluice import types
from sluice._workers import Worker, WorkerDied, WorkerError, Workers, report
from sluice.errors import ArgumentError, EndOfEpoch, SampleError
from sluice.pipeline.batch import Batch, to_tensor
from sluice.runtime import runtime_of
from sluice.schema import Arg, BatchArgs, BatchContext, Operator, OpSchema, OpSpec

log = logging.getLogger(__name__)

_STOP = "__sluice_end_of_epoch__"

SCHEMA = OpSchema(
    "external_source",
    doc="""Brings data from Python into the pipeline.

    Example::

        @pipeline_def(batch_size=4, num_threads=2, device_id=None)
        def pipe():
            images, labels = fn.external_source(source=my_batches, num_outputs=2)
            return images, labels
    """,
    inputs=0,
    outputs=lambda args: args["num_outputs"] or 1,
    devices=("cpu", "gpu"),
    stateful=True,
    args=[
        Arg("source", object, None, "Callable, iterable or generator function; None to use feed_input."),
        Arg("num_outputs", int, None, "How many outputs the source returns (as a tuple)."),
        Arg("batch", bool, None, "True: the source gives whole batches; False: one sample per call. Default True, "
            "or False with parallel=True."),
        Arg("batch_info", bool, False, "Call a batch callable with a types.BatchInfo."),
        Arg("cycle", object, False, "For iterables: False or 'raise' end the epoch at the end of the data; True or "
            "'quiet' start over silently."),
        Arg("layout", object, None, "Layout of the data (a string, or one per output)."),
        Arg("dtype", object, None, "Expected type (types.DALIDataType, or one per output); checked."),
        Arg("ndim", object, None, "Expected number of dimensions of each sample (or one per output); checked."),
        Arg("no_copy", bool, False, "Accepted for DALI compatibility: sluice never copies data it can share."),
        Arg("parallel", bool, False, "Run the source in worker processes."),
        Arg("prefetch_queue_depth", int, 1, "Batches the parallel workers prepare ahead.", min=1),
        Arg("blocking", bool, True, "Accepted for DALI compatibility."),
        Arg("cuda_stream", object, None, "Accepted for DALI compatibility."),
        Arg("use_copy_kernel", bool, False, "Accepted for DALI compatibility."),
        Arg("repeat_last", bool, False, "With feed_input: reuse the last fed batch when nothing new was fed."),
    ],
    output_layout=lambda args, layouts: _per_output(args["layout"], args["num_outputs"] or 1, "") or "",
)


def _per_output(value: Any, n: int, default: Any) -> list[Any]:
    if value is None:
        return [default] * n
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ArgumentError(f"fn.external_source: got {len(value)} values for {n} outputs")
        return list(value)
    return [value] * n


def _is_generator_function(obj: Any) -> bool:
    return inspect.isgeneratorfunction(obj) or inspect.isgeneratorfunction(getattr(obj, "__call__", None))


def _positional_count(fn: Callable) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 0
    return sum(1 for p in sig.parameters.values()
               if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty)


def _sample_ndims(data: Any) -> list[int]:
    """The number of dimensions of each sample of a batch as sources and feed_input give it (a list of samples, an
    array or tensor with a leading batch dimension, or a Batch), without converting it."""
    if isinstance(data, Batch):
        return [len(s) for s in data.shape()]
    if isinstance(data, (list, tuple)):
        return [_ndim(x) for x in data]
    ndim = getattr(data, "ndim", None)
    return [int(ndim) - 1] if ndim else []


def _ndim(sample: Any) -> int:
    if isinstance(sample, (bytes, bytearray, memoryview)):
        return 1
    if hasattr(sample, "ndim"):
        return int(sample.ndim)
    if hasattr(sample, "shape"):  # __cuda_array_interface__ / DLPack holders
        return len(sample.shape)
    return int(np.ndim(sample))


def check_layout(layout: str | None, data: Any, where: str) -> None:
    """Refuse a layout whose length is not the samples' number of dimensions, as DALI does when it wraps the data
    (``Validate(layout, ndim)`` of ``dali/c_api_2/validation.h``): ``feed_input(encoded_bytes, layout="HWC")`` is
    an error, not a batch of 1-D samples labelled HWC."""
    if not layout:
        return
    for i, ndim in enumerate(_sample_ndims(data)):
        if ndim != len(layout):
            raise ArgumentError(f"{where}: The layout '{layout}' cannot describe {ndim}-dimensional data (sample "
                                f"{i}); give a layout of {ndim} letters, or none")


#: id of a read-only array over immutable memory -> (weak reference to it, its tensor copy), oldest first; at most
#: FROZEN_COPIES_BYTES of copies are kept (a data set held as many such arrays is not doubled in memory)
_FROZEN_COPIES: "collections.OrderedDict[int, tuple[weakref.ref, Any]]" = collections.OrderedDict()
FROZEN_COPIES_BYTES = 1 << 30
_frozen_bytes = 0


def _immutable(array: np.ndarray) -> bool:
    """Whether an array's memory can never change: read-only, and in the end a ``bytes`` object's."""
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return not array.flags.writeable and isinstance(base, bytes)


def _forget_frozen(key: int) -> None:
    global _frozen_bytes
    entry = _FROZEN_COPIES.pop(key, None)
    if entry is not None:
        _frozen_bytes -= entry[1].nbytes


def sample_tensor(x: Any):
    """``to_tensor`` of one sample, except that a read-only array over immutable memory (``np.frombuffer`` of a
    file's bytes), which torch cannot share, is copied once for as long as it lives (within FROZEN_COPIES_BYTES),
    not once per feed: a program feeding one 90 MB video to every sample of every batch copies it once, and the
    decoder finds the same buffer (and its cached index and open container) every time."""
    global _frozen_bytes
    if not (isinstance(x, np.ndarray) and _immutable(x)):
        return to_tensor(x)
    key = id(x)
    hit = _FROZEN_COPIES.get(key)
    if hit is not None and hit[0]() is x:
        _FROZEN_COPIES.move_to_end(key)
        return hit[1]
    tensor = to_tensor(x)
    if tensor.nbytes <= FROZEN_COPIES_BYTES:
        _forget_frozen(key)
        _FROZEN_COPIES[key] = (weakref.ref(x, lambda _ref: _forget_frozen(key)), tensor)
        _frozen_bytes += tensor.nbytes
        while _frozen_bytes > FROZEN_COPIES_BYTES:
            _forget_frozen(next(iter(_FROZEN_COPIES)))
    return tensor


def make_batch(data: Any, layout: str, op: str) -> Batch:
    """A Batch from what a source returned: a list of samples, or an array/tensor with a leading batch dim."""
    if isinstance(data, Batch):
        return data if not layout else data.with_layout(layout)
    if isinstance(data, (list, tuple)):
        return Batch([sample_tensor(x) for x in data], layout)
    tensor = to_tensor(data)
    if tensor.dim() == 0:
        raise ArgumentError(f"{op}: a batch must be a list of samples or have a leading batch dimension, got a scalar")
    return Batch.from_dense(tensor, layout)


@SCHEMA.operator_class("cpu")
@SCHEMA.operator_class("gpu")
class ExternalSource(Operator):
    """Runs in the pipeline's stage thread; a source's StopIteration ends the epoch."""

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        a = spec.args
        self.source = a["source"]
        self.n_out = a["num_outputs"] or 1
        self.multi = a["num_outputs"] is not None
        self.parallel = a["parallel"]
        self.batch = a["batch"] if a["batch"] is not None else not self.parallel
        self.cycle = a["cycle"]
        if self.cycle not in (False, True, "quiet", "raise", "no"):
            raise ArgumentError(f"fn.external_source: invalid cycle ({self.cycle!r}). Supported values are False, "
                                "True, 'quiet', 'raise'.")
        self.arg_layouts = self.layouts = _per_output(a["layout"], self.n_out, "")
        self.dtypes = _per_output(a["dtype"], self.n_out, None)
        self.ndims = _per_output(a["ndim"], self.n_out, None)
        self.name = f"fn.external_source '{spec.name}'"
        self.fed: collections.deque = collections.deque()
        self.last_fed: Any = None
        self.epoch_idx = 0
        self.iteration = 0  # iterations within the epoch
        self.idx_in_epoch = 0
        self._iterator: Any = None
        self._ended = False  # a per-sample source met its end inside the last batch
        self._kind = self._classify()
        self._takes_iteration = self._kind == "batch_callable" and _positional_count(self.source) >= 1
        self._pool: _ParallelSource | None = None
        if self.parallel:
            if self._kind not in ("sample_callable", "batch_callable", "generator_function"):
                raise ArgumentError(f"{self.name}: parallel=True needs a callable or a generator function; an "
                                    "iterable object cannot be moved to worker processes")
            pipe = spec.pipeline
            self._pool = _ParallelSource(_SourceTask(self.source, self._kind, a["batch_info"]),
                                         runtime_of(spec).workers(),
                                         pipe.py_num_workers if pipe else 1, pipe.py_start_method if pipe else "fork",
                                         a["prefetch_queue_depth"], self.name)

    def _classify(self) -> str:
        src = self.source
        if src is None:
            return "feed"
        if _is_generator_function(src):
            return "generator_function"
        if callable(src):
            return "batch_callable" if self.batch else "sample_callable"
        if hasattr(src, "__iter__") or hasattr(src, "__next__"):
            return "iterable"
        raise ArgumentError(f"{self.name}: source must be a callable, an iterable or a generator function, got "
                            f"{type(src).__name__}")

    # ---- feeding --------------------------------------------------------------------------------------------
    def feed(self, data: Any, layout: str | None) -> None:
        if self.source is not None:
            raise ArgumentError(f"{self.name} has a source; feed_input is for external sources without one")
        if not self.multi:
            check_layout(layout or self.arg_layouts[0], data, f"feed_input('{self.spec.name}')")
        self.fed.append((data, layout))

    # ---- one batch ----------------------------------------------------------------------------------------
    def _next_item(self) -> Any:
        if self._iterator is None:
            self._iterator = iter(self.source() if self._kind == "generator_function" else self.source)
        try:
            return next(self._iterator)
        except StopIteration:
            self._iterator = None
            if self.cycle in (True, "quiet"):
                self._iterator = iter(self.source() if self._kind == "generator_function" else self.source)
                return next(self._iterator)
            raise

    def _call_batch(self) -> Any:
        if self.spec.args["batch_info"]:
            return self.source(types.BatchInfo(self.iteration, self.epoch_idx))
        if self._takes_iteration:
            return self.source(self.iteration)
        return self.source()

    def _sample_infos(self) -> list[types.SampleInfo]:
        return [types.SampleInfo(self.idx_in_epoch + i, i, self.iteration, self.epoch_idx)
                for i in range(self.spec.batch_size)]

    def _produce(self) -> list[Any]:
        """The raw data of each output for this iteration."""
        kind = self._kind
        if self._ended:
            raise StopIteration
        if kind == "feed":
            if self.fed:
                data, layout = self.fed.popleft()
                self.last_fed = (data, layout)
            elif self.spec.args["repeat_last"] and self.last_fed is not None:
                data, layout = self.last_fed
            else:
                raise RuntimeError(f"{self.name}: no data was fed for this iteration; call "
                                   f"pipe.feed_input('{self.spec.name}', data) (or do it in iter_setup) before run()")
            # this batch's layout: feed_input's, else the operator's (one feed's layout does not stick)
            self.layouts = _per_output(layout, self.n_out, "") if layout else self.arg_layouts
            return list(data) if self.multi else [data]
        if self._pool is not None:
            if kind == "sample_callable":
                samples = self._pool.get_samples(self._sample_infos())
                return self._columns(self._until_end(samples))
            data = self._pool.get_batch(types.BatchInfo(self.iteration, self.epoch_idx))
            return list(data) if self.multi else [data]
        if kind == "sample_callable":
            samples = []
            for info in self._sample_infos():
                try:
                    samples.append(self.source(info))
                except StopIteration:
                    samples.append(_STOP)
                    break
                except Exception as e:  # noqa: BLE001 - named with its sample
                    raise SampleError(info.idx_in_batch, "", e) from e
            return self._columns(self._until_end(samples))
        if self.batch:
            data = self._call_batch() if kind == "batch_callable" else self._next_item()
            return list(data) if self.multi else [data]
        samples = []
        for _ in range(self.spec.batch_size):
            try:
                samples.append(self._next_item())
            except StopIteration:
                samples.append(_STOP)
                break
        return self._columns(self._until_end(samples))

    def _until_end(self, samples: list[Any]) -> list[Any]:
        """Per-sample sources: the samples before the end of the data form a last, partial batch; the next
        iteration then ends the epoch. Nothing read is dropped."""
        if samples and isinstance(samples[-1], str) and samples[-1] == _STOP:
            samples = samples[:-1]
            self._ended = True
            if not samples:
                raise StopIteration
        return samples

    def _columns(self, samples: list[Any]) -> list[list[Any]]:
        if not self.multi:
            return [samples]
        for s in samples:
            if not isinstance(s, (tuple, list)) or len(s) != self.n_out:
                raise ArgumentError(f"{self.name}: with num_outputs={self.n_out} each sample must be a tuple of "
                                    f"{self.n_out}")
        return [list(col) for col in zip(*samples)]

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> tuple[Batch, ...]:
        try:
            raw = self._produce()
        except StopIteration:
            raise EndOfEpoch() from None
        if len(raw) != self.n_out:
            raise ArgumentError(f"{self.name}: the source gave {len(raw)} outputs, expected num_outputs={self.n_out}")
        outs = []
        for i, data in enumerate(raw):
            batch = make_batch(data, self.layouts[i], self.name)
            check_layout(self.layouts[i], batch, self.name)
            if len(batch) > self.spec.batch_size:
                raise ArgumentError(f"{self.name}: the source gave a batch of {len(batch)} samples, more than the "
                                    f"pipeline's batch_size {self.spec.batch_size}")
            self._check(i, batch)
            if ctx.device.type == "cuda":
                batch = batch.to(ctx.device, non_blocking=True)
            elif batch.device == "gpu":
                raise ArgumentError(f"{self.name}: the source gave CUDA data to a device='cpu' external_source; "
                                    "use device='gpu'")
            outs.append(batch)
        sizes = {len(b) for b in outs}
        if len(sizes) > 1:
            raise ArgumentError(f"{self.name}: outputs have different batch sizes {sorted(sizes)}")
        self.idx_in_epoch += len(outs[0])
        self.iteration += 1
        return tuple(outs)

    def _check(self, i: int, batch: Batch) -> None:
        want = self.dtypes[i]
        if want is not None and len(batch):
            want_t = types.to_torch_dtype(want) if isinstance(want, types.DALIDataType) else want
            if batch.dtype != want_t:
                raise ArgumentError(f"{self.name}: output {i} should be {want!r} (dtype=), but the source gave "
                                    f"{batch.dtype}")
        nd = self.ndims[i]
        if nd is not None:
            bad = [tuple(s) for s in batch.shape() if len(s) != nd]
            if bad:
                raise ArgumentError(f"{self.name}: output {i} should have ndim={nd}, got samples of shape {bad[0]}")

    # ---- epochs and state ------------------------------------------------------------------------------------
    def reset(self) -> None:
        self.epoch_idx += 1
        self.iteration = 0
        self.idx_in_epoch = 0
        self._iterator = None
        self._ended = False
        if self._pool is not None:
            self._pool.reset()

    def state_dict(self) -> dict[str, Any]:
        return {"epoch_idx": self.epoch_idx, "iteration": self.iteration, "idx_in_epoch": self.idx_in_epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch_idx = state["epoch_idx"]
        self.iteration = state["iteration"]
        self.idx_in_epoch = state["idx_in_epoch"]
        if self._kind in ("iterable", "generator_function") and self.iteration:
            # Iterables have no position to restore: replay them to it.
            for _ in range(self.iteration * (1 if self.batch else self.spec.batch_size)):
                self._next_item()
        if self._pool is not None:
            self._pool.restart_at(self.iteration, self.epoch_idx, self.idx_in_epoch)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()



# ---------------------------------------------------------------------------------------------- parallel=True
def _arrays(value: Any) -> Any:
    """A source's output as NumPy arrays, which go back to the pipeline through shared memory."""
    if isinstance(value, (tuple, list)) and not (value and isinstance(value[0], (int, float))):
        return type(value)(_arrays(v) for v in value)
    tensor = to_tensor(value)
    return tensor.detach().numpy() if tensor.device.type == "cpu" else tensor


class _SourceTask:
    """What a worker process runs: the source, called per sample (``("samples", infos)``), per batch
    (``("batch", info)``) or as a generator (``("next", restart)``). It reports the sample it makes, which names it
    when the source raises or its process dies."""

    def __init__(self, source: Any, kind: str, batch_info: bool):
        self.source, self.kind, self.batch_info = source, kind, batch_info
        self._generator: Any = None

    def __call__(self, task: tuple[str, Any]) -> Any:
        what, payload = task
        if what == "samples":
            out = []
            for info in payload:
                report(info.iteration, info.idx_in_batch)
                try:
                    out.append(_arrays(self.source(info)))
                except StopIteration:
                    out.append(_STOP)  # the samples before the end still count
                    break
            return out
        if what == "batch":
            report(payload.iteration, -1)
            try:
                return _arrays(self.source(payload) if self.batch_info else self.source())
            except StopIteration:
                return _STOP
        if self._generator is None or payload == "restart":
            self._generator = iter(self.source())
        try:
            return _arrays(next(self._generator))
        except StopIteration:
            self._generator = None
            return _STOP


class _ParallelSource:
    """The worker processes of one parallel external_source (a slot each of the pipeline's :class:`Workers`),
    and the iterations they prepare ahead."""

    def __init__(self, task: _SourceTask, workers: Workers, num_workers: int, start_method: str, depth: int,
                 name: str):
        self.task, self.kind, self.name = task, task.kind, name
        self.num_workers = max(1, num_workers if self.kind != "generator_function" else 1)
        self.start_method = start_method
        self.depth = max(1, depth)
        self._group = workers  # the runtime's (an operator built outside a pipeline has a runtime of its own)
        self._workers: list[Worker] = []
        self._pending: dict[Any, list[tuple[int, int]]] = {}  # (epoch, iteration) -> [(worker, ticket)]
        self._restart_generator = True

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self._workers if w.pid is not None]

    def _worker(self, k: int) -> Worker:
        while len(self._workers) <= k:
            self._workers.append(self._group.worker(self.task, method=self.start_method, name=self.name,
                                                    redo=self.kind != "generator_function"))
        return self._workers[k]

    def _submit(self, k: int, task: tuple, what: str) -> tuple[int, int]:
        return k, self._worker(k).submit(task, what)

    def _collect(self, tickets: list[tuple[int, int]], iteration: int) -> list[Any]:
        out = []
        for k, ticket in tickets:
            try:
                out.append(self._workers[k].result(ticket))
            except (WorkerError, WorkerDied) as exc:
                progress = exc.progress
                text = str(exc) if isinstance(exc, WorkerDied) else (
                    f"{self.name}: the source raised in a worker process: {exc.type_name}: {exc.message}\n"
                    f"{exc.traceback}")
                if progress is not None and progress[1] >= 0 and progress[0] == iteration:
                    raise SampleError(progress[1], "", RuntimeError(text)) from None
                raise RuntimeError(text) from None
        return out

    # ---- per-sample callables ------------------------------------------------------------------------------
    def _submit_samples(self, infos: list[types.SampleInfo]) -> list[tuple[int, int]]:
        per = -(-len(infos) // self.num_workers)
        chunks = [infos[w * per:(w + 1) * per] for w in range(self.num_workers)]
        return [self._submit(w, ("samples", chunk), f"preparing samples {chunk[0].idx_in_batch}-"
                             f"{chunk[-1].idx_in_batch} of iteration {chunk[0].iteration}")
                for w, chunk in enumerate(chunks) if chunk]

    def get_samples(self, infos: list[types.SampleInfo]) -> list[Any]:
        first = infos[0]
        tickets = self._pending.pop((first.epoch_idx, first.iteration), None) or self._submit_samples(infos)
        n = len(infos)
        for ahead in range(1, self.depth + 1):
            key = (first.epoch_idx, first.iteration + ahead)
            if key not in self._pending:
                base = first.idx_in_epoch + ahead * n
                self._pending[key] = self._submit_samples(
                    [types.SampleInfo(base + i, i, first.iteration + ahead, first.epoch_idx) for i in range(n)])
        samples = []
        for chunk in self._collect(tickets, first.iteration):
            for sample in chunk:
                if isinstance(sample, str) and sample == _STOP:
                    return samples + [_STOP]
                samples.append(sample)
        return samples

    # ---- batch callables and generator functions --------------------------------------------------------------
    def get_batch(self, info: types.BatchInfo) -> Any:
        if self.kind == "generator_function":
            restart = "restart" if self._restart_generator else ""
            self._restart_generator = False
            out = self._collect([self._submit(0, ("next", restart), "running the generator")], info.iteration)[0]
        else:
            key = (info.epoch_idx, info.iteration)
            tickets = self._pending.pop(key, None) or [self._submit_batch(info)]
            for ahead in range(1, self.depth + 1):
                if (info.epoch_idx, info.iteration + ahead) not in self._pending:
                    self._pending[(info.epoch_idx, info.iteration + ahead)] = [
                        self._submit_batch(types.BatchInfo(info.iteration + ahead, info.epoch_idx))]
            out = self._collect(tickets, info.iteration)[0]
        if isinstance(out, str) and out == _STOP:
            raise StopIteration
        return out

    def _submit_batch(self, info: types.BatchInfo) -> tuple[int, int]:
        return self._submit(info.iteration % self.num_workers, ("batch", info),
                            f"preparing iteration {info.iteration}")

    # ---- epochs ------------------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget work prefetched past the end of the epoch."""
        for tickets in self._pending.values():
            for k, ticket in tickets:
                self._workers[k].drop(ticket)
        self._pending.clear()
        self._restart_generator = True

    def restart_at(self, iteration: int, epoch_idx: int, idx_in_epoch: int) -> None:
        self.reset()

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        workers, self._workers = self._workers, []
        self._pending.clear()
        self._group.release(workers)
