"""Operator schemas and the registry: the single source of every operator's arguments, docs and checks.

An operator is declared once, as an :class:`OpSchema`, in the file that also holds its kernels::

    SCHEMA = OpSchema("flip", doc="Flips images.", devices=("cpu", "gpu"), args=[
        Arg("horizontal", int, 1, "Flip along the width.", per_sample=True),
    ])

    @SCHEMA.sample_kernel("cpu")
    def flip_cpu(ctx, image, *, horizontal, **_): ...

From the schema the registry builds ``fn.flip`` and ``ops.Flip`` (with real signatures and docstrings), the
argument validation (unknown names, types, choices, required values) and the error messages. Kernels are pure:
the executor gives them their inputs, their per-sample argument values and, for random operators, a seeded
generator.
"""

from __future__ import annotations

import difflib
import enum
import inspect
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from sluice import sequences as _seq
from sluice import types
from sluice.errors import ArgumentError, SampleError
from sluice.pipeline.batch import Batch
from sluice._optional import check as _check_installed

__all__ = ["REQUIRED", "Arg", "OpSchema", "Operator", "OpSpec", "BatchArgs", "BatchContext", "SampleContext",
           "REGISTRY", "get_schema", "DEVICES", "FusionStage", "DeviceForm", "fused_operator"]

DEVICES = ("cpu", "gpu", "mixed")


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

_LIST_TYPES = {"int_list": int, "float_list": float, "str_list": str, "bool_list": bool}


