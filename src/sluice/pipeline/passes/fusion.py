"""Graph rewrites run when a pipeline builds, matched on schema metadata (never on operator names):

* :func:`fuse`: a chain of GPU operators that declare ``OpSchema(fusion=FusionStage(...))`` becomes one node of
  the operator declared with ``OpSchema(fuses=chain)``. Today's chain is ``[crop ->] resize ->
  crop_mirror_normalize``, computed by :mod:`sluice.ops.image.fused_crop_resize_normalize`::

      images = fn.resize(images, size=(224, 224), device="gpu")
      out = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(), dtype=types.FLOAT16, ...)

* :func:`decode_audio_on_device`: a CPU operator with ``OpSchema(device_form=DeviceForm(...))`` whose output 0
  goes only to a transfer (``OpSchema(transfer=True)``, ``.gpu()``) runs in its device form instead
  (``fn.decoders.audio`` becomes the mixed decoder).

Both walk the nodes once with :class:`Rewrite`, which knows who reads each DataNode and which ones the pipeline
returns, and collects the nodes replaced and dropped. A replacement keeps the replaced node's ``id`` and output
DataNodes, so downstream references hold; the input list is not modified. :data:`ENABLED` = False (or
``SLUICE_EAGER=1``, see :mod:`sluice.env`) runs the graph as written.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sluice import env
from sluice.ops.image import fused_crop_resize_normalize  # noqa: F401 - registers the fused operator fuse() looks up
from sluice.pipeline.graph import DataNode
from sluice.schema import fused_operator

__all__ = ["fuse", "decode_audio_on_device", "Rewrite", "ENABLED"]

logger = logging.getLogger(__name__)

#: Whether :func:`fuse` and :func:`decode_audio_on_device` change the graph (tests compare both ways).
ENABLED = True


def _disabled() -> bool:
    """:data:`ENABLED` False, or ``SLUICE_EAGER=1``: the graph runs as written."""
    return not ENABLED or env.eager()


class Rewrite:
    """One pass over a graph's operator nodes (in topological order): who reads each DataNode (as an input or as an
    argument input), which DataNodes the pipeline returns, and the nodes replaced or dropped so far."""

    def __init__(self, nodes: Sequence[Any], outputs: Iterable[Any] | None):
        self.nodes = list(nodes)
        self._outputs = {id(d) for d in (outputs or ())}
        self._readers: dict[int, list[Any]] = {}
        for node in self.nodes:
            for d in list(node.inputs) + list(node.arg_inputs.values()):
                self._readers.setdefault(id(d), []).append(node)
        self._replace: dict[int, Any] = {}
        self._drop: set[int] = set()

    def readers(self, data: Any) -> list[Any]:
        """The nodes reading ``data`` (once per use)."""
        return self._readers.get(id(data), [])

    def returned(self, data: Any) -> bool:
        """Whether the pipeline returns ``data`` (then its producer must stay)."""
        return id(data) in self._outputs

    def feeds_only(self, data: Any, node: Any) -> bool:
        """Whether ``data`` is read by ``node`` alone, once, and not returned by the pipeline."""
        return not self.returned(data) and self.readers(data) == [node]

    def sole_gpu_producer(self, node: Any) -> Any | None:
        """The producer of ``node``'s input 0 when it runs on the GPU and its only output feeds ``node`` alone."""
        if not node.inputs:
            return None
        data = node.inputs[0]
        prod = getattr(data, "op", None)
        if prod is None or prod.device != "gpu" or len(prod.outputs) != 1 or not self.feeds_only(data, node):
            return None
        return prod

    def replace(self, node: Any, new: Any) -> None:
        self._replace[id(node)] = new

    def replaced(self, node: Any) -> bool:
        return id(node) in self._replace

    def drop(self, node: Any) -> None:
        self._drop.add(id(node))

    def result(self) -> list[Any]:
        """The nodes in their order, replaced ones swapped, dropped ones left out."""
        return [self._replace.get(id(n), n) for n in self.nodes if id(n) not in self._drop]


def _rewrite(op_nodes: list[Any], outputs: Iterable[Any] | None, at: Callable[[Rewrite, Any], None]) -> list[Any]:
    """``at(rewrite, node)`` for each node in order; the new node list (a copy of ``op_nodes`` when disabled)."""
    if _disabled():
        return list(op_nodes)
    rewrite = Rewrite(op_nodes, outputs)
    for node in op_nodes:
        at(rewrite, node)
    return rewrite.result()


def fuse(op_nodes: list[Any], outputs: Iterable[Any] | None = None) -> list[Any]:
    """Replace each chain of GPU nodes declared by ``FusionStage`` metadata by one node of its fused operator.

    A chain ends at a node whose stage ``closes`` it and walks back through input 0: each earlier stage is the
    producer of the next one's input 0, on the GPU, with one output that feeds only that node and is not a pipeline
    output, and none of its stage's ``unless`` arguments set. The chain must begin at position 0 or at a stage that
    ``opens`` it (resize, when no crop precedes it).

    Args:
        op_nodes: the graph's operator nodes in topological order (objects with ``.schema``, ``.device``,
            ``.inputs``, ``.outputs``, ``.const_args``, ``.arg_inputs``, ``.id``).
        outputs: the pipeline's output DataNodes; a node whose output is also a pipeline output is not fused away.
            Without it, only consumption inside ``op_nodes`` is considered.

    Returns a new list; the fused node is a shallow copy of the closing node (same ``id`` and output DataNodes) with
    the fused schema, the chain's first input, each stage's arguments under its prefix (``k.``, ``r.``, ``c.``)
    and, for an optional stage, its flag (``has_crop``) set.
    """
    return _rewrite(op_nodes, outputs, _fuse_at)


