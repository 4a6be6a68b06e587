"""``fn.readers.numpy``: ``.npy`` files as arrays, whole or a region of interest (DALI's numpy reader).

Each file's header is read once (and kept): its type, shape and order (C or Fortran). A region of interest
(``roi_start`` / ``roi_end`` / ``roi_shape`` or their ``rel_`` fractions, over ``roi_axes``) is read as the
stretches of bytes it covers: the rows of the region, each read where it lies, not the whole file (a region of
many tiny rows is read as the one stretch that spans them, then cut). Fortran-ordered arrays come out in C order,
big-endian ones in the machine's order, as ``numpy.load`` gives them.

A batch is read back to back into one buffer (page-locked when a GPU stage takes it, or with ``device="gpu"``),
so that ``device="gpu"`` costs one copy to the GPU per batch: the reading happens in the CPU stage, and the GPU
stage only queues the copy. All samples of a batch must have one type.

Bad files are errors naming the file: a header that is not ``.npy`` or does not parse, a type NumPy cannot
load into a tensor, a header announcing more data than the file holds, a region outside the array (with
``out_of_bounds_policy="error"``).
"""

from __future__ import annotations

import ast
import fnmatch
import logging
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sluice.backends import storage
from sluice.errors import ArgumentError, SampleError
from sluice.ops._host import batch_buffer
from sluice.ops.readers._base import as_list, read_into
from sluice.ops.readers.file import READER_ARGS, ReaderBase
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import map_all, runs
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema, OpSpec

logger = logging.getLogger(__name__)

OUT_OF_BOUNDS = ("error", "trim_to_shape", "pad")
_ROI_ARGS = ("roi_start", "rel_roi_start", "roi_end", "rel_roi_end", "roi_shape", "rel_roi_shape")

def listing_args(file_filter: str) -> list[Arg]:
    """The arguments naming a reader's files (file_root with file_filter, file_list or files), read by
    :func:`list_npy`; ``file_filter`` is the default pattern."""
    return [
        Arg("file_root", str, None, "Folder or s3:// prefix holding the files (searched recursively)."),
        Arg("file_filter", str, file_filter, "Glob pattern of the file names taken from file_root."),
        Arg("file_list", str, None, "Text file listing one file per line (relative to file_root or to its own "
            "folder)."),
        Arg("files", "str_list", None, "Explicit list of files (relative to file_root when given)."),
    ]


SCHEMA = OpSchema(
    "readers.numpy",
    doc="""Reads ``.npy`` files as tensors (C order), whole or a region of interest, on the CPU or the GPU.

    Files come from ``file_root`` (every file below it whose name matches ``file_filter``, sorted), a
    ``file_list`` (one path per line, relative to ``file_root``), or ``files``; any of them may be ``s3://``
    URLs. The region of interest is given per axis of ``roi_axes`` (default: every axis) as a start
    (``roi_start``, or ``rel_roi_start`` as a fraction of the extent) and an end (``roi_end`` /
    ``rel_roi_end``, exclusive) or a shape (``roi_shape`` / ``rel_roi_shape``); only the bytes it covers are
    read. A region reaching outside the array is an error (``out_of_bounds_policy="error"``), is cut to the
    array (``"trim_to_shape"``), or is filled with ``fill_value`` where it lies outside (``"pad"``).

    Example::

        volumes = fn.readers.numpy(file_root="/data/ct", file_filter="*.npy", roi_start=[16, 0, 0],
                                   roi_shape=[64, 128, 128], device="gpu")
    """,
    inputs=0,
    outputs=1,
    devices=("cpu", "gpu"),
    stateful=True,
    output_layout="",
    args=[
        *listing_args("*.npy"),
        Arg("roi_start", "int_list", None, "First index of the region on each roi axis.", per_sample=True),
        Arg("rel_roi_start", "float_list", None, "roi_start as fractions of the extents.", per_sample=True),
        Arg("roi_end", "int_list", None, "End (exclusive) of the region on each roi axis.", per_sample=True),
        Arg("rel_roi_end", "float_list", None, "roi_end as fractions of the extents.", per_sample=True),
        Arg("roi_shape", "int_list", None, "Extent of the region on each roi axis (instead of an end).",
            per_sample=True),
        Arg("rel_roi_shape", "float_list", None, "roi_shape as fractions of the extents.", per_sample=True),
        Arg("roi_axes", "int_list", None, "Axes the roi arguments refer to, in their order; default: all."),
        Arg("out_of_bounds_policy", str, "error", "A region outside the array: 'error', 'trim_to_shape' or "
            "'pad' (with fill_value).", choices=OUT_OF_BOUNDS),
        Arg("fill_value", float, 0.0, "Value of the padded elements (out_of_bounds_policy='pad')."),
        Arg("use_o_direct", bool, False, "Accepted for DALI compatibility."),
        Arg("register_buffers", bool, True, "Accepted for DALI compatibility."),
        Arg("cache_header_information", bool, False, "Accepted for DALI compatibility (headers are always kept)."),
        *READER_ARGS,
    ],
)

