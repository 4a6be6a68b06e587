"""Keep your own ``Dataset``, ``Sampler`` and ``DataLoader``, and still decode and augment on the GPU.

The pipeline runs once, in the main process, on a background thread (one CUDA context, batched GPU work). Its
inputs are ``fn.external_source(name=...)`` nodes without a ``source``. In ``Dataset.__getitem__`` (in the
DataLoader's worker processes, or in the main process with ``num_workers=0``) ``server.proxy(name=value, ...)``
(or, as in DALI, ``server.proxy(value, ...)`` by position, in the order of :attr:`DALIServer.input_names`) returns a small marker object that *carries the sample's inputs* (e.g. the encoded bytes and a frame list): the
data has to reach the main process anyway, and carrying it in the batch needs no second channel between the
workers and the server, so a worker that dies cannot leave the server waiting. The DataLoader collates the
markers of a batch into one :class:`ProxyBatch`; in the main process :class:`DataLoader` (or
``server.produce_data(batch)`` after any DataLoader) feeds them to the pipeline, runs it, and puts the outputs
(torch tensors, on the GPU for GPU outputs) where the markers were, keeping every other field of the batch.

Batches run through the pipeline in the order the DataLoader yields them, ``prefetch`` batches ahead of the
training loop. ``DALIServer(pipeline, deterministic=True)`` (as in DALI; the DataLoader's ``deterministic``
overrides it) makes the DataLoader yield batches in sampler order (``in_order=True``), so a seeded pipeline gives
the same augmentations on every run; with ``deterministic=False`` (the default, as in DALI) batches are taken as
workers finish them, which avoids waiting for a slow worker.

A failing pipeline, a worker that dies, or a server that stops raise an exception in the training loop; nothing
waits forever.

Example::

    @pipeline_def(batch_size=8, num_threads=4, device_id=0)
    def clips():
        video = fn.external_source(name="video")       # encoded bytes, one sample per call of proxy()
        frames = fn.external_source(name="frames")     # the frame numbers of each clip
        return fn.decoders.video(video, frames=frames, device="mixed")

    class Clips(torch.utils.data.Dataset):
        def __init__(self, files, proxy):
            self.files, self.proxy = files, proxy
        def __len__(self):
            return len(self.files)
        def __getitem__(self, i):
            data = np.fromfile(self.files[i], np.uint8)
            return self.proxy(video=data, frames=np.array([0, 2, 4, 5, 6, 7])), i

    with DALIServer(clips()) as server:
        loader = sluice.torch.proxy.DataLoader(server, Clips(files, server.proxy), batch_size=8,
                                               num_workers=4)
        for frames, index in loader:      # frames: CUDA uint8 tensor (8, 6, H, W, 3)
            ...
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import queue
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from typing import Any

import torch
from torch.utils import data as torch_data
from torch.utils.data._utils.collate import collate as _torch_collate
from torch.utils.data._utils.collate import default_collate_fn_map

from sluice.errors import ArgumentError, PipelineError
from sluice.pipeline.pipeline import Pipeline
from sluice.torch import _control
from sluice.torch.iterator import batch_to_torch

log = logging.getLogger(__name__)

__all__ = ["DALIServer", "Server", "DataLoader", "ProxySample", "ProxyBatch", "collate"]

_uids = itertools.count()


class ProxySample:
    """What ``server.proxy(...)`` returns: one sample's named inputs, and which pipeline output stands here."""

    __slots__ = ("inputs", "uid", "output_idx")

    def __init__(self, inputs: dict[str, Any], uid: tuple[int, int], output_idx: int):
        self.inputs = inputs
        self.uid = uid
        self.output_idx = output_idx

    def __getstate__(self):
        return self.inputs, self.uid, self.output_idx

    def __setstate__(self, state):
        self.inputs, self.uid, self.output_idx = state

    def __repr__(self) -> str:
        return f"ProxySample(inputs={sorted(self.inputs)}, output={self.output_idx})"