def _stage(node: Any):
    return getattr(node.schema, "fusion", None)


def _fuse_at(rewrite: Rewrite, node: Any) -> None:
    last = _stage(node)
    if last is None or not last.closes or node.device != "gpu":
        return
    schema = fused_operator(last.chain)
    if schema is None:
        return
    chain = [node]
    while _stage(chain[0]).position > 0:
        prev = rewrite.sole_gpu_producer(chain[0])
        stage = _stage(prev) if prev is not None else None
        if (stage is None or stage.chain != last.chain or stage.position != _stage(chain[0]).position - 1
                or any(prev.const_args.get(name) for name in stage.unless)):
            break
        chain.insert(0, prev)
    first = _stage(chain[0])
    if len(chain) < 2 or (first.position > 0 and not first.opens):
        return
    const: dict[str, Any] = {}
    arg_inputs: dict[str, Any] = {}
    for n in chain:
        stage = _stage(n)
        if stage.flag:
            const[stage.flag] = True
        const.update({stage.prefix + k: v for k, v in n.const_args.items()})
        arg_inputs.update({stage.prefix + k: v for k, v in n.arg_inputs.items()})
    for name, arg in schema.args.items():
        const.setdefault(name, arg.default)
    fused = copy.copy(node)
    fused.schema = schema
    fused.inputs = list(chain[0].inputs)
    fused.const_args = {k: v for k, v in const.items() if k not in arg_inputs}
    fused.arg_inputs = arg_inputs
    rewrite.replace(node, fused)
    for n in chain[:-1]:
        rewrite.drop(n)
    logger.debug("fused %s into %s", chain, fused)


def decode_audio_on_device(op_nodes: list[Any], outputs: Iterable[Any] | None = None) -> list[Any]:
    """A CPU node whose output 0 goes only to ``.gpu()`` runs in its schema's device form (``OpSchema(device_form=
    DeviceForm(device, when))``): ``fn.decoders.audio`` becomes the mixed decoder.

    The mixed decoder gives the same values (its PCM conversion is libsndfile's arithmetic, tests/ops/audio/
    test_mixed_decoder*.py), but moves the files' samples to the GPU as they are stored (16-bit samples: half the
    bytes of float32) and converts them there, instead of converting on the host and moving the result. It applies
    when ``when(const_args)`` holds (the decoder resamples nothing, ``sample_rate`` 0: soxr and the GPU resampler
    differ) and the node has no argument inputs, its output 0 feeds only the transfer (``OpSchema(transfer=True)``
    on the GPU), and its other outputs (the rate) are used by nothing or only as argument inputs of GPU nodes after
    the transfer (``audio_resample(in_rate=rate)``: the device form's other outputs keep their host values, which
    argument inputs read); no output may be a pipeline output. The transfer node is replaced by the device form
    (same id and output 0, so its consumers hold), the other outputs' readers are copied to read the device form's
    outputs, and the CPU node is dropped. :data:`ENABLED` = False (or ``SLUICE_EAGER=1``) turns it off.
    """
    return _rewrite(op_nodes, outputs, _move_at)


def _move_at(rewrite: Rewrite, node: Any) -> None:
    if not getattr(node.schema, "transfer", False) or node.device != "gpu" or not node.inputs:
        return
    data = node.inputs[0]
    op = getattr(data, "op", None)
    form = getattr(op.schema, "device_form", None) if op is not None else None
    if (form is None or op.device != "cpu" or data.index != 0 or op.arg_inputs or not form.when(op.const_args)
            or not rewrite.feeds_only(data, node) or any(rewrite.returned(d) for d in op.outputs)):
        return
    others = op.outputs[1:]
    readers = list({id(r): r for d in others for r in rewrite.readers(d)}.values())
    after = {id(n) for n in rewrite.nodes[rewrite.nodes.index(node) + 1:]}
    if any(any(x is d for x in r.inputs for d in others) or rewrite.replaced(r) or r.device == "cpu"
           or id(r) not in after for r in readers):
        return  # an output is read as a regular input, on the CPU, or before the transfer: the node stays on the CPU
    moved = copy.copy(node)
    moved.schema, moved.device = op.schema, form.device
    moved.inputs, moved.const_args, moved.arg_inputs = list(op.inputs), dict(op.const_args), {}
    moved.name, moved.explicit_name = op.name, op.explicit_name
    moved.outputs = [node.outputs[0]] + [DataNode(moved, i, "gpu") for i in range(1, len(op.outputs))]
    rewrite.replace(node, moved)
    now = {id(d): moved.outputs[i] for i, d in enumerate(others, 1)}
    for r in readers:  # read the device form's outputs (same id, so the reader's own consumers hold)
        copied = copy.copy(r)
        copied.arg_inputs = {k: now.get(id(v), v) for k, v in r.arg_inputs.items()}
        rewrite.replace(r, copied)
    rewrite.drop(op)
    logger.debug("%s feeding .gpu() runs as device '%s'", op, form.device)