_MAGIC = b"\x93NUMPY"
_HEAD_BYTES = 4096
#: A region whose rows are shorter than this, and more than _MAX_RUNS of them, is read as one stretch and cut.
_SMALL_RUN = 4096
_MAX_RUNS = 64


class NpyError(ValueError):
    """A ``.npy`` file that cannot be read as its header says (the message names it)."""


@dataclass(frozen=True)
class NpyHeader:
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran: bool
    offset: int  # where the data starts

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def parse_header(head: bytes, path: str, file_size: int) -> NpyHeader:
    """The header of a ``.npy`` file from its first bytes; checks that the file holds the data it announces."""
    if head[:6] != _MAGIC or len(head) < 10:
        raise NpyError(f"'{path}' is not a .npy file (it does not start with the .npy magic string)")
    major = head[6]
    if major not in (1, 2, 3):
        raise NpyError(f"'{path}': .npy format version {major}.{head[7]} is not supported (1.0, 2.0, 3.0 are)")
    width = 2 if major == 1 else 4
    length = int.from_bytes(head[8:8 + width], "little")
    offset = 8 + width + length
    if len(head) < offset:
        raise NpyError(f"'{path}': the .npy header announces {length} bytes but the file ends first")
    try:
        text = head[8 + width:offset].decode("latin1" if major < 3 else "utf8")
        d = ast.literal_eval(text)
        descr, fortran, shape = d["descr"], d["fortran_order"], d["shape"]
        dtype = np.lib.format.descr_to_dtype(descr)
    except (ValueError, SyntaxError, KeyError, TypeError) as e:
        raise NpyError(f"'{path}': the .npy header does not parse ({e})") from None
    if not isinstance(shape, tuple) or not all(isinstance(x, int) and x >= 0 for x in shape) or \
            not isinstance(fortran, bool):
        raise NpyError(f"'{path}': the .npy header has an invalid shape {shape!r} or fortran_order {fortran!r}")
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in "biuf":
        raise NpyError(f"'{path}': arrays of type {dtype} cannot be read; numeric and boolean types can")
    h = NpyHeader(dtype, shape, fortran, offset)
    if file_size - offset < h.nbytes:
        raise NpyError(f"'{path}': its header announces a {dtype} array of shape {shape} ({h.nbytes} bytes of "
                       f"data) but the file holds {file_size - offset} bytes after the header: it is truncated or "
                       "its header is wrong")
    return h


