"""CUDA graphs for the device stage: a run of GPU operators launched by one replay instead of by Python.

A log-mel pipeline's GPU operators (``audio_resample -> spectrogram -> mel_filter_bank -> to_decibels``) queue
about forty kernels a batch; launching them from Python cost the device stage 4-5 ms of host time a batch, twice
the GPU's own time, and held the GIL that the CPU stage's threads wait for. Their launches depend on nothing but
the shapes of their inputs and their constant arguments, so the executor captures them once into a CUDA graph and
replays that graph for every later batch of the same shapes.

Which operators qualify is declared by each schema (``OpSchema(graph_safe=...)``): on the GPU, with the node's
constant arguments, the kernel reads no host memory that changes between batches, never waits for the GPU
(``.item()``, ``.cpu()``), draws nothing at random, defers no check, and keeps alive every device tensor its
launches read (cached constants). A node with argument inputs (per-sample values from the graph) never qualifies.

The executor groups consecutive qualifying nodes of the device stage into a :class:`GraphedRun`. Per batch:

* The run's inputs (batches made before it, in this stage) are keyed by shape, dtype, layout and device. Only
  dense CUDA batches are keyed; anything else runs the nodes as written (eagerly).
* The first batch of a key runs eagerly (it also makes the kernels' cached constants and cuFFT/cuBLAS plans); the
  second is captured (``torch.cuda.CUDAGraph``, ``thread_local`` capture mode, on the pipeline's stream) and
  replayed; later ones copy their inputs into the graph's static inputs, replay, and copy the outputs the rest of
  the pipeline reads out of the graph's memory (the next replay overwrites it while the training loop may still
  hold this batch). Those copies are device-to-device, a few dozen microseconds for an audio batch.
* A capture that fails (an operator that did wait after all) makes the run eager for good, logged once; so do
  more than MAX_SHAPES distinct keys (ragged data, where every batch has new shapes). At most MAX_GRAPHS graphs
  are kept per run, the least recently used dropped.

The values are those of the eager run: the same kernels on the same data (tests/pipeline/test_cuda_graphs.py).
:data:`ENABLED` = False (or ``SLUICE_EAGER=1``, see :mod:`sluice.env`) runs every node eagerly.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from sluice import env
from sluice.pipeline.batch import Batch

#: The key of an iteration's deferred checks (BatchContext.defer) among a stage's values (the executor's).
DEFERRED = "deferred"

__all__ = ["GraphedRun", "graph_runs", "enabled"]

log = logging.getLogger(__name__)

MAX_GRAPHS = 4      # graphs kept per run (distinct input shapes replayed in turn)
MAX_SHAPES = 16     # distinct input keys a run meets before it stays eager: the shapes change from batch to batch
ENABLED = True      # False: every node runs eagerly (tests compare both ways)


def enabled() -> bool:
    """False where :data:`ENABLED` is False or with ``SLUICE_EAGER=1``."""
    return ENABLED and not env.eager()


def qualifies(node: Any) -> bool:
    """Whether ``node`` may be captured: a GPU node of a graph-safe schema (for its constant arguments), with no
    argument inputs and nothing random."""
    schema = node.schema
    safe = getattr(schema, "graph_safe", False)
    if callable(safe):
        safe = safe(node.const_args)
    return (bool(safe) and node.device == "gpu" and bool(node.inputs) and not node.arg_inputs
            and not schema.random and not schema.stateful)


class _Captured:
    """One captured graph: its static inputs, the outputs read after it (tensor, layout, which input's source
    info they carry) and the graph."""

    __slots__ = ("graph", "inputs", "outputs")

    def __init__(self, graph: torch.cuda.CUDAGraph, inputs: list[torch.Tensor],
                 outputs: list[tuple[tuple[int, int], torch.Tensor, str, int | None]]):
        self.graph, self.inputs, self.outputs = graph, inputs, outputs


class GraphedRun:
    """Consecutive graph-safe GPU nodes of the device stage, run eagerly or by replaying a captured graph.

    ``run_node(node, iteration, values)`` is the executor's way of running one node; ``external`` are the
    ``(op id, output index)`` keys of the batches the run reads from outside it, ``needed`` those of its outputs
    read after it (by later nodes or as pipeline outputs)."""

    def __init__(self, nodes: list[Any], external: list[tuple[int, int]], needed: list[tuple[int, int]],
                 run_node: Callable[[Any, int, dict], None]):
        self.nodes = nodes
        self.external = external
        self.needed = needed
        self._run_node = run_node
        self._graphs: OrderedDict[tuple, _Captured] = OrderedDict()
        self._seen: set[tuple] = set()  # keys met (at most MAX_SHAPES: then the run stays eager)
        self.eager_only = not enabled()
        self.replays = 0  # batches served by a replay (for tests and diagnostics)

    def describe(self) -> str:
        return " -> ".join(n.describe() for n in self.nodes)

    def run(self, iteration: int, values: dict) -> int:
        """Run the nodes for one iteration: replayed, captured, or eagerly; returns how many ran eagerly."""
        key = None if self.eager_only else self._key([values.get(k) for k in self.external])
        if key is None:
            return self._eager(iteration, values)
        captured = self._graphs.get(key)
        if captured is None:
            if key not in self._seen:  # warm-up: the kernels make their constants and plans eagerly
                if len(self._seen) == MAX_SHAPES:
                    log.info("CUDA graphs: %s sees new input shapes batch after batch; it runs eagerly from now on",
                             self.describe())
                    self._stop()
                else:
                    self._seen.add(key)
                return self._eager(iteration, values)
            captured = self._capture(key, iteration, values)
            if captured is None:
                return self._eager(iteration, values)
        else:
            self._graphs.move_to_end(key)
        self._replay(captured, values)
        return 0

    def _eager(self, iteration: int, values: dict) -> int:
        for node in self.nodes:
            self._run_node(node, iteration, values)
        return len(self.nodes)

    @staticmethod
    def _key(inputs: list[Batch | None]) -> tuple | None:
        key = []
        for b in inputs:
            dense = b.dense if isinstance(b, Batch) else None
            if dense is None or not dense.is_cuda:
                return None
            key.append((tuple(dense.shape), dense.dtype, str(dense.device), b.layout()))
        return tuple(key)

    def _capture(self, key: tuple, iteration: int, values: dict) -> _Captured | None:
        batches = [values[k] for k in self.external]
        static = [b.dense.clone() for b in batches]
        local = {k: Batch.from_dense(t, b.layout(), b.source_info) for k, t, b in zip(self.external, static, batches)}
        graph = torch.cuda.CUDAGraph()
        try:
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                self._eager(iteration, local)
            finally:
                graph.capture_end()
        except Exception as e:  # noqa: BLE001 - an operator that cannot be captured runs eagerly
            log.warning("CUDA graphs: capturing %s failed (%s: %s); it runs eagerly from now on", self.describe(),
                        type(e).__name__, e)
            self._stop()
            return None
        outs = [local.get(k) for k in self.needed]
        if local.get(DEFERRED) or not all(isinstance(out, Batch) and out.dense is not None for out in outs):
            log.info("CUDA graphs: %s gives a ragged batch or defers checks; it runs eagerly", self.describe())
            self._stop()
            return None
        outputs = []
        for k, out in zip(self.needed, outs):
            origin = next((j for j, b in enumerate(batches) if b.source_info == out.source_info), None)
            outputs.append((k, out.dense, out.layout(), origin))
        captured = _Captured(graph, static, outputs)
        self._graphs[key] = captured
        while len(self._graphs) > MAX_GRAPHS:
            self._graphs.popitem(last=False)
        log.debug("CUDA graphs: captured %s for inputs %s", self.describe(), key)
        return captured

    def _replay(self, captured: _Captured, values: dict) -> None:
        batches = [values[k] for k in self.external]
        for static, b in zip(captured.inputs, batches):
            static.copy_(b.dense, non_blocking=True)
        captured.graph.replay()
        for k, dense, layout, origin in captured.outputs:
            source = batches[origin].source_info if origin is not None else None
            values[k] = Batch.from_dense(dense.clone(), layout, source)
        self.replays += 1

    def _stop(self) -> None:
        self.eager_only = True
        self._graphs.clear()
        self._seen.clear()


def graph_runs(nodes: list[Any], later: list[Any], outputs: list[Any],
               run_node: Callable[[Any, int, dict], None]) -> list[Any]:
    """The device stage's steps: its nodes in order, each maximal run of qualifying nodes replaced by a
    :class:`GraphedRun` (``later``: every node of the pipeline, to find who reads a run's outputs; ``outputs``:
    the pipeline's output DataNodes)."""
    if not enabled() or not torch.cuda.is_available():
        return list(nodes)
    steps: list[Any] = []
    run: list[Any] = []

    def close() -> None:
        if not run:
            return
        steps.append(_make_run(list(run), later, outputs, run_node))
        run.clear()

    for node in nodes:
        if qualifies(node):
            run.append(node)
        else:
            close()
            steps.append(node)
    close()
    return steps


def _make_run(run: list[Any], everyone: list[Any], outputs: list[Any], run_node) -> GraphedRun:
    inside = {n.id for n in run}
    external: list[tuple[int, int]] = []
    for node in run:
        for x in list(node.inputs) + list(node.arg_inputs.values()):
            k = (x.op.id, x.index)
            if x.op.id not in inside and k not in external:
                external.append(k)
    needed: list[tuple[int, int]] = []
    read_after = [(x.op.id, x.index) for n in everyone if n.id not in inside
                  for x in list(n.inputs) + list(n.arg_inputs.values())]
    read_after += [(d.op.id, d.index) for d in outputs]
    for node in run:
        for i in range(len(node.outputs)):
            if (node.id, i) in read_after and (node.id, i) not in needed:
                needed.append((node.id, i))
    return GraphedRun(run, external, needed, run_node)