class ProxyBatch:
    """The collated :class:`ProxySample` s of one batch: per input name, the list of the samples' values."""

    __slots__ = ("inputs", "uids", "output_idx")

    def __init__(self, inputs: dict[str, list[Any]], uids: tuple, output_idx: int):
        self.inputs = inputs
        self.uids = uids
        self.output_idx = output_idx

    def __getstate__(self):
        return self.inputs, self.uids, self.output_idx

    def __setstate__(self, state):
        self.inputs, self.uids, self.output_idx = state

    def __len__(self) -> int:
        return len(self.uids)

    def __repr__(self) -> str:
        return f"ProxyBatch(n={len(self)}, inputs={sorted(self.inputs)}, output={self.output_idx})"


def _collate_proxy(samples: Sequence[ProxySample], *, collate_fn_map: Any = None) -> ProxyBatch:
    first = samples[0]
    for s in samples:
        if not isinstance(s, ProxySample) or s.output_idx != first.output_idx:
            raise TypeError("a batch mixes proxy outputs with other values at the same place; return "
                            "server.proxy(...)'s results at the same place in every sample")
    names = sorted(first.inputs)
    return ProxyBatch({n: [s.inputs[n] for s in samples] for n in names}, tuple(s.uid for s in samples),
                      first.output_idx)


# default_collate (in the workers too: they import this module when they unpickle the proxy) keeps proxy
# samples as one ProxyBatch instead of trying to stack them.
default_collate_fn_map[ProxySample] = _collate_proxy


def collate(batch: list[Any]) -> Any:
    """torch's ``default_collate`` that also collates proxy samples (the default of :class:`DataLoader`)."""
    return _torch_collate(batch, collate_fn_map=default_collate_fn_map)


class _Proxy:
    """The picklable callable behind ``server.proxy``: binds the inputs (by position or by name, as DALI's proxy
    does), checks them and wraps the data."""

    def __init__(self, input_names: Sequence[str], num_outputs: int):
        self.input_names = tuple(input_names)
        self.num_outputs = num_outputs
        # proxy(<input names>): what IPython and inspect.signature show
        self.__signature__ = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                                for n in self.input_names])

    def __call__(self, *args: Any, **inputs: Any) -> ProxySample | tuple[ProxySample, ...]:
        names = list(self.input_names)
        if len(args) > len(names):
            raise ArgumentError(f"proxy() takes the pipeline's {len(names)} external_source input(s) {names} by "
                                f"position or by name; got {len(args)} positional values")
        twice = sorted(set(names[:len(args)]) & set(inputs))
        if twice:
            raise ArgumentError(f"proxy() got the input(s) {twice} both by position and by name (positions follow "
                                f"the order {names})")
        inputs.update(zip(names, args))
        if set(inputs) != set(names):
            missing = [n for n in names if n not in inputs]
            extra = sorted(set(inputs) - set(names))
            raise ArgumentError(f"proxy() takes the pipeline's external_source inputs {names}, by position or by "
                                f"name; missing {missing}, unknown {extra}")
        uid = (os.getpid(), next(_uids))
        refs = tuple(ProxySample(inputs, uid, i) for i in range(self.num_outputs))
        return refs[0] if len(refs) == 1 else refs

    def __repr__(self) -> str:
        return f"sluice proxy({', '.join(self.input_names)})"


class _ServerHandle:
    """What a DALIServer becomes when pickled into a worker (spawn): only its ``proxy``."""

    def __init__(self, proxy: _Proxy):
        self.proxy = proxy


def _find(obj: Any, found: list[ProxyBatch]) -> None:
    if isinstance(obj, ProxyBatch):
        found.append(obj)
    elif isinstance(obj, Mapping):
        for v in obj.values():
            _find(v, found)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _find(v, found)