def list_npy(op: str, a: dict[str, Any], clients: storage.S3Clients | None = None) -> list[str]:
    """The files ``file_root`` + ``file_filter``, ``file_list`` or ``files`` name (:func:`listing_args`), listed
    or read through ``clients`` (the pipeline's S3 clients) where they are in S3."""
    root, file_list, files = a["file_root"], a["file_list"], a["files"]
    if file_list is not None and files is not None:
        raise ArgumentError(f"{op}: give only one of file_list and files")
    if files is not None:
        return [storage.join(root, f) for f in as_list(op, "files", files)]
    if file_list is not None:
        base = root or storage.dirname(file_list)
        try:
            lines = storage.read_text(file_list, clients=clients).splitlines()
        except storage.StorageError as e:
            raise ArgumentError(f"{op}: cannot read file_list: {e}") from None
        return [storage.join(base, ln.split()[0]) for ln in lines if ln.strip() and not ln.startswith("#")]
    if root is None:
        raise ArgumentError(f"{op}: give file_root, file_list or files")
    try:
        found = storage.list_files(root, clients=clients)[0]
    except storage.StorageError as e:
        raise ArgumentError(f"{op}: file_root: {e}") from None
    pattern = a["file_filter"] or "*"
    return [f for f in found if fnmatch.fnmatchcase(storage.basename(f), pattern)]


def _round(x: float) -> int:
    return int(math.floor(x + 0.5))


def roi_window(h: NpyHeader, a: dict[str, Any], path: str) -> tuple[list[int], list[int]] | None:
    """The region ``[lo, hi)`` per axis that the roi arguments ``a`` ask of the array of ``h`` (possibly outside
    it), or None for the whole array."""
    if all(a.get(k) is None for k in _ROI_ARGS):
        return None
    ndim = len(h.shape)
    axes = list(range(ndim)) if a.get("roi_axes") is None else list(a["roi_axes"])
    for ax in axes:
        if not 0 <= ax < ndim:
            raise ArgumentError(f"roi_axes {axes} do not fit the {ndim}-D array of '{path}'")
    if (a.get("roi_start") is not None) + (a.get("rel_roi_start") is not None) > 1 or \
            sum(a.get(k) is not None for k in _ROI_ARGS[2:]) > 1:
        raise ArgumentError("give at most one of roi_start / rel_roi_start and one of roi_end / rel_roi_end / "
                            "roi_shape / rel_roi_shape")
    lo, hi = [0] * ndim, list(h.shape)

    def values(name: str) -> list[float] | None:
        v = a.get(name)
        if v is None:
            return None
        v = list(v)
        if len(v) != len(axes):
            raise ArgumentError(f"{name} has {len(v)} values for {len(axes)} roi axes ({axes}) of the {ndim}-D "
                                f"array of '{path}'")
        return v

    start = values("roi_start")
    rel_start = values("rel_roi_start")
    for k, ax in enumerate(axes):
        if start is not None:
            lo[ax] = int(start[k])
        elif rel_start is not None:
            lo[ax] = _round(rel_start[k] * h.shape[ax])
    for name in _ROI_ARGS[2:]:
        v = values(name)
        if v is None:
            continue
        for k, ax in enumerate(axes):
            extent = h.shape[ax]
            hi[ax] = {"roi_end": lambda: int(v[k]), "rel_roi_end": lambda: _round(v[k] * extent),
                      "roi_shape": lambda: lo[ax] + int(v[k]),
                      "rel_roi_shape": lambda: lo[ax] + _round(v[k] * extent)}[name]()
    for ax in range(ndim):
        if hi[ax] < lo[ax]:
            raise ArgumentError(f"the region of interest of '{path}' ends before it starts on axis {ax} "
                                f"(start {lo[ax]}, end {hi[ax]})")
    return lo, hi


