"""Graph fusion: ``[crop ->] resize -> crop_mirror_normalize`` on the GPU becomes one node, one kernel pair.

Users write ordinary DALI graphs::

    images = fn.decoders.image_random_crop(jpegs, device="mixed")
    images = fn.resize(images, size=(224, 224), device="gpu")
    out = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(), dtype=types.FLOAT16, ...)

and :func:`fuse`, called by the executor when it builds, replaces the resize and the crop_mirror_normalize nodes by
a single node whose kernel maps every output pixel back through the crop window and the resize into the decoded
image and runs :func:`sluice.kernels.batched.resample_batch` once: crop -> antialiased resize -> mirror ->
normalise -> layout -> cast, straight into the dense ``N x C x H x W`` batch. An integer resize output is still
rounded (in registers) before normalising, so the fused result equals the unfused one up to float rounding.

Fusion applies when the nodes are on the GPU, the resize output feeds only the crop_mirror_normalize (and is not
a pipeline output), resize has no ``save_attrs`` output, and (for a leading ``fn.crop``) its output feeds only
the resize. :data:`ENABLED` = False (or ``SLUICE_EAGER=1``, see :mod:`sluice.env`) turns it off. Windows that
leave the image fall back, per batch, to the unfused computation.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from sluice import env
from sluice.kernels.batched import Packed, resample_batch
from sluice.ops.image import crop, crop_mirror_normalize, resize
from sluice.ops.image._geometry import crop_windows_batch, out_dtype, resize_params_batch
from sluice.ops.image.crop import crop_one, crop_volumes
from sluice.ops.image.crop_mirror_normalize import (crop_mirror_normalize_gpu, frame_output_layout, norm_batch,
                                                    output_layout_of)
from sluice.ops.image.resize import check_dtype, filters, resize_gpu
from sluice.pipeline.batch import Batch
from sluice.pipeline.graph import DataNode
from sluice.schema import Arg, OpSchema

__all__ = ["fuse", "FUSED_SCHEMA"]

logger = logging.getLogger(__name__)

_PREFIX = {"crop": "k.", "resize": "r.", "crop_mirror_normalize": "c."}


def _fused_args() -> list[Arg]:
    out = []
    for mod, prefix in ((crop, "k."), (resize, "r."), (crop_mirror_normalize, "c.")):
        for a in mod.SCHEMA.args.values():
            out.append(Arg(prefix + a.name, a.type, a.default, a.doc, a.per_sample, a.choices))
    out.append(Arg("has_crop", bool, False, "Whether a leading fn.crop was fused."))
    return out


def _make_schema() -> OpSchema:
    schema = OpSchema(
        "_fused_crop_resize_crop_mirror_normalize",
        doc="""[crop ->] resize -> crop_mirror_normalize as one GPU node (made by sluice.pipeline.passes.fusion.fuse).""",
        devices=("gpu",),
        sequences="frames",  # a batch of clips is the batch of their frames: one kernel pair for all of them
        output_layout=lambda a, lay: output_layout_of(a.get("c.output_layout"), lay[0] if lay else ""),
        args=_fused_args(),
        register=False,
    )
    schema.batch_kernel("gpu")(_fused_gpu)
    return schema


def _fused_gpu(ctx, images: Batch, *, args) -> Batch:
    """Map each output pixel through crop_mirror_normalize's window, resize's ROI and crop's window at once.

    The geometry is computed with NumPy over the whole batch (no per-sample Python on the hot path)."""
    layout = ctx.layout_of(images) or "HWC"
    n = len(images)
    if "D" in layout:  # volumes: the operators' own whole-batch kernels
        return _unfused(ctx, images, args, bool(args.const("has_crop")), layout)
    out_layout = frame_output_layout(args.const("c.output_layout"))
    if n == 0:
        return Batch([], out_layout)
    has_crop = bool(args.const("has_crop"))
    packed = images.packed if not has_crop else None
    if packed is not None and packed[1].shape[1] == 3 and layout == "HWC":
        # the batch read whole from its buffer: no per-image view
        samples = Packed(packed[0], packed[1][:, :2].copy(), int(packed[1][0, 2]))
        first_dim, channels, hw = 3, samples.channels, samples.hw
    else:
        samples = images.samples
        first_dim = samples[0].dim()
        channels = int(samples[0].shape[2]) if first_dim == 3 else 0
        hw = np.array([s.shape[:2] for s in samples], dtype=np.int64) if first_dim == 3 else None
    if layout != "HWC" or first_dim != 3:
        return _unfused(ctx, images, args, has_crop, layout)
    k, r, c = _Args(args, "k."), _Args(args, "r."), _Args(args, "c.")
    if has_crop:
        win = crop_windows_batch(hw, k)
        if ((win[:, :2] < 0) | (win[:, :2] + win[:, 2:] > hw)).any():
            return _unfused(ctx, images, args, has_crop, layout)
        # the resize filter must not reach outside the crop: resample the crop views themselves
        samples = [s[y:y + h, x:x + w] for s, (y, x, h, w) in zip(samples, win.tolist())]
        hw = win[:, 2:]
    rois, rsz = resize_params_batch(hw, r, r.sample)
    cw = crop_windows_batch(rsz, c)
    if ((cw[:, :2] < 0) | (cw[:, :2] + cw[:, 2:] > rsz)).any():
        return _unfused(ctx, images, args, has_crop, layout)
    scale = (rois[:, 2:] - rois[:, :2]) / rsz  # source pixels per resized pixel, (y, x)
    start = rois[:, :2] + cw[:, :2] * scale
    end = rois[:, :2] + (cw[:, :2] + cw[:, 2:]) * scale
    src = np.concatenate([start, end], axis=1)
    outs = cw[:, 2:]
    fmin, fmag = filters({name: r.const(name) for name in ("interp_type", "min_filter", "mag_filter")})
    mirror = np.asarray(c["mirror"], dtype=bool).reshape(n)
    dense = bool((outs == outs[0]).all())
    res = resample_batch(samples, src, outs, fmin, fmag, r.const("antialias"),
                         dtype=out_dtype(c.const("dtype"), torch.float32), mirror=mirror,
                         norm=norm_batch(channels, c, n), output_layout=out_layout, dense=dense,
                         mid_dtype=check_dtype(r.const("dtype"), packed[0] if packed is not None else samples[0]))
    return Batch.from_dense(res, out_layout) if dense else Batch(res, out_layout)


class _Args:
    """The argument view one original node's kernel expects, carved out of the fused node's arguments."""

    def __init__(self, args, prefix: str):
        self._args, self._prefix = args, prefix

    def __getitem__(self, name: str):
        return self._args[self._prefix + name]

    def __contains__(self, name: str) -> bool:
        return self._prefix + name in self._args

    def is_const(self, name: str) -> bool:
        return self._args.is_const(self._prefix + name)

    def const(self, name: str):
        return self._args.const(self._prefix + name)

    def sample(self, i: int) -> dict:
        return {k[len(self._prefix):]: v for k, v in self._args.sample(i).items() if k.startswith(self._prefix)}


def _unfused(ctx, images: Batch, args, has_crop: bool, layout: str) -> Batch:
    """The original kernels one after the other (windows outside the image, unusual layouts)."""

    x = images if images.layout() else Batch(images.samples, layout)
    if has_crop and "D" in layout:
        x = crop_volumes(x, layout, _Args(args, "k."))
    elif has_crop:
        crop_args = _Args(args, "k.")
        x = Batch([crop_one(s, x.layout(), crop_args.sample(i)) for i, s in enumerate(x.samples)], x.layout())
    x = resize_gpu(ctx, x, args=_Args(args, "r."))
    return crop_mirror_normalize_gpu(ctx, x, args=_Args(args, "c."))


FUSED_SCHEMA: OpSchema | None = None
#: Whether :func:`fuse` and the audio rewrite change the graph (tests compare both ways).
ENABLED = True


def _disabled() -> bool:
    """:data:`ENABLED` False, or ``SLUICE_EAGER=1``: the graph runs as written."""
    return not ENABLED or env.eager()


def _uses(nodes: Sequence[Any], outputs: Iterable[Any] | None) -> tuple[set[int], dict[int, list[Any]]]:
    """The ids of the pipeline's output DataNodes, and who reads each DataNode (see :func:`_consumers`)."""
    return {id(d) for d in (outputs or ())}, _consumers(nodes)