def _replace(obj: Any, outputs: dict[int, Any]) -> Any:
    if isinstance(obj, ProxyBatch):
        return outputs[id(obj)]
    if isinstance(obj, Mapping):
        items = {k: _replace(v, outputs) for k, v in obj.items()}
        try:
            return type(obj)(items)
        except TypeError:
            return items
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(_replace(v, outputs) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_replace(v, outputs) for v in obj)
    return obj


class _Request:
    __slots__ = ("inputs", "future")

    def __init__(self, inputs: dict[str, list[Any]]):
        self.inputs = inputs
        self.future: Future = Future()


class DALIServer:
    """Runs ``pipeline`` in this process on a background thread for DataLoader workers (see the module doc).

    ``server.proxy`` is the picklable callable to give the Dataset; ``server.produce_data(batch)`` swaps the
    proxy results of a collated batch for the pipeline's outputs: dense torch tensors, or lists of per-sample
    tensors for the output indices in ``ragged_outputs`` (``True``: all), whose samples may differ in shape.
    ``deterministic``: as in DALI, the same order of pipeline runs (and so the same augmentations from a seeded
    pipeline) on every run; :class:`DataLoader` then yields batches in sampler order (see the module doc).
    ``timeout``: seconds to wait for one batch before raising (default: no limit, but a stopped server or a dead
    thread always raises). Use it as a context manager, or call ``start()`` / ``stop()`` (DALI's names,
    ``start_thread()`` / ``stop_thread()``, do the same).

    ``input_names`` lists the pipeline's inputs in the order DALI gives them (and ``proxy``'s positional
    arguments follow): the order of the pipeline's graph, walked from the first output through each operator's
    inputs first, so ``return a + b`` gives ``a, b`` whatever order the ``external_source`` calls were made in.

    Example::

        with DALIServer(pipe, deterministic=True) as server:
            dataset = MyDataset(proxy=server.proxy)      # proxy(images=...) or proxy(encoded_bytes)
            for batch in sluice.torch.proxy.DataLoader(server, dataset, batch_size=16, num_workers=4):
                ...
    """

    def __init__(self, pipeline: Pipeline, deterministic: bool = False, *,
                 ragged_outputs: Sequence[int] | bool = (), timeout: float | None = None):
        if not isinstance(pipeline, Pipeline):
            raise ArgumentError(f"DALIServer needs a sluice Pipeline, got {type(pipeline).__name__}")
        pipeline.build()
        ex = pipeline.executor
        self.pipeline = pipeline
        self.input_names = [n.name for n in ex.nodes
                            if n.schema.name == "external_source" and n.const_args.get("source") is None]
        if not self.input_names:
            raise ArgumentError("DALIServer: the pipeline has no inputs; define them with "
                                "fn.external_source(name='...') without a source")
        self.num_outputs = len(ex.outputs)
        self.deterministic = bool(deterministic)
        self._ragged = set(range(self.num_outputs)) if ragged_outputs is True else set(ragged_outputs or ())
        self.timeout = timeout
        self._proxy = _Proxy(self.input_names, self.num_outputs)
        self._requests: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._stopped = False
        self._lock = threading.Lock()

    @property
    def proxy(self) -> _Proxy:
        """Call it in ``Dataset.__getitem__`` with the pipeline's inputs by name, ``proxy(video=..., frames=...)``,
        or by position in the order of :attr:`input_names`, ``proxy(video_bytes, frames)``. Returns a marker (a tuple of them for several pipeline outputs) that the batch carries to the server."""
        return self._proxy

    def __reduce__(self):
        # Workers get only the proxy: the pipeline, its threads and CUDA state stay in the main process.
        return _ServerHandle, (self._proxy,)

    # ---- life cycle -----------------------------------------------------------------------------------------
    def start(self) -> DALIServer:
        """Start the pipeline thread (done on first use too)."""
        with self._lock:
            self._stopped = False
            if self._thread is None or not self._thread.is_alive():
                self._stopping.clear()
                self._thread = threading.Thread(target=self._loop, name="sluice-proxy-server", daemon=True)
                self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread; requests not yet run fail with an error, and so do new ones until ``start()``."""
        self._stopped = True
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        while True:
            try:
                req = self._requests.get_nowait()
            except queue.Empty:
                break
            req.future.set_exception(PipelineError("the DALIServer was stopped before this batch ran"))

    close = stop

    def start_thread(self) -> None:
        """DALI's name for :meth:`start` (``DALIServer.start_thread`` of DALI's proxy); starting a running server
        does nothing."""
        self.start()

    def stop_thread(self) -> None:
        """DALI's name for :meth:`stop`; as in DALI, it does nothing when the thread was never started."""
        if self._thread is not None:
            self.stop()

    def __enter__(self) -> DALIServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- the pipeline thread ----------------------------------------------------------------------------------
    def _loop(self) -> None:
        pipe = self.pipeline
        if pipe.device_id is not None and torch.cuda.is_available():
            torch.cuda.set_device(pipe.device_id)
        while not self._stopping.is_set():
            try:
                req = self._requests.get(timeout=0.1)
            except queue.Empty:
                continue
            if not req.future.set_running_or_notify_cancel():
                continue
            try:
                req.future.set_result(self._run(req.inputs))
            except BaseException as e:  # noqa: BLE001 - handed to the training loop
                req.future.set_exception(e)

    def _run(self, inputs: dict[str, list[Any]]) -> tuple[list[Any], Any]:
        pipe = self.pipeline
        for name, samples in inputs.items():
            pipe.feed_input(name, samples)
        outputs = _control.run_one(pipe)
        tensors = [batch_to_torch(b, f"output {i}", i in self._ragged) for i, b in enumerate(outputs)]
        event = None
        if any(b.device == "gpu" for b in outputs):
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(pipe.executor.torch_device))
        return tensors, event

    # ---- requests ---------------------------------------------------------------------------------------------
    def _submit(self, batch: ProxyBatch) -> Future:
        if set(batch.inputs) != set(self.input_names):
            raise ArgumentError(f"this batch's proxy inputs {sorted(batch.inputs)} are not the pipeline's "
                                f"{sorted(self.input_names)}; was it made by another server's proxy?")
        if len(batch) > self.pipeline.max_batch_size:
            raise ArgumentError(f"a DataLoader batch of {len(batch)} samples is larger than the pipeline's "
                                f"batch_size {self.pipeline.max_batch_size}; make the pipeline's batch_size at "
                                "least the DataLoader's")
        if self._stopped:
            raise PipelineError("the DALIServer was stopped; start() it again (or use it as a context manager)")
        if self._thread is None or not self._thread.is_alive():
            self.start()
        req = _Request(batch.inputs)
        self._requests.put(req)
        return req.future

    def schedule(self, batch: Any) -> _Pending:
        """Send the proxy batches found in ``batch`` to the pipeline; ``.result()`` of the returned object is
        the batch with the outputs in place."""
        found: list[ProxyBatch] = []
        _find(batch, found)
        runs: dict[tuple, tuple[Future, list[ProxyBatch]]] = {}
        for pb in found:
            if pb.uids in runs:
                runs[pb.uids][1].append(pb)
            else:
                runs[pb.uids] = (self._submit(pb), [pb])
        return _Pending(self, batch, list(runs.values()))

    def produce_data(self, batch: Any) -> Any:
        """``batch`` (from any DataLoader) with every proxy batch replaced by the pipeline's output tensors."""
        return self.schedule(batch).result()

    def _wait(self, future: Future) -> Any:
        waited = 0.0
        while not futures_wait([future], timeout=0.5).done:
            waited += 0.5
            if future.done():
                break
            if self._thread is None or not self._thread.is_alive():
                raise PipelineError("the DALIServer's thread is not running (was the server stopped?)")
            if self.timeout is not None and waited >= self.timeout:
                raise TimeoutError(f"the pipeline gave no batch in {self.timeout} s")
        return future.result()  # the pipeline's own error, if it failed


