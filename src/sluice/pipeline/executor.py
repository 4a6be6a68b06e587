"""Runs a built graph: CPU operators across a thread pool, GPU operators on the pipeline's CUDA stream, in two
pipelined stages, with up to ``prefetch_queue_depth`` finished iterations waiting for the training loop.

Stage 1 (the CPU stage) runs every operator that needs only the CPU; stage 2 (the device stage) runs mixed and
GPU operators on the pipeline's stream. Each stage has its own thread, so the CPU decodes iteration k+1 while
the GPU works on iteration k. Every failure is caught where it happens and handed to the consumer, naming the
operator, the sample and its file; the pipeline is then marked broken, and nothing waits forever.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sluice.errors import ArgumentError, EndOfEpoch, PipelineBrokenError, PipelineError, SampleError
from sluice.pipeline.balance import PrepareBalance
from sluice.pipeline.batch import Batch
from sluice.pipeline.cuda_graphs import DEFERRED as _DEFERRED
from sluice.pipeline.cuda_graphs import GraphedRun, graph_runs
from sluice.pipeline.graph import DataNode, OpNode, derive_seed
from sluice.pipeline.passes.fusion import decode_audio_on_device, fuse
from sluice.runtime import Runtime
from sluice.schema import _LIST_TYPES, BatchArgs, BatchContext, Operator, OpSpec, _finish_outputs

log = logging.getLogger(__name__)

__all__ = ["Executor", "EndOfEpoch"]


@dataclass
class _Failure:
    error: BaseException


_END = object()  # an iteration that hit the end of the epoch
_BATCH_SIZE = "batch_size"  # key of the iteration's batch size among a stage's values
_PREPARED = "prepared"  # (_PREPARED, node id): what a node's prepare step returned (Operator.prepare)
_CLOSE = object()
#: How long ``Executor.stop`` waits for each stage thread to finish the operator it is running (see ``stop``).
STOP_WAIT_SECONDS = 60.0


class _Stopped(Exception):
    """Raised in a stage thread between two operators once the executor stops: the iteration is abandoned."""


def topological_order(outputs: list[DataNode], extra: list[OpNode] = ()) -> list[OpNode]:
    """Every node the outputs depend on, each after its inputs."""
    order: list[OpNode] = []
    state: dict[int, int] = {}

    def visit(node: OpNode) -> None:
        mark = state.get(node.id)
        if mark == 2:
            return
        if mark == 1:
            raise PipelineError(f"the graph has a cycle through {node.describe()}")
        state[node.id] = 1
        for x in list(node.inputs) + list(node.arg_inputs.values()):
            visit(x.op)
        state[node.id] = 2
        order.append(node)

    # Iterative deepening is not needed: graphs are shallow (tens of nodes).
    for out in outputs:
        visit(out.op)
    for node in extra:
        visit(node)
    # Sources first: they fix the iteration's batch size, which input-less random operators follow.
    return sorted(order, key=lambda n: 0 if _is_source(n) else 1)


def _is_source(node: OpNode) -> bool:
    return not node.inputs and not node.arg_inputs and node.schema.stateful and not node.schema.random


class _Stage:
    """A list of operator nodes run in order for one iteration, then the ``prepare`` step of the next stage's
    operators whose inputs this stage produced (see ``Operator.prepare``). ``steps`` is what runs: the nodes, or
    on the device stage runs of them replayed as CUDA graphs (:mod:`sluice.pipeline.cuda_graphs`)."""

    def __init__(self, executor: Executor, nodes: list[OpNode], on_gpu: bool):
        self.ex = executor
        self.nodes = nodes
        self.on_gpu = on_gpu
        self.prepares: list[OpNode] = []
        self.steps: list[OpNode | GraphedRun] = list(nodes)

    def run(self, iteration: int, values: dict[tuple[int, int], Batch], stoppable: bool = False) -> None:
        """Run the stage's steps; with ``stoppable`` (a stage thread) the iteration is abandoned between two
        operators once the executor stops, so that ``stop`` waits for one operator, not for a whole iteration."""
        eager = 0
        for step in self.steps:
            if stoppable and self.ex._stopped:
                raise _Stopped()
            if isinstance(step, GraphedRun):
                eager += step.run(iteration, values)
            else:
                self.ex.run_node(step, iteration, values)
                eager += 1
        if self.on_gpu and hasattr(self.ex.pool, "reserve_stage_cores"):
            # a device stage that runs its operators from Python needs cores for them (pool.STAGE_CORES)
            self.ex.pool.reserve_stage_cores(eager)
        if not self.prepares:
            return
        ex = self.ex
        moved = ex.balance.moved  # movable prepare steps left to the device stage (their run does the work)
        movable_seconds = 0.0
        for node in self.prepares:
            movable = node.id in ex.movable_prepares
            if movable and moved:
                continue
            if stoppable and self.ex._stopped:
                raise _Stopped()
            start = time.perf_counter()
            ex.prepare_node(node, iteration, values)
            if movable:
                movable_seconds += time.perf_counter() - start
        if ex.movable_prepares and not moved:
            ex.balance.record_prepare(movable_seconds)


class Executor:
    """Executes a pipeline's graph; owned by :class:`sluice.Pipeline`."""

    def __init__(self, pipeline: Any, outputs: list[DataNode], extra_nodes: list[OpNode] = ()):
        # Nothing here holds the pipeline: the stage threads hold the executor, and a pipeline they kept alive
        # could never be dropped without close() (Pipeline.__del__ stops the executor).
        self.enable_checkpointing = bool(pipeline.enable_checkpointing)
        self._owner_pid = os.getpid()  # the process whose threads, pool and operators' resources these are
        self.outputs = outputs
        self.nodes = topological_order(outputs, list(extra_nodes))
        self.nodes = self._fuse(self.nodes, outputs)
        self.batch_size = pipeline.max_batch_size
        self.device_id = pipeline.device_id
        for node in self.nodes:  # a missing codec is one error naming the operator and the extra, before anything runs
            node.schema.check_requirements(node.device, node.describe())
        self.uses_gpu = any(n.device in ("gpu", "mixed") for n in self.nodes)
        if self.uses_gpu:
            if self.device_id is None:
                gpu_nodes = [n.describe() for n in self.nodes if n.device in ("gpu", "mixed")]
                raise PipelineError(f"this pipeline was built with device_id=None (CPU only) but has GPU stages: "
                                    f"{', '.join(gpu_nodes[:5])}; pass device_id=0 or use device='cpu'")
            if not torch.cuda.is_available():
                gpu_nodes = [n.describe() for n in self.nodes if n.device in ("gpu", "mixed")]
                raise PipelineError(f"no CUDA GPU is available, but the pipeline has GPU stages: "
                                    f"{', '.join(gpu_nodes[:5])}. Use device='cpu' or run on a machine with a GPU.")
            self.torch_device = torch.device("cuda", self.device_id)
        else:
            self.torch_device = torch.device("cpu")
        self._thread_state = threading.local()  # .bound: this stage thread's current device and stream are ours
        #: every thread, stream and codec session of this pipeline (its CPU pool, its stage threads, the backends'
        #: pools, streams and sessions), released by stop()
        self.runtime = Runtime(pipeline.num_threads, self.device_id if self.uses_gpu else None)
        self.stream = self.runtime.stream("pipeline") if self.uses_gpu else None
        self.pool = self.runtime.cpu_pool
        self.operators: dict[int, Operator] = {}
        self.seeds: dict[int, int] = {}
        try:
            self._make_operators(pipeline)
        except BaseException:  # what the operators made so far (pools, sessions, worker processes) ends now
            self._close_operators()
            self.runtime.close()
            raise
        if self.uses_gpu:
            for node in self._feeding_the_device():
                self.operators[node.id].pin_outputs = True
                self.operators[node.id].copy_stream = self.stream
        # Split into a source stage (readers), a CPU stage and a device stage when no CPU operator depends on a GPU
        # result. The readers of iteration k+1 then read while the CPU operators of iteration k decode, as DALI's
        # readers prefetch in a thread of their own; each stage has its thread, all share the pool.
        cpu_nodes, dev_nodes = [], []
        for node in self.nodes:
            (dev_nodes if node.device in ("gpu", "mixed") or dev_nodes and self._needs(node, dev_nodes)
             else cpu_nodes).append(node)
        sources = [n for n in cpu_nodes if _is_source(n)]
        if sources and len(sources) < len(cpu_nodes):
            cpu_stages = [_Stage(self, sources, False), _Stage(self, [n for n in cpu_nodes if not _is_source(n)], False)]
        else:
            cpu_stages = [_Stage(self, cpu_nodes, False)]
        self.stages = [s for s in (*cpu_stages, _Stage(self, dev_nodes, True)) if s.nodes]
        for stage in self.stages:
            if stage.on_gpu and self.stream is not None:
                stage.steps = graph_runs(stage.nodes, self.nodes, outputs, self.run_node)
        #: the CPU stage that runs the device stage's prepare steps, and the device stage (the balance's two sides)
        self.prepare_stage = self.stages[-2] if len(self.stages) >= 2 and self.stages[-1].on_gpu else None
        if self.prepare_stage is not None:
            # Mixed operators' host work on CPU inputs runs in the last CPU stage, overlapping the device stage.
            self.prepare_stage.prepares = [n for n in dev_nodes if self.operators[n.id].prepare is not None
                                           and not self._needs(n, dev_nodes)]
        #: ids of the prepare steps that may run in either stage (Operator.prepare_movable); the balance picks one
        self.movable_prepares = {n.id for n in (self.prepare_stage.prepares if self.prepare_stage else [])
                                 if self.operators[n.id].prepare_movable}
        self.balance = PrepareBalance(bool(self.movable_prepares))
        if log.isEnabledFor(logging.INFO):
            log.info("pipeline built: batch %d, %d threads, %s; %s", self.batch_size, pipeline.num_threads,
                     f"GPU {self.device_id}" if self.uses_gpu else "CPU only",
                     "; ".join(f"{'device' if s.on_gpu else 'CPU'} stage: "
                               + ", ".join(n.describe() for n in s.nodes) for s in self.stages))
        self.iteration = 0  # the next iteration to be produced
        self.snapshots: dict[int, dict[str, Any]] = {}
        self._plans: dict[int, _NodePlan] = {}  # per node, made on its first run (_plan)
        self._threads: list[threading.Thread] = []
        self._queues: list[queue.Queue] = []
        self._ready: deque = deque()
        self._spent: list = []  # finished iterations' values, freed by the consumer's thread (see _pass)
        self._cond = threading.Condition()
        self._requested = 0  # iterations asked of the first stage
        self._outstanding = 0  # iterations asked for and not yet taken (queued, running or finished)
        self._stopped = False
        self._halted = False  # stage 1 met the end of the epoch or a failure; waits for drain()
        self.broken: BaseException | None = None

    def _make_operators(self, pipeline: Any) -> None:
        random_index = 0
        for node in self.nodes:
            # Random operators and seeded readers get a seed of their own, derived from the pipeline's.
            seeded = node.schema.random or "seed" in node.schema.args
            seed = node.const_args.get("seed", -1) if seeded else 0
            if seeded and (seed is None or seed < 0):
                seed = derive_seed(pipeline.seed, random_index)
            random_index += seeded
            self.seeds[node.id] = seed
            spec = OpSpec(node.schema, node.device, node.const_args, node.name, self.batch_size,
                          pipeline.num_threads, self.device_id, seed, weakref.proxy(pipeline), self.runtime)
            self.operators[node.id] = node.schema.kernel_for(node.device)(spec)

    def _close_operators(self) -> None:
        for op in self.operators.values():
            try:
                op.close()
            except Exception:  # noqa: BLE001 - closing must not raise
                log.exception("closing an operator failed")

    # ---- graph helpers -----------------------------------------------------------------------------------
    @staticmethod
    def _needs(node: OpNode, others: list[OpNode]) -> bool:
        ids = {n.id for n in others}
        return any(x.op.id in ids for x in list(node.inputs) + list(node.arg_inputs.values()))

    def _feeding_the_device(self) -> list[OpNode]:
        """The CPU nodes whose outputs reach a GPU or mixed node, directly or through other CPU nodes: their outputs
        go to page-locked memory (``Operator.pin_outputs``). Not only the last CPU node before ``.gpu()``: a
        CPU kernel may hand on views of its input's buffer (``slice`` of audio cuts each signal where it lies), and
        that buffer is what crosses to the GPU."""
        feeding: list[OpNode] = []
        targets = [n for n in self.nodes if n.device in ("gpu", "mixed")]
        for node in reversed(self.nodes):       # consumers come after their inputs
            if node.device == "cpu" and self._needs_any(targets + feeding, node):
                feeding.append(node)
        return feeding

    @staticmethod
    def _needs_any(consumers: list[OpNode], node: OpNode) -> bool:
        return any(x.op.id == node.id for c in consumers for x in list(c.inputs) + list(c.arg_inputs.values()))

    @staticmethod
    def _fuse(nodes: list[OpNode], outputs: list[DataNode]) -> list[OpNode]:
        """Replace chains that one fused kernel does better (crop -> resize -> crop_mirror_normalize on the GPU);
        a node whose output the pipeline returns is never fused away."""
        return decode_audio_on_device(fuse(nodes, outputs=outputs), outputs=outputs)

    def operator(self, name: str) -> Operator:
        for node in self.nodes:
            if node.name == name:
                return self.operators[node.id]
        raise KeyError(name)

    def node_named(self, name: str) -> OpNode | None:
        return next((n for n in self.nodes if n.name == name), None)

    # ---- running one node ---------------------------------------------------------------------------------
    def _plan(self, node: OpNode) -> _NodePlan:
        """What running ``node`` needs that stays the same from batch to batch, worked out on its first run."""
        plan = self._plans.get(node.id)
        if plan is None:
            plan = self._plans[node.id] = _NodePlan(self, node)
        return plan

    def _context(self, node: OpNode, iteration: int,
                 values: dict[tuple[int, int], Batch]) -> tuple[list[Batch], BatchContext, BatchArgs]:
        """A node's input batches, batch context and arguments for ``iteration``."""
        plan = self._plans.get(node.id) or self._plan(node)
        inputs = [values[k] for k in plan.input_keys]
        if plan.arg_inputs:
            batch_size, source_info, per_sample = self._arg_inputs(node, plan, inputs, iteration, values)
        elif inputs:
            batch_size, source_info, per_sample = len(inputs[0]), inputs[0].source_info, {}
        else:
            batch_size = values.get(_BATCH_SIZE, self.batch_size)
            source_info, per_sample = [""] * batch_size, {}
        ctx = BatchContext(plan.op_name, batch_size, source_info, [b._layout for b in inputs], plan.device,
                           self.pool, plan.seed, iteration)
        return inputs, ctx, BatchArgs(plan.const_args, per_sample, batch_size)

    def _arg_inputs(self, node: OpNode, plan: _NodePlan, inputs: list[Batch], iteration: int,
                    values: dict[tuple[int, int], Batch]) -> tuple[int, list[str], dict[str, list[Any]]]:
        """``(batch size, source_info, per-sample argument values)`` of a node with argument inputs, their sizes
        and the schema's ranges checked."""
        batch_size = len(inputs[0]) if inputs else values.get(_BATCH_SIZE, self.batch_size)
        per_sample = {}
        for key, value_key, kind, _ in plan.arg_inputs:
            batch = values[value_key]
            per_sample[key] = _arg_values(kind, batch)
            if inputs and len(batch) != batch_size:
                raise PipelineError(f"{node.describe()}: argument input '{key}' has {len(batch)} samples for a "
                                    f"batch of {batch_size}", node.schema.name)
        if inputs:
            source_info = inputs[0].source_info
        else:
            batch_size = len(next(iter(per_sample.values())))
            source_info = [""] * batch_size
        for key, _, _, arg in plan.arg_inputs:  # the schema's ranges, on each sample's value
            if arg is not None:
                _check_ranges(node, arg, per_sample[key], iteration, source_info)
        return batch_size, source_info, per_sample

    def prepare_node(self, node: OpNode, iteration: int, values: dict[tuple[int, int], Batch]) -> None:
        """Run ``node``'s ``prepare`` step now (in the stage before its own); ``run_node`` hands the result on."""
        inputs, ctx, args = self._context(node, iteration, values)
        with _failures_named(node, iteration):
            values[(_PREPARED, node.id)] = self.operators[node.id].prepare(ctx, *inputs, args=args)

    def run_node(self, node: OpNode, iteration: int, values: dict[tuple[int, int], Batch]) -> None:
        plan = self._plans.get(node.id) or self._plan(node)
        inputs, ctx, args = self._context(node, iteration, values)
        if plan.prepared_key in values:
            ctx.prepared = values.pop(plan.prepared_key)
        deferred = ctx.deferred = []
        try:
            outs = _finish_outputs(plan.schema, plan.spec, plan.op.run(ctx, *inputs, args=args), inputs)
        except StopIteration:
            raise EndOfEpoch() from None
        except (EndOfEpoch, PipelineError):
            raise
        except SampleError as e:  # as _failures_named, written out: a context manager per node costs ~2 us
            raise _wrap(node, e.cause, iteration, e.index, e.source) from e.cause
        except Exception as e:  # noqa: BLE001 - every failure reaches the caller, named
            raise _wrap(node, e, iteration, None, "") from e
        output_keys = plan.output_keys
        if len(outs) != len(output_keys):
            raise PipelineError(f"{node.describe()} produced {len(outs)} outputs, expected {len(node.outputs)}",
                                node.schema.name)
        for key, batch in zip(output_keys, outs):
            values[key] = batch
        if deferred:
            values.setdefault(_DEFERRED, []).extend(_named_check(node, c, iteration) for c in deferred)
        if plan.source and outs and _BATCH_SIZE not in values:
            values[_BATCH_SIZE] = len(outs[0])

    def snapshot(self, iteration: int) -> None:
        """Remember the state of every stateful operator before ``iteration`` runs, so that a checkpoint taken
        while later iterations are already prefetched still resumes at the first one not consumed."""
        if not self.enable_checkpointing:
            return
        self.snapshots[iteration] = self.current_state()

    def state_key(self, position: int, node: OpNode) -> str:
        """How a checkpoint names an operator: its place in the graph and its kind (automatic node names carry a
        process-wide counter, so they differ between the saving and the restoring process)."""
        return f"{position}:{node.schema.name}"

    def current_state(self) -> dict[str, Any]:
        return {self.state_key(i, n): self.operators[n.id].state_dict() for i, n in enumerate(self.nodes)
                if n.schema.stateful}

    def load_state(self, states: dict[str, Any]) -> None:
        for i, node in enumerate(self.nodes):
            key = self.state_key(i, node)
            if node.schema.stateful and key not in states:
                raise PipelineError(f"the checkpoint has no state for {node.describe()} (graph position {i}); "
                                    "was it saved from a pipeline with another graph?")
            if key in states:
                self.operators[node.id].load_state_dict(states[key])

    def state_at(self, iteration: int) -> dict[str, Any]:
        """The operators' state before ``iteration``; forgets older snapshots."""
        for old in [i for i in self.snapshots if i < iteration]:
            del self.snapshots[old]
        if iteration in self.snapshots:
            return self.snapshots[iteration]
        return self.current_state()

    def run_iteration(self, iteration: int) -> tuple[tuple[Batch, ...], list[Callable[[], None]]]:
        """Run the whole graph once, in the calling thread (synchronous execution). Returns the outputs and the
        checks the operators deferred (run them before handing the outputs out)."""
        self.snapshot(iteration)
        values: dict[tuple[int, int], Batch] = {}
        for stage in self.stages:
            self._run_stage(stage, iteration, values)
        return self._collect(values), values.get(_DEFERRED, [])

    def _run_stage(self, stage: _Stage, iteration: int, values: dict, stoppable: bool = False) -> None:
        if stage.on_gpu and self.stream is not None and not getattr(self._thread_state, "bound", False):
            with torch.cuda.device(self.torch_device), torch.cuda.stream(self.stream):
                stage.run(iteration, values, stoppable)
        else:
            stage.run(iteration, values, stoppable)

    def _collect(self, values: dict) -> tuple[Batch, ...]:
        return tuple(values[(out.op.id, out.index)] for out in self.outputs)

    # ---- asynchronous execution ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start one thread per stage; stage k hands iterations to stage k+1 through a queue."""
        if self._threads:
            return
        n = len(self.stages)
        self._queues = [queue.Queue(maxsize=1) for _ in range(max(0, n - 1))]
        for k, stage in enumerate(self.stages):
            kind = "gpu" if stage.on_gpu else "read" if k + 1 < n and not self.stages[k + 1].on_gpu else "cpu"
            self._threads.append(self.runtime.start_thread(f"stage-{kind}", self._stage_loop, k, stage))

    def request(self, n: int = 1) -> None:
        """Ask for ``n`` more iterations."""
        with self._cond:
            self._requested += n
            self._outstanding += n
            self._cond.notify_all()

    def _stage_loop(self, k: int, stage: _Stage) -> None:
        last = k == len(self.stages) - 1
        if stage.on_gpu and self.stream is not None:
            # this thread runs only this stage: its device and stream are set once, not entered per batch (two
            # context managers, about 5 % of the GIL's time in the audio program's device stage)
            torch.cuda.set_device(self.torch_device)
            torch.cuda.set_stream(self.stream)
            self._thread_state.bound = True
        while True:
            if k == 0:
                with self._cond:
                    while not self._stopped and (self._requested <= 0 or self._halted):
                        self._cond.wait()
                    if self._stopped:
                        return
                    self._requested -= 1
                    iteration = self.iteration
                    self.iteration += 1
                    self.snapshot(iteration)
                values: Any = {}
                item: Any = (iteration, values)
            else:
                try:
                    item = self._queues[k - 1].get(timeout=0.1)
                except queue.Empty:
                    if self._stopped:
                        return
                    continue
                if item is _CLOSE:
                    return
                if not isinstance(item, tuple):  # an end-of-epoch or failure marker passes through
                    self._pass(k, item, last)
                    continue
                iteration, values = item
            spent = None
            try:
                started = time.perf_counter()
                self._run_stage(stage, iteration, values, stoppable=True)
                if stage is self.prepare_stage or (stage.on_gpu and self.prepare_stage is not None):
                    self.balance.record_stage(1 if stage.on_gpu else 0, time.perf_counter() - started)
                if stage is self.prepare_stage:
                    self.balance.decide()
                if last:
                    event = None
                    if self.stream is not None:
                        event = torch.cuda.Event()
                        event.record(self.stream)
                    result: Any = (self._collect(values), event, values.get(_DEFERRED, []))
                    # the iteration's other batches are freed by the consumer (_pass, take), not by this thread
                    spent, values, item = [values], None, None
                else:
                    result = (iteration, values)
            except _Stopped:
                return  # stop() was called: nothing waits for this iteration
            except EndOfEpoch:
                result = _END
            except BaseException as e:  # noqa: BLE001 - handed to the consumer
                result = _Failure(e)
            if not self._pass(k, result, last, spent):
                return
            if k == 0 and not isinstance(result, tuple):
                # After an end of epoch or a failure, produce nothing more until reset.
                with self._cond:
                    self._halted = True
            spent = item = values = result = None

    def _pass(self, k: int, item: Any, last: bool, spent: list | None = None) -> bool:
        """Hand ``item`` to the next stage, or (``last``) to the consumer. ``spent``: a list holding the finished
        iteration's values (every batch it made), emptied here under the lock so that the consumer holds the only
        reference: :meth:`take` drops them in the consumer's thread. Freeing a torch tensor gives up the GIL and
        takes it back (its deleter, and the allocator, run without it), a wait on a contended GIL each time; the
        speech program's device stage spent 29 % of its time freeing its iterations' hundred-odd tensors."""
        if last:
            with self._cond:
                self._ready.append(item)
                if spent:
                    self._spent.append(spent.pop())
                self._cond.notify_all()
            return True
        while True:
            try:
                self._queues[k].put(item, timeout=0.1)
                return True
            except queue.Full:
                if self._stopped:
                    return False

    def take(self, timeout: float | None = None) -> Any:
        """The oldest finished iteration: ``(batches, event, deferred checks)``, ``_END`` or a ``_Failure``."""
        with self._cond:
            while not self._ready:
                if not any(t.is_alive() for t in self._threads):
                    raise PipelineBrokenError("the pipeline's worker threads have stopped")
                if not self._cond.wait(timeout=1.0 if timeout is None else timeout) and timeout is not None:
                    raise TimeoutError("no batch arrived in time")
            self._outstanding = max(0, self._outstanding - 1)
            item = self._ready.popleft()
            spent, self._spent = self._spent, []
        del spent   # outside the lock: the finished iterations' batches, freed by this thread (see _pass)
        return item

    def pending(self) -> int:
        """Iterations asked for and not yet taken: waiting, running in a stage, or finished."""
        with self._cond:
            return self._outstanding

    def drain(self) -> None:
        """Forget requested and finished iterations (after the end of an epoch, before a reset)."""
        with self._cond:
            self._requested = 0
            self._outstanding = 0
            self._ready.clear()
            self._spent = []
            self._halted = False
            self._cond.notify_all()

    def stop(self) -> None:
        if os.getpid() != self._owner_pid:
            # A copy made by fork (a DataLoader worker forked while the pipeline lived, whose garbage collector
            # then drops it): fork copied none of its threads, and its worker processes, shared memory and files
            # are the parent's, which this copy must not end; its locks may have been held by a parent's thread.
            return
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for q in self._queues:
            try:
                q.put_nowait(_CLOSE)
            except queue.Full:
                pass
        # Wait for each stage thread to end (it stops between two operators) BEFORE the pool shuts down and the
        # operators close. This wait used to give up after 5 s, less than the iteration a program had prefetched
        # when it ended can take on a slow machine: the daemon stage thread then ran on, with closed operators and
        # a shut pool, into the interpreter's exit, where a thread coming back from C++ code that had released
        # the GIL is torn down mid-call (SIGABRT, "terminate called without an active exception").
        me = threading.current_thread()  # stop() may run in a stage thread (a collected pipeline): not itself
        # nor in a thread of our own pool (a pipeline collected there), which the stage thread may be waiting for
        waits = not (self.runtime.owns(me) and me not in self._threads)
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        for t in self._threads:
            if t is not me and waits:
                t.join(timeout=max(0.0, deadline - time.monotonic()))
        running = [t.name for t in self._threads if t is not me and t.is_alive()]
        if running and waits:
            log.warning("closing the pipeline while %s still runs an operator after %.0f s; it goes on alone",
                        ", ".join(running), STOP_WAIT_SECONDS)
        self._threads = []
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
        self._close_operators()
        # then the codec sessions, the backends' pools and threads; waited for unless this is one of the runtime's
        # threads (see above)
        self.runtime.close(wait=waits)