@dataclass
class Arg:
    """One argument of an operator.

    ``type`` is ``bool``, ``int``, ``float``, ``str``, ``"int_list"``, ``"float_list"``, ``"str_list"``,
    ``"bool_list"``, an enum class (``types.DALIDataType`` ...), or ``object`` (anything, checked by the kernel).
    ``per_sample`` arguments may be given as DataNodes whose samples hold the per-sample values.
    ``min`` / ``max`` bound the value (every element of a list), inclusive: a constant out of range is refused
    where the user wrote it (``fn.x(...)``), a per-sample value when its sample runs, naming the sample.
    """

    name: str
    type: Any
    default: Any = None
    doc: str = ""
    per_sample: bool = False
    choices: Sequence[Any] | None = None
    min: float | None = None
    max: float | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def type_name(self) -> str:
        if isinstance(self.type, str):
            return self.type
        if isinstance(self.type, type) and issubclass(self.type, enum.Enum):
            return self.type.__name__
        return getattr(self.type, "__name__", str(self.type))

    def convert(self, op: str, value: Any) -> Any:
        """Check ``value`` against the declared type and return it normalised (a list for list types, a float
        for floats, ...). Raises :class:`ArgumentError` naming the operator and the argument."""
        if value is None:
            return None
        try:
            out = _convert(self.type, value)
        except (TypeError, ValueError) as e:
            raise ArgumentError(f"{op}: argument '{self.name}' expects {self.type_name()}, got {value!r} "
                                f"({type(value).__name__}){': ' + str(e) if str(e) else ''}") from None
        if self.choices is not None and out not in self.choices:
            raise ArgumentError(f"{op}: invalid {self.name} ({value!r}). Supported values are "
                                f"{', '.join(repr(c) for c in self.choices)}.")
        self.check_range(op, out)
        return out

    def check_range(self, op: str, value: Any) -> None:
        """Raise :class:`ArgumentError` when ``value`` (a scalar, a list, or an array of per-sample values) has an
        element outside ``[min, max]``."""
        if (self.min is None and self.max is None) or value is None:
            return
        try:
            values = np.asarray(value, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            return  # not numbers: the kernel's own checks speak
        low = self.min is not None and bool((values < self.min).any())
        high = self.max is not None and bool((values > self.max).any())
        if low or high or bool(np.isnan(values).any()):
            raise ArgumentError(f"{op}: argument '{self.name}' must be {self.range_text()}, got {_show(value)}")

    def range_text(self) -> str | None:
        """``min`` / ``max`` in words ("at least 1"), for the errors and the docs; None without a range."""
        if self.min is not None and self.max is not None:
            return f"between {_num(self.min)} and {_num(self.max)}"
        if self.min is not None:
            return f"at least {_num(self.min)}"
        if self.max is not None:
            return f"at most {_num(self.max)}"
        return None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _show(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return repr(value.tolist()) if value.size <= 8 else f"an array of shape {value.shape}"
    return repr(value)


def _convert(kind: Any, value: Any) -> Any:
    if isinstance(kind, str):
        elem = _LIST_TYPES[kind]
        if isinstance(value, torch.Tensor):
            value = value.tolist()
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if not isinstance(value, (list, tuple)):
            value = [value]  # a scalar stands for a one-element list, as in DALI
        return [_convert(elem, v) for v in value]
    if kind is object:
        return value
    if isinstance(value, (np.generic, torch.Tensor)) and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if kind is bool:
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return bool(value)
        raise TypeError("")
    if kind is int:
        if isinstance(value, bool):
            return int(value)  # DALI takes mirror=False for an integer argument
        if not isinstance(value, (int, np.integer)):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise TypeError("")
        return int(value)
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError("")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise TypeError("")
        return value
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        if isinstance(value, kind):
            return value
        if kind is types.DALIDataType and isinstance(value, torch.dtype):
            return types.from_torch_dtype(value)
        if isinstance(value, str):
            for member in kind:
                if value in (member.name, member.value) or value.upper() == member.name:
                    return member
        raise TypeError(f"use one of {', '.join('types.' + m.name for m in kind)}")
    raise TypeError(f"unknown argument type {kind!r}")


# ------------------------------------------------------------------------------------------------------------
# What kernels receive
# ------------------------------------------------------------------------------------------------------------
class BatchArgs:
    """The argument values of one batch: constants, and per-sample values fed from DataNodes."""

    def __init__(self, const: dict[str, Any], per_sample: dict[str, list[Any]], batch_size: int):
        self._const = const
        self._per_sample = per_sample
        self.batch_size = batch_size

    def __getitem__(self, name: str) -> list[Any]:
        """The values of ``name`` for every sample of the batch."""
        if name in self._per_sample:
            return self._per_sample[name]
        return [self._const[name]] * self.batch_size

    def __contains__(self, name: str) -> bool:
        return name in self._const or name in self._per_sample

    def varies(self) -> bool:
        """Whether any argument has per-sample values (else every sample's arguments are the constants)."""
        return bool(self._per_sample)

    def is_const(self, name: str) -> bool:
        """Whether ``name`` has one value for the whole batch."""
        return name not in self._per_sample

    def const(self, name: str) -> Any:
        """The single value of ``name``; raises if it varies per sample."""
        if name in self._per_sample:
            values = self._per_sample[name]
            if all(_same(v, values[0]) for v in values):
                return values[0]
            raise ArgumentError(f"argument '{name}' must be the same for the whole batch here, but it varies per "
                                "sample")
        return self._const[name]

    def sample(self, i: int) -> dict[str, Any]:
        """All argument values of sample ``i``."""
        out = dict(self._const)
        for name, values in self._per_sample.items():
            out[name] = values[i]
        return out

    def samples(self) -> list[dict[str, Any]]:
        """``[sample(i) for i in range(batch_size)]``, to be read, not changed: with no per-sample values every
        sample shares one dict (a batch of 64 built 64 equal dicts)."""
        if not self._per_sample:
            return [dict(self._const)] * self.batch_size
        return [self.sample(i) for i in range(self.batch_size)]

    def names(self) -> list[str]:
        return sorted(set(self._const) | set(self._per_sample))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def _rng(seed: int, iteration: int, sample: int = 0) -> np.random.Generator:
    """A counter-based generator: Philox keyed by the operator's seed, its counter set by (iteration, sample).
    Independent streams with no seed hashing (a third cheaper than default_rng's SeedSequence per sample)."""
    return np.random.Generator(np.random.Philox(key=seed & 0xFFFFFFFFFFFFFFFF, counter=[0, 0, sample, iteration]))


class _RekeyedRng:
    """One Philox generator re-keyed per sample: the values of ``_rng(seed, iteration, sample)`` without building
    a generator each time (~3 us instead of ~15 us here). Each call invalidates the generator it returned before."""

    def __init__(self) -> None:
        self._bits = np.random.Philox(key=0)
        self._generator = np.random.Generator(self._bits)
        self._state = self._bits.state

    def __call__(self, seed: int, iteration: int, sample: int) -> np.random.Generator:
        state = self._state
        state["state"] = {"counter": np.array([0, 0, sample, iteration], np.uint64),
                          "key": np.array([seed & 0xFFFFFFFFFFFFFFFF, 0], np.uint64)}
        state["buffer_pos"], state["has_uint32"], state["uinteger"] = 4, 0, 0  # nothing buffered: a fresh start
        self._bits.state = state
        return self._generator


@dataclass
class BatchContext:
    """What a batch kernel knows beyond its inputs."""

    op_name: str
    batch_size: int
    source_info: list[str]
    layouts: list[str]
    device: torch.device
    thread_pool: Executor | None
    seed: int = 0
    iteration: int = 0
    _rng: np.random.Generator | None = field(default=None, repr=False)
    #: Checks to run before this iteration reaches the caller (set by the executor; None: run them at once).
    deferred: list[Callable[[], None]] | None = field(default=None, repr=False)
    _rekeyed: _RekeyedRng | None = field(default=None, repr=False)
    #: What the operator's ``prepare`` returned for this batch, when the executor ran it ahead (else None).
    prepared: Any = field(default=None, repr=False)
    #: When the batch holds the frames of sequences (:mod:`sluice.sequences`): the sample each frame belongs to.
    #: Random draws are the sample's, so every frame of a clip gets the same window. None: item i is sample i.
    sample_ids: list[int] | None = field(default=None, repr=False)
    #: Set for a CPU kernel whose outputs a GPU operator takes (``Operator.pin_outputs``): it may put them in
    #: page-locked memory of GPU ``device_id`` (``sluice.ops._host.batch_buffer``), which the GPU copies by DMA.
    pin_outputs: bool = False
    device_id: int | None = None

    def layout_of(self, batch: Batch) -> str:
        """``batch``'s layout, or else the one the graph knows for the first input (kernels given lists of samples,
        which carry none)."""
        return batch.layout() or (self.layouts[0] if self.layouts else "")

    @property
    def rng(self) -> np.random.Generator:
        """A generator for this operator and this batch: the same on every run, whatever the threads."""
        if self._rng is None:
            self._rng = _rng(self.seed, self.iteration)
        return self._rng

    def sample_rng(self, i: int, reuse: bool = False) -> np.random.Generator:
        """A generator for sample ``i`` of this batch, independent of the order in which samples run (the same
        values as the sample kernel's ``SampleContext.rng``). With ``reuse`` one generator of this context is
        re-keyed for the sample, which is cheaper; it is valid until the next ``sample_rng(..., reuse=True)`` call,
        so use it at once, in one thread. For the frames of sequences, ``i`` is a frame and the generator is its
        sample's."""
        if self.sample_ids is not None:
            i = self.sample_ids[i]
        if not reuse:
            return _rng(self.seed, self.iteration, i + 1)
        if self._rekeyed is None:
            self._rekeyed = _RekeyedRng()
        return self._rekeyed(self.seed, self.iteration, i + 1)

    def defer(self, check: Callable[[], None]) -> None:
        """Run ``check`` (it raises, e.g. a SampleError, when the batch is bad) before this iteration's outputs
        are handed to the caller rather than now: a check that waits for GPU work then does not hold up the
        stage, and by the time the caller takes the batch it has usually finished. Outside a pipeline the check
        runs at once."""
        if self.deferred is None:
            check()
        else:
            self.deferred.append(check)


@dataclass
class SampleContext:
    """What a per-sample kernel knows beyond its inputs."""

    op_name: str
    index: int
    source_info: str
    layout: str
    seed: int = 0
    iteration: int = 0
    _rng: np.random.Generator | None = field(default=None, repr=False)

    @property
    def rng(self) -> np.random.Generator:
        """A generator for this sample (same seed, same values, whatever thread runs it)."""
        if self._rng is None:
            self._rng = _rng(self.seed, self.iteration, self.index + 1)
        return self._rng


@dataclass
class OpSpec:
    """How one node of a pipeline's graph was set up: its constant arguments and the pipeline's settings."""

    schema: OpSchema
    device: str
    args: dict[str, Any]
    name: str
    batch_size: int
    num_threads: int
    device_id: int | None
    seed: int
    pipeline: Any = None  # the Pipeline, for operators that need more (external_source)
    #: the pipeline's :class:`sluice.runtime.Runtime`: its CPU pool, the thread pools and codec sessions the
    #: operator's backends open (None outside a pipeline: :func:`sluice.runtime.runtime_of` makes one)
    runtime: Any = None


class Operator:
    """Runs one node of a graph. Kernels declared as functions are wrapped in subclasses of this; stateful
    operators (readers, sources) subclass it directly."""

    #: Set by the executor on a CPU operator whose outputs a GPU or mixed operator takes: it may then put them in
    #: page-locked memory, which the GPU copies from by DMA (readers.file reads its batch into one such buffer).
    pin_outputs: bool = False
    #: With ``pin_outputs``: the CUDA stream on which the GPU operators copy those outputs (memory an operator
    #: reuses must wait for the copies queued on it).
    copy_stream: Any = None
    #: A mixed operator may define ``prepare(ctx, *inputs, args)``: the host work of a batch that needs only its
    #: CPU inputs (header probes, drawing crop windows). The executor then runs it in the CPU stage, where it
    #: overlaps the device stage's previous batch, and hands its result to ``run`` as ``ctx.prepared``; ``run``
    #: does the work itself when ``ctx.prepared`` is None (the operator called outside a pipeline). GPU work it
    #: starts goes on streams of the operator's own (the pipeline's stream is the device stage's), and ``run``
    #: makes the pipeline's stream wait for it (the image decoders' ``GpuImageDecoder.start`` / ``finish``).
    prepare: Callable[..., Any] | None = None
    #: Whether ``prepare`` is plain host work whose result is the same in either stage, and ``run`` calls it when
    #: ``ctx.prepared`` is None: the executor may then leave it to the device stage when the CPU stage is the slower
    #: one (:mod:`sluice.pipeline.balance`).
    prepare_movable: bool = False

    def __init__(self, spec: OpSpec):
        self.spec = spec

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch | tuple[Batch, ...]:
        raise NotImplementedError

    # Readers and sources override these.
    def reader_meta(self) -> dict[str, Any] | None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def reset(self) -> None:
        """Start a new epoch (sources that end epochs with StopIteration)."""

    def close(self) -> None:
        """Release resources (worker processes, files)."""


class OutputFinisher:
    """What the executor does to one operator's outputs before handing them on: checks that they are batches, gives
    each the layout the schema declares where the kernel set none (worked out once per set of input layouts), and
    the first input's ``source_info`` where the kernel gave none."""

    __slots__ = ("schema", "args", "_layouts")

    def __init__(self, schema: OpSchema, spec: OpSpec):
        self.schema = schema
        self.args = spec.args
        self._layouts: dict[tuple[tuple[str, ...], int], list[str]] = {}

    def __call__(self, outputs: Any, inputs: Sequence[Batch]) -> tuple[Batch, ...]:
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        key = (tuple([b._layout for b in inputs]), len(outs))
        layouts = self._layouts.get(key)
        if layouts is None:
            layouts = self._layouts[key] = self.schema.output_layouts(self.args, list(key[0]), len(outs))
        source = inputs[0].source_info if inputs else None
        if source is not None and not any(source):
            source = None  # nothing to hand on: an output's own source_info is as empty
        if len(outs) == 1:  # most operators: no list to build
            return (self._finish(outs[0], layouts[0], source),)
        return tuple([self._finish(batch, layout, source) for batch, layout in zip(outs, layouts)])

    def _finish(self, batch: Any, layout: str, source: list[str] | None) -> Batch:
        if not isinstance(batch, Batch):
            raise TypeError(f"{self.schema.name}: kernel returned {type(batch).__name__}, expected a Batch")
        if layout and not batch._layout:
            batch = batch.with_layout(layout)
        if source is not None and not any(batch.source_info) and len(batch) == len(source):
            batch.source_info = list(source)
        return batch


def _finish_outputs(schema: OpSchema, spec: OpSpec, outputs: Any, inputs: Sequence[Batch]) -> tuple[Batch, ...]:
    """:class:`OutputFinisher` of ``spec`` (kept on it) applied to a kernel's ``outputs``: how tests hand a kernel's
    outputs on as the executor does."""
    finisher = spec.__dict__.get("_finisher")
    if finisher is None:
        finisher = spec.__dict__["_finisher"] = OutputFinisher(schema, spec)
    return finisher(outputs, inputs)


def _sample_operator(schema: OpSchema, device: str, fn: Callable) -> type[Operator]:
    class SampleKernelOperator(Operator):
        kernel = staticmethod(fn)

        def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs):
            n = ctx.batch_size
            layout = ctx.layouts[0] if ctx.layouts else ""

            ids = ctx.sample_ids
            # without per-sample values every sample's arguments are one dict (read only: ** copies it)
            shared = None if args.varies() else args.sample(0)

            def one(i: int):
                # the frames of a sequence share their sample's index, and so its random draws
                sctx = SampleContext(ctx.op_name, i if ids is None else ids[i],
                                     ctx.source_info[i] if ctx.source_info else "", layout, ctx.seed, ctx.iteration)
                try:
                    out = fn(sctx, *[b[i] for b in inputs], **(args.sample(i) if shared is None else shared))
                except Exception as e:  # noqa: BLE001 - re-raised with the sample named
                    raise SampleError(i, sctx.source_info, e) from e
                return out if isinstance(out, tuple) else (out,)

            # GPU sample kernels stay on the stage's thread, where the pipeline's CUDA stream is current.
            pool = ctx.thread_pool if ctx.device.type == "cpu" else None
            if pool is not None and n > 1:
                results = list(pool.map(one, range(n)))
            else:
                results = [one(i) for i in range(n)]
            num_out = schema.num_outputs(self.spec.args, len(inputs))
            if n == 0:
                return tuple(Batch([]) for _ in range(num_out))
            columns = list(zip(*results))
            return tuple(Batch([torch.as_tensor(x) if not isinstance(x, torch.Tensor) else x for x in col])
                         for col in columns)

    SampleKernelOperator.__name__ = f"{_camel(schema.name)}_{device}"
    return SampleKernelOperator


def _sequence_operator(schema: OpSchema, op_class: type[Operator]) -> type[Operator]:
    """``op_class`` taking sequences as ``schema.sequences`` says (:mod:`sluice.sequences`)."""

    class SequenceOperator(op_class):  # type: ignore[valid-type, misc]
        def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs):
            if not inputs or "F" not in inputs[0]._layout:  # no sequence: needs_frames would say None
                return super().run(ctx, *inputs, args=args)
            counts = _seq.needs_frames(schema, inputs, args)
            if counts is None:
                return super().run(ctx, *inputs, args=args)
            return _seq.run_as_frames(schema, self.spec, super().run, ctx, inputs, args, counts)

    SequenceOperator.__name__ = SequenceOperator.__qualname__ = op_class.__name__
    SequenceOperator.__module__ = op_class.__module__  # where the operator is written (the docs group it by that)
    return SequenceOperator