class _Pending:
    def __init__(self, server: DALIServer, batch: Any, runs: list[tuple[Future, list[ProxyBatch]]]):
        self.server, self.batch, self.runs = server, batch, runs

    def result(self) -> Any:
        outputs: dict[int, Any] = {}
        for future, pbs in self.runs:
            tensors, event = self.server._wait(future)
            if event is not None:
                # The caller's stream on the pipeline's GPU waits for the pipeline; the tensors' memory is not
                # reused before that stream is done with them.
                consumer = torch.cuda.current_stream(self.server.pipeline.executor.torch_device)
                consumer.wait_event(event)
                for t in tensors:
                    for x in (t if isinstance(t, list) else [t]):
                        if x.is_cuda:
                            x.record_stream(consumer)
            for pb in pbs:
                outputs[id(pb)] = tensors[pb.output_idx]
        return _replace(self.batch, outputs)


Server = DALIServer


class DataLoader(torch_data.DataLoader):
    """A torch DataLoader whose batches come out with the proxy results replaced by the pipeline's outputs.

    Takes the :class:`DALIServer` first, then every argument of ``torch.utils.data.DataLoader``;
    ``collate_fn`` defaults to :func:`collate`. ``prefetch``: batches sent to the pipeline ahead of the one
    returned. ``deterministic``: yield batches in sampler order (see the module doc); ``None`` (the default)
    takes the server's ``deterministic``.

    Example::

        loader = DataLoader(server, dataset, batch_size=8, num_workers=2, shuffle=True)
        for images, labels in loader:
            ...
    """

    def __init__(self, server: DALIServer, dataset: Any, *args: Any, prefetch: int = 2,
                 deterministic: bool | None = None, **kwargs: Any):
        if not isinstance(server, DALIServer):
            raise ArgumentError(f"DataLoader needs a DALIServer first, got {type(server).__name__}")
        if prefetch < 1:
            raise ArgumentError("prefetch must be at least 1")
        if deterministic is None:
            deterministic = server.deterministic
        kwargs.setdefault("collate_fn", collate)
        if kwargs.get("num_workers", 0) > 0:
            kwargs.setdefault("in_order", bool(deterministic))
        super().__init__(dataset, *args, **kwargs)
        self.server = server
        self.prefetch = prefetch

    def __iter__(self) -> _ProxyLoaderIter:
        return _ProxyLoaderIter(self.server, super().__iter__(), self.prefetch)