def runs_of(shape: tuple[int, ...], lo: list[int], hi: list[int]) -> tuple[np.ndarray, int]:
    """The region ``[lo, hi)`` of a C-ordered array of ``shape`` as contiguous runs: (each run's first element,
    elements per run)."""
    ndim = len(shape)
    partial = [ax for ax in range(ndim) if lo[ax] != 0 or hi[ax] != shape[ax]]
    if not partial or any(hi[ax] == lo[ax] for ax in range(ndim)):
        n = math.prod(hi[ax] - lo[ax] for ax in range(ndim)) if partial else math.prod(shape)
        return np.array([sum(lo[ax] * math.prod(shape[ax + 1:]) for ax in range(ndim))] if n else [], np.int64), n
    k = partial[-1]
    strides = [math.prod(shape[ax + 1:]) for ax in range(ndim)]
    run = (hi[k] - lo[k]) * strides[k]
    starts = np.array([lo[k] * strides[k]], np.int64)
    for ax in range(k - 1, -1, -1):
        starts = (np.arange(lo[ax], hi[ax], dtype=np.int64)[:, None] * strides[ax] + starts[None, :]).reshape(-1)
    return starts, run


@dataclass
class _Plan:
    """How one sample is read: its output shape, and either runs read straight into its slot (``direct``), or a
    stretch read apart and cut, transposed, byte-swapped or padded into it."""

    out_shape: tuple[int, ...]
    starts: np.ndarray  # byte offsets in the file of the ranges to read
    sizes: np.ndarray
    direct: bool
    header: NpyHeader
    lo: list[int] | None = None  # the in-bounds window, in the file's (stored) axis order
    hi: list[int] | None = None
    pad_at: list[int] | None = None  # where the in-bounds window lies in the output (pad)


def plan_sample(h: NpyHeader, window: tuple[list[int], list[int]] | None, policy: str, path: str) -> _Plan:
    ndim = len(h.shape)
    if window is None:
        lo, hi = [0] * ndim, list(h.shape)
    else:
        lo, hi = window
    outside = any(lo[ax] < 0 or hi[ax] > h.shape[ax] for ax in range(ndim))
    if outside and policy == "error":
        raise ValueError(f"the region of interest from {lo} to {hi} of '{path}' reaches outside its array of shape "
                         f"{h.shape}; pass out_of_bounds_policy='trim_to_shape' or 'pad' to accept such regions")
    clo = [min(max(lo[ax], 0), h.shape[ax]) for ax in range(ndim)]
    chi = [min(max(hi[ax], clo[ax]), h.shape[ax]) for ax in range(ndim)]
    out_shape = tuple(hi[ax] - lo[ax] for ax in range(ndim)) if policy == "pad" else \
        tuple(chi[ax] - clo[ax] for ax in range(ndim))
    pad_at = [clo[ax] - lo[ax] for ax in range(ndim)] if policy == "pad" else [0] * ndim
    shape, slo, shi = (h.shape, clo, chi) if not h.fortran else (h.shape[::-1], clo[::-1], chi[::-1])
    elem_starts, run = runs_of(shape, slo, shi)
    item = h.dtype.itemsize
    native = h.dtype.byteorder in ("=", "|") or (h.dtype.byteorder == "<") == (sys.byteorder == "little")
    padded = policy == "pad" and (out_shape != tuple(chi[ax] - clo[ax] for ax in range(ndim)))
    many_small = len(elem_starts) > _MAX_RUNS and run * item < _SMALL_RUN
    direct = native and not padded and not many_small and (not h.fortran or ndim <= 1 or
                                                           sum(x > 1 for x in out_shape) <= 1)
    if direct or not len(elem_starts):
        return _Plan(out_shape, h.offset + elem_starts * item, np.full(len(elem_starts), run * item, np.int64),
                     direct or not len(elem_starts), h, slo, shi, pad_at)
    first, last = int(elem_starts[0]), int(elem_starts[-1]) + run
    if many_small:  # one stretch spanning the runs
        starts, sizes = np.array([h.offset + first * item]), np.array([(last - first) * item])
    else:
        starts, sizes = h.offset + elem_starts * item, np.full(len(elem_starts), run * item, np.int64)
    return _Plan(out_shape, starts, sizes, False, h, slo, shi, pad_at)