def _arg_values(kind: Any, batch: Batch) -> list[Any]:
    """The per-sample values of an argument input: Python scalars (lists for list types, arrays for larger
    samples). A dense batch of scalars (``fn.random.coin_flip``, ``fn.random.uniform``) converts in one call."""
    cpu = batch.as_cpu()
    dense = cpu.dense
    if dense is not None and len(dense) and dense[0].numel() == 1 and not isinstance(kind, str):
        values = dense.reshape(-1).tolist()
        if kind in (bool, int, float) and _TOLIST_KIND.get(dense.dtype) is not kind:
            return [kind(v) for v in values]
        return values
    out = []
    for sample in cpu.samples:
        if isinstance(kind, str) and kind in _LIST_TYPES:
            out.append(sample.reshape(-1).tolist())
        elif sample.numel() == 1:
            value = sample.reshape(()).item()
            if kind is bool:
                value = bool(value)
            elif kind is int:
                value = int(value)
            elif kind is float:
                value = float(value)
            out.append(value)
        else:
            out.append(sample.numpy())
    return out


class _NodePlan:
    """What running one node needs that does not change from batch to batch (built on its first run, after the
    executor is set up): the keys of its inputs and outputs among a stage's values, its argument inputs with their
    types and ranges, its device, seed and operator."""

    __slots__ = ("op", "op_name", "schema", "spec", "const_args", "input_keys", "arg_inputs", "output_keys",
                 "prepared_key", "device", "seed", "source")

    def __init__(self, ex: Executor, node: OpNode):
        schema = node.schema
        self.op = ex.operators[node.id]
        self.op_name = schema.name
        self.schema, self.spec = schema, self.op.spec
        self.const_args = node.const_args
        self.input_keys = tuple((x.op.id, x.index) for x in node.inputs)
        #: (name, key of its batch, its type, its Arg when it has a range to check, else None)
        self.arg_inputs = tuple((key, (x.op.id, x.index), schema.args[key].type,
                                 schema.args[key] if schema.args[key].min is not None or schema.args[key].max
                                 is not None else None) for key, x in node.arg_inputs.items())
        self.output_keys = tuple((node.id, i) for i in range(len(node.outputs)))
        self.prepared_key = (_PREPARED, node.id)
        self.device = ex.torch_device if node.device != "cpu" else torch.device("cpu")
        self.seed = ex.seeds[node.id]
        self.source = _is_source(node)