def _batch_operator(schema: OpSchema, device: str, fn: Callable) -> type[Operator]:
    class BatchKernelOperator(Operator):
        kernel = staticmethod(fn)

        def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs):
            if self.pin_outputs:
                ctx.pin_outputs, ctx.device_id = True, self.spec.device_id
            return fn(ctx, *inputs, args=args)

    BatchKernelOperator.__name__ = f"{_camel(schema.name)}_{device}"
    return BatchKernelOperator


_CLASS_NAMES = {"mfcc": "MFCC", "random_bbox_crop": "RandomBBoxCrop", "coco": "COCO", "rms": "RMS",
                "tfrecord": "TFRecord", "dl_tensor_python_function": "DLTensorPythonFunction"}  # DALI's spellings


def _camel(name: str) -> str:
    """The ops class name of an operator: ``crop_mirror_normalize`` -> ``CropMirrorNormalize``."""
    leaf = name.split(".")[-1]
    return _CLASS_NAMES.get(leaf) or "".join(part[:1].upper() + part[1:] for part in leaf.split("_"))


# ------------------------------------------------------------------------------------------------------------
# Schemas
# ------------------------------------------------------------------------------------------------------------
REGISTRY: dict[str, OpSchema] = {}
_REGISTRY_LOCK = threading.Lock()