def _consumers(nodes: Sequence[Any]) -> dict[int, list[Any]]:
    """id(DataNode) -> the nodes reading it (as an input or as an argument input)."""
    out: dict[int, list[Any]] = {}
    for node in nodes:
        for d in list(node.inputs) + list(node.arg_inputs.values()):
            out.setdefault(id(d), []).append(node)
    return out


def _sole_input_producer(node, name: str, consumers, outputs: set[int]):
    """The producer of ``node``'s input 0 if it is a ``name`` node on the GPU whose only output feeds ``node``."""
    if not node.inputs:
        return None
    d = node.inputs[0]
    prod = getattr(d, "op", None)
    if prod is None or getattr(prod.schema, "name", None) != name or prod.device != "gpu":
        return None
    if len(prod.outputs) != 1 or id(d) in outputs or consumers.get(id(d), []) != [node]:
        return None
    return prod


def fuse(op_nodes: list[Any], outputs: Iterable[Any] | None = None) -> list[Any]:
    """Replace ``[crop ->] resize -> crop_mirror_normalize`` GPU chains by one fused node; other nodes are kept.

    Args:
        op_nodes: the graph's operator nodes in topological order (objects with ``.schema.name``, ``.device``,
            ``.inputs``, ``.outputs``, ``.const_args``, ``.arg_inputs``, ``.id``).
        outputs: the pipeline's output DataNodes; a resize whose output is also a pipeline output is not fused
            away. Without it, only consumption inside ``op_nodes`` is considered.

    Returns a new list; the fused node is a shallow copy of the crop_mirror_normalize node (same ``id`` and the
    same output DataNodes, so downstream references hold) with the fused schema, the chain's first input and the
    three nodes' arguments under the prefixes ``k.``, ``r.``, ``c.``. The input nodes are not modified.
    """
    global FUSED_SCHEMA
    if _disabled():
        return list(op_nodes)
    out_ids, consumers = _uses(op_nodes, outputs)
    drop: set[int] = set()
    replace: dict[int, Any] = {}
    for node in op_nodes:
        if getattr(node.schema, "name", None) != "crop_mirror_normalize" or node.device != "gpu":
            continue
        rz = _sole_input_producer(node, "resize", consumers, out_ids)
        if rz is None or rz.const_args.get("save_attrs"):
            continue
        cr = _sole_input_producer(rz, "crop", consumers, out_ids)
        if FUSED_SCHEMA is None:
            FUSED_SCHEMA = _make_schema()
        fused = copy.copy(node)
        fused.schema = FUSED_SCHEMA
        first = cr if cr is not None else rz
        fused.inputs = list(first.inputs)
        const: dict[str, Any] = {"has_crop": cr is not None}
        arg_inputs: dict[str, Any] = {}
        for src, prefix in ((cr, "k."), (rz, "r."), (node, "c.")):
            if src is None:
                continue
            const.update({prefix + k: v for k, v in src.const_args.items()})
            arg_inputs.update({prefix + k: v for k, v in src.arg_inputs.items()})
        for name, arg in FUSED_SCHEMA.args.items():
            const.setdefault(name, arg.default)
        fused.const_args = {k: v for k, v in const.items() if k not in arg_inputs}
        fused.arg_inputs = arg_inputs
        replace[id(node)] = fused
        drop.add(id(rz))
        if cr is not None:
            drop.add(id(cr))
        logger.debug("fused %s into %s", [n for n in (cr, rz, node) if n is not None], fused)
    return [replace.get(id(n), n) for n in op_nodes if id(n) not in drop]