class _ProxyLoaderIter:
    def __init__(self, server: DALIServer, inner: Any, prefetch: int):
        self.server = server
        self.inner = inner
        self.prefetch = prefetch
        self.pending: deque[_Pending] = deque()
        self.exhausted = False

    def __iter__(self) -> _ProxyLoaderIter:
        return self

    def __len__(self) -> int:
        return len(self.inner)

    def __next__(self) -> Any:
        while not self.exhausted and len(self.pending) < self.prefetch:
            try:
                batch = next(self.inner)
            except StopIteration:
                self.exhausted = True
                break
            except (ConnectionError, EOFError) as e:
                # A worker died while sending a batch: stop the others (so that torch's SIGCHLD handler does not
                # raise again later, anywhere) and say what happened.
                self._shutdown()
                raise RuntimeError(f"a DataLoader worker died while sending a batch ({type(e).__name__}: {e})") \
                    from e
            except RuntimeError:
                self._shutdown()
                raise
            self.pending.append(self.server.schedule(batch))
        if not self.pending:
            raise StopIteration
        return self.pending.popleft().result()

    def _shutdown(self) -> None:
        shutdown = getattr(self.inner, "_shutdown_workers", None)  # torch's multiprocessing iterator
        if shutdown is not None:
            try:
                shutdown()
            except Exception:  # noqa: BLE001 - already failing; keep the first error
                log.debug("shutting down DataLoader workers failed", exc_info=True)