_COMMON_ARGS = (
    Arg("preserve", bool, False, "Keep the operator even if its outputs are unused."),
    Arg("bytes_per_sample_hint", "int_list", None, "Accepted for compatibility with DALI; sluice sizes its "
        "buffers itself."),
)


@dataclass(frozen=True)
class FusionStage:
    """An operator's place in a chain of GPU operators that one fused operator computes at once
    (``OpSchema(fusion=...)``), read by the rewrite :func:`sluice.pipeline.passes.fusion.fuse`. The image chain
    ``[crop ->] resize -> crop_mirror_normalize`` is declared by its three operators::

        crop:                  FusionStage(chain, 0, "k.", flag="has_crop")
        resize:                FusionStage(chain, 1, "r.", opens=True, unless=("save_attrs",))
        crop_mirror_normalize: FusionStage(chain, 2, "c.", closes=True)

    ``chain`` names the chain; the operator that computes it declares ``OpSchema(fuses=chain)``. ``position``
    orders the stages (0 first); each stage reads the one before it as its input 0. ``prefix`` names the stage's
    arguments in the fused node (resize's ``size`` is ``r.size``). ``closes``: the chain's last stage, where the
    rewrite starts and walks back through the inputs. ``opens``: the chain may begin at this stage (the stages
    before it are optional); position 0 always may. ``flag``: for an optional stage, the fused node's boolean
    argument saying whether the chain held it. ``unless``: constant arguments that, when set, keep a node out of
    the chain (resize's ``save_attrs``: an output the fused operator does not give)."""

    chain: str
    position: int
    prefix: str
    closes: bool = False
    opens: bool = False
    flag: str | None = None
    unless: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeviceForm:
    """The form a CPU operator may take when its output 0 goes only to ``.gpu()`` (``OpSchema(device_form=...)``,
    read by the rewrite :func:`sluice.pipeline.passes.fusion.decode_audio_on_device`): the node runs on ``device``
    instead and the copy disappears. ``when(const_args)`` says for which constant arguments the values stay the
    same. On ``device`` the operator's other outputs keep host values that argument inputs read, so readers that
    take them as argument inputs after the copy are kept. ``decoders.audio``: the mixed decoder, when it
    resamples nothing (``sample_rate`` 0: soxr and the GPU resampler differ)."""

    device: str
    when: Callable[[dict[str, Any]], bool] = lambda const_args: True