def _check_ranges(node: OpNode, arg: Any, samples: list[Any], iteration: int, source_info: list[str]) -> None:
    """``arg.check_range`` on each sample's value, named as a failing sample is; the values are checked as one
    array (one NumPy call for the batch), and sample by sample only to name the first failing one, or when they
    do not make one array (lists of different lengths)."""
    try:
        values = np.asarray(samples, dtype=np.float64)
    except (TypeError, ValueError):
        values = None
    if values is not None:
        low = arg.min is not None and bool((values < arg.min).any())
        high = arg.max is not None and bool((values > arg.max).any())
        if not (low or high or bool(np.isnan(values).any())):
            return
    for i, value in enumerate(samples):
        try:
            arg.check_range(f"fn.{node.schema.name}", value)
        except ArgumentError as e:
            raise _wrap(node, e, iteration, i, source_info[i] if i < len(source_info) else "") from None


#: The Python type ``tolist`` gives for a tensor's type: its values need no conversion to an argument of that type.
_TOLIST_KIND = {torch.bool: bool, torch.float16: float, torch.bfloat16: float, torch.float32: float,
                torch.float64: float, torch.uint8: int, torch.int8: int, torch.int16: int, torch.int32: int,
                torch.int64: int}


@contextmanager
def _failures_named(node: OpNode, iteration: int):
    """Re-raise a kernel's or a deferred check's failure as a PipelineError naming the operator, the sample and the
    file (an end of epoch and an already named failure pass through)."""
    try:
        yield
    except (EndOfEpoch, PipelineError):
        raise
    except SampleError as e:
        raise _wrap(node, e.cause, iteration, e.index, e.source) from e.cause
    except Exception as e:  # noqa: BLE001 - every failure reaches the caller, named
        raise _wrap(node, e, iteration, None, "") from e


def _named_check(node: OpNode, check: Callable[[], None], iteration: int) -> Callable[[], None]:
    """A deferred check whose failure names the operator, the sample and the file, as a failing kernel's does."""
    def run() -> None:
        with _failures_named(node, iteration):
            check()
    return run


def _wrap(node: OpNode, error: BaseException, iteration: int, sample: int | None, source: str) -> PipelineError:
    where = f" on sample {sample}" if sample is not None else ""
    file = f" (file '{source}')" if source else ""
    msg = (f"error in {node.describe()}{where}{file}, iteration {iteration}: "
           f"{type(error).__name__}: {error}")
    return PipelineError(msg, node.schema.name, sample, source)