def _finish(plan: _Plan, raw: np.ndarray, out: np.ndarray, fill: float) -> None:
    """Write a sample read apart (``raw``: its ranges back to back) into its output slot ``out``: cut from the
    stretch, transposed from Fortran order, byte-swapped, padded."""
    h = plan.header
    shape = h.shape[::-1] if h.fortran else h.shape  # the stored (C) order
    window = tuple(b - a for a, b in zip(plan.lo, plan.hi))
    flat = raw.view(h.dtype)
    if flat.size == math.prod(window):  # the window's runs, back to back
        block = flat.reshape(window)
    else:  # one stretch from the window's first element: the window is a strided view of it
        strides = [math.prod(shape[ax + 1:]) * h.dtype.itemsize for ax in range(len(shape))]
        block = np.lib.stride_tricks.as_strided(flat, shape=window, strides=strides, writeable=False)
    if h.fortran:
        block = block.transpose()
    target = out.view(h.dtype.newbyteorder("=")).reshape(plan.out_shape)
    if plan.out_shape != block.shape:
        target[...] = fill
        target[tuple(slice(p, p + n) for p, n in zip(plan.pad_at, block.shape))] = block
    else:
        target[...] = block


@SCHEMA.operator_class("cpu")
class NumpyReader(ReaderBase):
    op_name = "fn.readers.numpy"

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        self.paths = list_npy(self.op_name, spec.args, self.s3)
        if not self.paths:
            raise ArgumentError(f"{self.op_name}: no files matching file_filter={spec.args['file_filter']!r} in "
                                f"'{spec.args['file_root']}'")
        self.headers: dict[int, NpyHeader] = {}
        self.setup_order(len(self.paths))

    # ---- headers --------------------------------------------------------------------------------------------
    def _headers(self, picks: list[int], pool) -> list[NpyHeader]:
        todo = sorted({i for i in picks if i not in self.headers})
        if todo:
            paths = [self.paths[i] for i in todo]
            s3 = self.s3
            sizes = np.array([_size(p, k, s3) for k, p in enumerate(paths)], np.int64)
            heads = np.minimum(sizes, _HEAD_BYTES)
            offsets = np.concatenate([[0], np.cumsum(heads)[:-1]]).astype(np.int64)
            buf = np.empty(max(1, int(heads.sum())), np.uint8)
            read_into(paths, np.zeros(len(todo), np.int64), heads, paths, buf, offsets, pool=pool, what="header",
                      clients=s3)
            for k, i in enumerate(todo):
                head = buf[offsets[k]: offsets[k] + heads[k]].tobytes()
                if len(head) >= 10 and head[:6] == _MAGIC:
                    width = 2 if head[6] == 1 else 4
                    need = 8 + width + int.from_bytes(head[8:8 + width], "little")
                    if need > len(head) and need <= sizes[k]:  # a long header: read the rest
                        head = bytes(storage.fetch([(paths[k], 0, need)], clients=s3)[0])
                try:
                    self.headers[i] = parse_header(head, paths[k], int(sizes[k]))
                except NpyError as e:
                    raise SampleError(picks.index(i), paths[k], e) from None
        return [self.headers[i] for i in picks]

    # ---- one batch ------------------------------------------------------------------------------------------
    def read_batch(self, ctx: BatchContext, args: BatchArgs, pin: bool) -> tuple[torch.Tensor, np.ndarray, list]:
        """The batch's arrays back to back in one host buffer (page-locked with ``pin``): (buffer as a 1-D tensor
        of the batch's type, shapes, source names)."""
        picks = [i for i, _ in self.next_samples(ctx)]
        pool = ctx.thread_pool
        headers = self._headers(picks, pool)
        names = [self.paths[i] for i in picks]
        dtypes = {h.dtype.newbyteorder("=") for h in headers}
        if len(dtypes) > 1:
            first = headers[0].dtype.newbyteorder("=")
            k = next(k for k, h in enumerate(headers) if h.dtype.newbyteorder("=") != first)
            raise SampleError(k, names[k], ValueError(
                f"all arrays of a batch must have one type: '{names[0]}' holds {first}, '{names[k]}' holds "
                f"{headers[k].dtype}"))
        dtype = dtypes.pop()
        plans = []
        for k, (i, h) in enumerate(zip(picks, headers)):
            a = args.sample(k)
            try:
                plans.append(plan_sample(h, roi_window(h, a, names[k]), a["out_of_bounds_policy"], names[k]))
            except (ValueError, ArgumentError) as e:
                raise SampleError(k, names[k], e) from None
        out_bytes = np.array([math.prod(p.out_shape) * dtype.itemsize for p in plans], np.int64)
        out_offsets = np.zeros(len(plans), np.int64)
        np.cumsum(out_bytes[:-1], out=out_offsets[1:])
        buf = batch_buffer(max(1, int(out_bytes.sum())), pin, self.spec.device_id)
        host = buf.numpy()
        # Direct samples: their runs land in their slots, back to back. The others are read apart, then finished.
        direct = [k for k, p in enumerate(plans) if p.direct]
        apart = [k for k, p in enumerate(plans) if not p.direct]
        for group, target in ((direct, host), (apart, None)):
            if not group:
                continue
            r_paths, r_names, r_starts, r_sizes, r_offsets, owner = [], [], [], [], [], []
            pos = 0
            for k in group:
                p = plans[k]
                base = out_offsets[k] if target is not None else pos
                local = np.concatenate([[0], np.cumsum(p.sizes)[:-1]]).astype(np.int64)
                r_offsets.append(base + local)
                r_starts.append(p.starts)
                r_sizes.append(p.sizes)
                r_paths += [names[k]] * len(p.starts)
                r_names += [names[k]] * len(p.starts)
                owner.append((k, pos))
                pos += int(p.sizes.sum())
            starts, sizes, offsets = (np.concatenate(x).astype(np.int64) if x else np.zeros(0, np.int64)
                                      for x in (r_starts, r_sizes, r_offsets))
            scratch = target if target is not None else np.empty(max(1, pos), np.uint8)
            try:
                read_into(r_paths, starts, sizes, r_names, scratch, offsets, pool=pool, what="array data",
                          clients=self.s3)
            except SampleError as e:
                k = names.index(e.source) if e.source in names else e.index
                raise SampleError(k, e.source, e.cause) from None
            if target is None:
                fill = float(args.const("fill_value"))

                def finish(run: range) -> None:
                    for k, pos in owner[run.start:run.stop]:
                        p = plans[k]
                        raw = scratch[pos: pos + int(p.sizes.sum())]
                        _finish(p, raw, host[out_offsets[k]: out_offsets[k] + out_bytes[k]], fill)

                map_all(pool, finish, runs(len(owner), pool))
        flat = buf[: int(out_bytes.sum())].view(_torch_dtype(dtype))
        return flat, np.array([p.out_shape for p in plans], np.int64).reshape(len(plans), -1), names

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
        flat, shapes, names = self.read_batch(ctx, args, self.pin_outputs)
        return Batch.from_packed(flat, shapes, "", names)


@SCHEMA.operator_class("gpu")
class NumpyReaderGpu(NumpyReader):
    """``device="gpu"``: the batch is read in the CPU stage (``prepare``) into one page-locked buffer; the GPU
    stage copies it to the GPU in one copy on the pipeline's stream."""

    def prepare(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs):
        return self.read_batch(ctx, args, True)

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
        flat, shapes, names = ctx.prepared if ctx.prepared is not None else self.prepare(ctx, args=args)
        return Batch.from_packed(flat.to(ctx.device, non_blocking=True), shapes, "", names)


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype)).dtype


def _size(path: str, k: int, clients: storage.S3Clients) -> int:
    try:
        return storage.size(path, clients=clients)
    except storage.StorageError as e:
        raise SampleError(k, path, e) from None