#: chain (FusionStage.chain) -> the operator that computes it (``OpSchema(fuses=chain)``).
_FUSED: dict[str, OpSchema] = {}


def fused_operator(chain: str) -> OpSchema | None:
    """The operator declared with ``OpSchema(fuses=chain)``, or None."""
    return _FUSED.get(chain)


class OpSchema:
    """The declaration of one operator: its name, documentation, inputs, outputs, devices and arguments.

    What graph rewrites read (:mod:`sluice.pipeline.passes`), declared here rather than matched by name:
    ``graph_safe`` (CUDA graphs), ``fusion`` (a :class:`FusionStage`), ``fuses`` (the chain a fused operator
    computes), ``device_form`` (a :class:`DeviceForm`) and ``transfer`` (the operator only copies its input to the
    device it runs on: ``.gpu()``, ``.cpu()``).
    """

    def __init__(self, name: str, doc: str, *, inputs: int | tuple[int, int] = 1,
                 outputs: int | Callable[[dict[str, Any]], int] = 1, devices: Sequence[str] = ("cpu",),
                 args: Sequence[Arg] = (), random: bool = False,
                 output_layout: str | Callable[..., str | list[str]] | None = None,
                 input_names: Sequence[str] | None = None, register: bool = True,
                 default_device: str | None = None, stateful: bool = False,
                 output_names: Callable[[dict[str, Any]], list[str]] | None = None,
                 requires: dict[str, Sequence[str]] | None = None,
                 sequences: str | None = None, sequence_outputs: int | None = None,
                 graph_safe: bool | Callable[[dict[str, Any]], bool] = False,
                 fusion: FusionStage | None = None, fuses: str | None = None,
                 device_form: DeviceForm | None = None, transfer: bool = False):
        self.name = name
        self.doc = inspect.cleandoc(doc)
        self.min_inputs, self.max_inputs = (inputs, inputs) if isinstance(inputs, int) else inputs
        self._outputs = outputs
        self._outputs_takes_inputs = callable(outputs) and len(inspect.signature(outputs).parameters) >= 2
        bad = [d for d in devices if d not in DEVICES]
        if bad:
            raise ValueError(f"schema {name}: unknown devices {bad}; use {DEVICES}")
        self.devices = tuple(devices)
        self.default_device = default_device or self.devices[0]
        self.random = random
        self.stateful = stateful or random
        self._output_layout = output_layout
        self.input_names = list(input_names) if input_names else None
        #: For operators whose outputs are named by their arguments (readers.tfrecord's features): the names, and
        #: ``fn.x`` returns a dict of them instead of a list.
        self.output_names = output_names
        if sequences is not None and sequences not in _seq.MODES:
            raise ValueError(f"schema {name}: sequences={sequences!r}; use one of {_seq.MODES} or None")
        #: How the operator takes sequences (layouts starting with F), DALI's ``AllowSequences``: ``"frames"``
        #: (the batch of sequences runs as the batch of their frames), ``"axis"`` (the kernels take the F axis;
        #: per-frame arguments run frame by frame) or None (no sequence semantics). See :mod:`sluice.sequences`.
        self.sequences = sequences
        #: With ``sequences``: how many leading outputs are sequences (the rest are per sample); None: all.
        self.sequence_outputs = sequence_outputs
        #: Whether the GPU kernel may be captured into a CUDA graph and replayed (:mod:`sluice.pipeline.cuda_graphs`):
        #: given its constant arguments (a callable decides from them), its launches depend only on its inputs'
        #: shapes, it reads no host memory that changes between batches, never waits for the GPU, defers no check
        #: and keeps alive the device tensors it reads.
        self.graph_safe = graph_safe
        #: Graph rewrites' metadata (see the class docstring).
        self.fusion, self.fuses, self.device_form, self.transfer = fusion, fuses, device_form, transfer
        if device_form is not None and device_form.device not in self.devices:
            raise ValueError(f"schema {name}: device_form on '{device_form.device}', a device it does not declare")
        own = list(args)
        if random:
            own.append(Arg("seed", int, -1, "Seed of this operator's random generator; -1 derives it from the "
                           "pipeline's seed and the operator's place in the graph."))
        names = [a.name for a in own]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"schema {name}: arguments declared twice: {sorted(dupes)}")
        self.args: dict[str, Arg] = {a.name: a for a in own}
        for a in _COMMON_ARGS:
            self.args.setdefault(a.name, a)
        #: Per device, the optional modules its kernel imports (``{"cpu": ("simplejpeg", "cv2")}``): checked when a
        #: pipeline is built, so that a missing codec is one error naming the operator and the extra to install.
        self.requires: dict[str, tuple[str, ...]] = {d: tuple(m) for d, m in (requires or {}).items()}
        unknown = [d for d in self.requires if d not in self.devices]
        if unknown:
            raise ValueError(f"schema {name}: requirements for devices {unknown} it does not declare")
        self.kernels: dict[str, type[Operator]] = {}
        if fuses is not None:
            with _REGISTRY_LOCK:
                if fuses in _FUSED:
                    raise ValueError(f"schema {name}: chain {fuses!r} is computed by {_FUSED[fuses].name} already")
                _FUSED[fuses] = self
        if register:
            with _REGISTRY_LOCK:
                if name in REGISTRY:
                    raise ValueError(f"operator {name} is registered twice")
                REGISTRY[name] = self

    # ---- kernels -------------------------------------------------------------------------------------------
    def _add_kernel(self, device: str, op_class: type[Operator]) -> None:
        if device not in self.devices:
            raise ValueError(f"{self.name}: kernel for device '{device}', which the schema does not declare "
                             f"(devices={self.devices})")
        if device in self.kernels:
            raise ValueError(f"{self.name}: two kernels for device '{device}'")
        self.kernels[device] = _sequence_operator(self, op_class) if self.sequences else op_class

    def sample_kernel(self, device: str) -> Callable:
        """Register ``fn(ctx, *sample_inputs, **sample_args)``, run per sample in the pipeline's threads."""
        def deco(fn: Callable) -> Callable:
            self._add_kernel(device, _sample_operator(self, device, fn))
            return fn
        return deco

    def batch_kernel(self, device: str) -> Callable:
        """Register ``fn(ctx, *input_batches, args)``, run once per batch."""
        def deco(fn: Callable) -> Callable:
            self._add_kernel(device, _batch_operator(self, device, fn))
            return fn
        return deco

    def operator_class(self, device: str) -> Callable:
        """Register an :class:`Operator` subclass (stateful operators)."""
        def deco(cls: type[Operator]) -> type[Operator]:
            self._add_kernel(device, cls)
            return cls
        return deco

    def check_requirements(self, device: str, what: str | None = None) -> None:
        """Raise :class:`~sluice.errors.MissingDependencyError` when a module this operator needs on ``device`` does
        not import; the message names ``what`` (default ``fn.<name> (device '<device>')``), the package and the
        extra that brings it."""
        modules = self.requires.get(device)
        if modules:
            _check_installed(modules, what or f"fn.{self.name} (device '{device}')")

    def kernel_for(self, device: str) -> type[Operator]:
        try:
            return self.kernels[device]
        except KeyError:
            have = ", ".join(sorted(self.kernels)) or "none"
            raise ArgumentError(f"fn.{self.name} has no kernel for device '{device}'; it runs on: {have}") from None

    # ---- arguments ----------------------------------------------------------------------------------------
    def num_outputs(self, const_args: dict[str, Any], num_inputs: int | None = None) -> int:
        """How many outputs a node has: a number, or ``outputs(const_args)`` / ``outputs(const_args, num_inputs)``
        for operators whose outputs depend on their arguments or on how many inputs they were given."""
        if not callable(self._outputs):
            return self._outputs
        if self._outputs_takes_inputs:
            return self._outputs(const_args, self.min_inputs if num_inputs is None else num_inputs)
        return self._outputs(const_args)

    def output_layouts(self, const_args: dict[str, Any], input_layouts: list[str], n: int) -> list[str]:
        spec = self._output_layout
        if spec is None:
            return [input_layouts[0] if input_layouts else ""] * n
        if callable(spec):
            spec = spec(const_args, input_layouts)
        if isinstance(spec, str):
            return [spec] * n
        return list(spec) + [""] * (n - len(spec))

    def validate(self, kwargs: dict[str, Any], is_node: Callable[[Any], bool]) -> tuple[dict, dict]:
        """Split ``kwargs`` into checked constants (defaults filled in) and per-sample DataNode arguments."""
        const: dict[str, Any] = {}
        nodes: dict[str, Any] = {}
        for key, value in kwargs.items():
            arg = self.args.get(key)
            if arg is None:
                raise ArgumentError(self.unknown_argument_message(key))
            if is_node(value):
                if not arg.per_sample:
                    raise ArgumentError(f"fn.{self.name}: argument '{key}' cannot be a DataNode: it must be the "
                                        "same for every sample. Arguments that may vary per sample: "
                                        f"{', '.join(self.per_sample_args()) or 'none'}.")
                nodes[key] = value
            else:
                const[key] = arg.convert(f"fn.{self.name}", value)
        for name, arg in self.args.items():
            if name in const or name in nodes:
                continue
            if arg.required:
                raise ArgumentError(f"fn.{self.name}: missing required argument '{name}' ({arg.doc})")
            const[name] = arg.default
        return const, nodes

    def unknown_argument_message(self, key: str) -> str:
        valid = sorted(self.args) + ["device", "name"]
        close = difflib.get_close_matches(key, valid, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        return f"fn.{self.name}: unknown argument '{key}'.{hint} Valid arguments: {', '.join(valid)}."

    def per_sample_args(self) -> list[str]:
        return [n for n, a in self.args.items() if a.per_sample]

    # ---- documentation ------------------------------------------------------------------------------------
    def signature(self) -> inspect.Signature:
        params = []
        n_inputs = self.max_inputs if self.max_inputs < 8 else self.min_inputs
        names = self.input_names or (["input"] if n_inputs == 1 else [f"input{i}" for i in range(n_inputs)])
        for i, iname in enumerate(names[:n_inputs]):
            default = inspect.Parameter.empty if i < self.min_inputs else None
            params.append(inspect.Parameter(iname, inspect.Parameter.POSITIONAL_ONLY, default=default))
        if self.max_inputs > n_inputs:
            params.append(inspect.Parameter("inputs", inspect.Parameter.VAR_POSITIONAL))
        params.append(inspect.Parameter("device", inspect.Parameter.KEYWORD_ONLY, default=None,
                                        annotation=str))
        params.append(inspect.Parameter("name", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=str))
        for arg in self.args.values():
            default = inspect.Parameter.empty if arg.required else arg.default
            params.append(inspect.Parameter(arg.name, inspect.Parameter.KEYWORD_ONLY, default=default))
        return inspect.Signature(params)

    def docstring(self) -> str:
        lines = [self.doc, "", f"Devices: {', '.join(self.devices)}."]
        if self.sequences:
            lines.append("Sequences (layouts FHWC, FCHW): every frame is processed with its sample's arguments; "
                         "a scalar argument may give one value per frame.")
        lines += ["", "Arguments:"]
        for arg in self.args.values():
            if arg.name in ("preserve", "bytes_per_sample_hint"):
                continue
            extra = []
            if arg.required:
                extra.append("required")
            else:
                extra.append(f"default {arg.default!r}")
            if arg.per_sample:
                extra.append("may vary per sample")
            if arg.choices is not None:
                extra.append("one of " + ", ".join(repr(c) for c in arg.choices))
            if arg.range_text():
                extra.append(arg.range_text())
            lines.append(f"    {arg.name} ({arg.type_name()}; {'; '.join(extra)}): {arg.doc}")
        return "\n".join(lines)


def get_schema(name: str) -> OpSchema:
    """The schema registered under ``name`` (``"resize"``, ``"decoders.image"``); ``import sluice`` registers
    every operator (:mod:`sluice.ops`)."""
    try:
        return REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(REGISTRY), n=3)
        raise ArgumentError(f"no operator named '{name}'" + (f"; did you mean {close}?" if close else "")) from None