def decode_audio_on_device(op_nodes: list[Any], outputs: Iterable[Any] | None = None) -> list[Any]:
    """``fn.decoders.audio`` on the CPU whose audio goes only to ``.gpu()`` becomes the mixed decoder.

    The mixed decoder gives the same values (its PCM conversion is libsndfile's arithmetic, tests/ops/audio/
    test_mixed_decoder*.py), but moves the files' samples to the GPU as they are stored (16-bit samples: half the
    bytes of float32) and converts them there, instead of converting on the host and moving the result. It applies
    when the decoder resamples nothing (``sample_rate`` 0: soxr and the GPU resampler differ), its audio feeds only
    the transfer, and its rate output is used by nothing or only as argument inputs (``audio_resample(in_rate=rate)``:
    the mixed decoder's rate output keeps its host values, which argument inputs read); neither output may be a
    pipeline output. The transfer node is replaced by the mixed decoder (same id and output, so its consumers
    hold), the rate's readers are copied to read the mixed decoder's rate, and the CPU decoder is dropped.
    :data:`ENABLED` = False (or ``SLUICE_EAGER=1``) turns it off.
    """
    if _disabled():
        return list(op_nodes)
    out_ids, consumers = _uses(op_nodes, outputs)
    drop: set[int] = set()
    replace: dict[int, Any] = {}
    for node in op_nodes:
        if getattr(node.schema, "name", None) != "_transfer" or node.device != "gpu" or not node.inputs:
            continue
        audio = node.inputs[0]
        dec = getattr(audio, "op", None)
        if (dec is None or getattr(dec.schema, "name", None) != "decoders.audio" or dec.device != "cpu"
                or audio.index != 0 or dec.arg_inputs or float(dec.const_args.get("sample_rate") or 0.0) != 0.0
                or consumers.get(id(audio), []) != [node] or any(id(d) in out_ids for d in dec.outputs)):
            continue
        rate = dec.outputs[1]
        readers = consumers.get(id(rate), [])
        after = {id(n) for n in op_nodes[op_nodes.index(node) + 1:]}
        if any(any(x is rate for x in r.inputs) or id(r) in replace or r.device == "cpu" or id(r) not in after
               for r in readers):
            continue  # the rate is read as a regular input, on the CPU, or before the transfer: it stays on the CPU
        mixed = copy.copy(node)
        mixed.schema, mixed.device = dec.schema, "mixed"
        mixed.inputs, mixed.const_args, mixed.arg_inputs = list(dec.inputs), dict(dec.const_args), {}
        mixed.name, mixed.explicit_name = dec.name, dec.explicit_name
        mixed.outputs = [node.outputs[0], DataNode(mixed, 1, "gpu")]
        replace[id(node)] = mixed
        for r in readers:  # read the mixed decoder's rate (same id, so the reader's own consumers hold)
            moved = copy.copy(r)
            moved.arg_inputs = {k: (mixed.outputs[1] if v is rate else v) for k, v in r.arg_inputs.items()}
            replace[id(r)] = moved
        drop.add(id(dec))
        logger.debug("the CPU audio decoder %s feeding .gpu() decodes on the device", dec)
    return [replace.get(id(n), n) for n in op_nodes if id(n) not in drop]
