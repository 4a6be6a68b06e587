"""``fn.readers.webdataset``: samples of WebDataset tar shards, read in place (DALI's webdataset reader).

A shard is a tar archive whose consecutive members sharing a name up to the first dot of their file name form a
sample (``n01440764_10026.jpg`` and ``n01440764_10026.cls`` are the ``jpg`` and ``cls`` components of sample
``n01440764_10026``). Files whose name starts with a dot and entries that are not regular files are ignored.

The members are never extracted: each shard's index (where each member's bytes lie) comes from ``index_paths``
(DALI's ``wds2idx`` format, v1.1 or v1.2), else it is built by reading the tar headers once and cached under
``$SLUICE_CACHE/webdataset/`` (keyed by the shard's path, size and modification time, or an object's ETag). A
batch's members are then read as byte ranges, back to back into one buffer (page-locked for GPU pipelines), by
the compiled core with the GIL released, each shard opened once a batch and every pool thread taking the next
unread member, so that the image decoders take them as they take ``readers.file``'s batches.

Bad shards are errors naming the shard and the member: a truncated tar (a member's bytes, or the end-of-archive
blocks, missing), a damaged header (checksum), a member missing a component with
``missing_component_behavior="error"``, an index that does not match its shard.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import torch

from sluice import types
from sluice.backends import storage
from sluice.errors import ArgumentError
from sluice.ops.readers._base import as_list, cached_index, member_name, read_packed
from sluice.ops.readers.file import READER_ARGS, ReaderBase
from sluice.pipeline.batch import Batch
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema, OpSpec

logger = logging.getLogger(__name__)

MISSING_BEHAVIORS = ("", "empty", "skip", "error")

SCHEMA = OpSchema(
    "readers.webdataset",
    doc="""Reads WebDataset tar shards without extracting them: one output per extension set of ``ext``.

    Each output is 1-D (the member's bytes, UINT8 unless ``dtypes`` says otherwise); a sample lacking a
    component gives an empty tensor for it (``missing_component_behavior="empty"``), is left out (``"skip"``),
    or is an error naming the shard and the sample (``"error"``). ``paths`` are tar files or ``s3://`` URLs, a
    folder or URL prefix ending in ``/`` (its ``.tar`` files, sorted), or a wids shard index (a ``.json`` file
    with a ``shardlist``, as ``widsindex`` writes it; shard URLs in it are relative to the file). The sample
    order, sharding (``shard_id`` / ``num_shards`` split the samples), shuffling and ``pad_last_batch`` are
    ``readers.file``'s.

    Example::

        jpegs, labels = fn.readers.webdataset(paths=shards, ext=["jpg;png", "cls"], random_shuffle=True,
                                              name="Reader")
        images = fn.decoders.image(jpegs, device="mixed")
    """,
    inputs=0,
    outputs=lambda args: len(args["ext"] or []),
    devices=("cpu",),
    stateful=True,
    output_layout="",
    args=[
        Arg("paths", "str_list", REQUIRED, "Tar shards (paths or s3:// URLs), a folder or URL prefix ending in "
            "'/', or a wids shard index (.json)."),
        Arg("ext", "str_list", REQUIRED, "One extension set per output: extensions (the file name after its first "
            "dot) separated by ';', e.g. 'jpg;png'."),
        Arg("index_paths", "str_list", None, "DALI index files (wds2idx, v1.1 or v1.2), one per shard; default: "
            "built from the shards and cached under $SLUICE_CACHE/webdataset."),
        Arg("missing_component_behavior", str, "", "A sample without a component of an output: 'empty' (or '') "
            "gives an empty tensor, 'skip' leaves the sample out, 'error' raises.", choices=MISSING_BEHAVIORS),
        Arg("dtypes", object, None, "Output types (types.UINT8, types.INT64, types.FLOAT, ...), one per output; "
            "a member's size must be a multiple of its type's size. Default: all UINT8."),
        Arg("case_sensitive_extensions", bool, True, "Match ext case-sensitively (False: 'jpg' matches 'JPG')."),
        *READER_ARGS,
    ],
)

_TYPES = {types.UINT8: torch.uint8, types.INT8: torch.int8, types.UINT16: torch.uint16, types.INT16: torch.int16,
          types.UINT32: torch.uint32, types.INT32: torch.int32, types.UINT64: torch.uint64, types.INT64: torch.int64,
          types.FLOAT16: torch.float16, types.FLOAT: torch.float32, types.FLOAT64: torch.float64}


# ---- tar headers ---------------------------------------------------------------------------------------------------
class TarError(ValueError):
    """A tar shard that is damaged or truncated (the message names the shard and where)."""


BLOCK = 512


def _octal(field: bytes) -> int:
    if field and field[0] & 0x80:  # GNU base-256 for large values
        value = int.from_bytes(field[1:], "big") | ((field[0] & 0x3F) << (8 * (len(field) - 1)))
        return -value if field[0] & 0x40 else value
    text = field.split(b"\0", 1)[0].strip(b" \0")
    return int(text, 8) if text else 0


def _pax(data: bytes) -> dict[str, str]:
    out, pos = {}, 0
    while pos < len(data):
        space = data.index(b" ", pos)
        length = int(data[pos:space])
        key, _, value = data[space + 1: pos + length - 1].partition(b"=")
        out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
        pos += length
    return out


def tar_members(f: BinaryIO, shard: str, size: int) -> list[tuple[str, int, int]]:
    """The regular files of the tar archive ``f`` (``size`` bytes; ``shard`` names it in errors) as
    ``(name, data offset, data size)``, in archive order: ustar, GNU (long names, base-256 sizes) and pax headers.
    Raises :class:`TarError` for a damaged header or a truncated archive."""
    members: list[tuple[str, int, int]] = []
    pos, long_name, pax, last = 0, None, {}, "(the start)"
    while True:
        header = f.read(BLOCK)
        if len(header) < BLOCK:
            raise TarError(f"tar shard '{shard}' is truncated: it ends at byte {pos + len(header)} after member "
                           f"{last} without tar's end-of-archive blocks")
        if header == bytes(BLOCK):
            return members
        stored = _octal(header[148:156])
        unsigned = sum(header) - sum(header[148:156]) + 8 * 32
        signed = unsigned - 2 * sum(b for b in header[:148] + header[156:] if b > 127)
        if stored not in (unsigned, signed):
            raise TarError(f"tar shard '{shard}' is damaged: the header at byte {pos} (after member {last}) fails "
                           "its checksum")
        kind = header[156:157]
        length = _octal(header[124:136])
        if "size" in pax:
            length = int(pax["size"])
        name = header[0:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        if header[257:263] == b"ustar\0" and header[345]:  # POSIX ustar: a prefix for long paths
            name = header[345:500].split(b"\0", 1)[0].decode("utf-8", "surrogateescape") + "/" + name
        data = pos + BLOCK
        end = data + length
        if end > size:
            raise TarError(f"tar shard '{shard}' is truncated: member '{long_name or pax.get('path') or name}' "
                           f"needs bytes {data}..{end} but the shard has {size}")
        if kind in (b"L", b"x", b"g"):
            payload = f.read(length)
            if kind == b"L":
                long_name = payload.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            elif kind == b"x":
                pax = _pax(payload)
        else:
            name = pax.get("path") or long_name or name
            if kind in (b"0", b"\0", b"7"):
                members.append((name, data, length))
            last = f"'{name}'"
            long_name, pax = None, {}
        pos = data + -(-length // BLOCK) * BLOCK
        f.seek(pos)


def split_name(name: str) -> tuple[str, str]:
    """``dir/key.ext.gz`` -> (``dir/key``, ``ext.gz``): the extension is what follows the first dot of the file
    name (as DALI's and webdataset's readers split it); ('', '') for names without one."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    return (name[:dot], name[dot + 1:]) if dot > 0 else ("", "")


def build_index(shard: str, clients: storage.S3Clients | None = None) -> str:
    """The DALI v1.2 index text of a shard (``v1.2 <samples>``, then per sample ``ext offset size name ...``);
    ``clients``: the pipeline's S3 clients, for a shard in S3."""
    size = storage.size(shard, clients=clients)
    with storage.open_file(shard, buffer_size=8 << 20, clients=clients) as f:
        members = tar_members(f, shard, size)
    samples: list[list[str]] = []
    last = None
    for name, offset, length in members:
        key, ext = split_name(name)
        if not key or key.endswith("/"):  # hidden files (".x") and names without an extension
            continue
        if " " in name or "\n" in name:
            raise TarError(f"tar shard '{shard}': member '{name}' has a space or a line break in its name, which "
                           "an index cannot hold")
        if key != last:
            samples.append([])
            last = key
        samples[-1].append(f"{ext} {offset} {length} {name}")
    return f"v1.2 {len(samples)}\n" + "".join(" ".join(s) + "\n" for s in samples)


@dataclass
class Component:
    ext: str
    offset: int
    size: int
    name: str


def parse_index(text: str, where: str) -> list[list[Component]]:
    """The samples of a DALI webdataset index (v1.1: ``ext offset size`` per component; v1.2: ``ext offset size
    name``). ``where`` names the index in errors."""
    lines = text.split("\n")
    head = lines[0].split()
    if len(head) != 2 or head[0] not in ("v1.1", "v1.2") or not head[1].isdigit():
        raise TarError(f"webdataset index {where} is broken: its first line should be 'v1.2 <samples>' (or v1.1), "
                       f"got {lines[0][:80]!r}")
    fields = 3 if head[0] == "v1.1" else 4
    count = int(head[1])
    rows = [ln for ln in lines[1:] if ln.strip()]
    if len(rows) != count:
        raise TarError(f"webdataset index {where} is broken: its header announces {count} samples, it lists "
                       f"{len(rows)}")
    samples = []
    for number, line in enumerate(rows, 2):
        parts = line.split()
        if not parts or len(parts) % fields:
            raise TarError(f"webdataset index {where} is broken: line {number} should hold groups of {fields} "
                           f"fields (ext offset size{' name' if fields == 4 else ''}): {line[:80]!r}")
        comps = []
        for k in range(0, len(parts), fields):
            try:
                offset, size = int(parts[k + 1]), int(parts[k + 2])
            except ValueError:
                raise TarError(f"webdataset index {where} is broken: line {number} has a non-integer offset or "
                               f"size: {line[:80]!r}") from None
            if offset < 0 or size < 0:
                raise TarError(f"webdataset index {where} is broken: line {number} has a negative offset or size")
            comps.append(Component(parts[k], offset, size, parts[k + 3] if fields == 4 else f"#{number - 2}"
                                   f".{parts[k]}"))
        samples.append(comps)
    return samples


def expand_paths(op: str, paths: Sequence[str], clients: storage.S3Clients | None = None) -> list[str]:
    """Shards from ``paths``: files and URLs as given, folders and prefixes ending in '/' expanded to their
    sorted ``.tar`` files, a wids shard index (``.json``) to its shard list (listed and read through
    ``clients``)."""
    out: list[str] = []
    for p in paths:
        if p.endswith("/") or (not storage.is_url(p) and os.path.isdir(p)):
            found = [f for f in storage.list_files(p, clients=clients)[0] if f.endswith(".tar")]
            if not found:
                raise ArgumentError(f"{op}: no .tar shards in '{p}'")
            out.extend(found)
        elif p.endswith(".json"):
            out.extend(_wids_shards(op, p, clients))
        else:
            out.append(p)
    return out


def _wids_shards(op: str, index: str, clients: storage.S3Clients | None) -> list[str]:
    try:
        desc = json.loads(storage.read_text(index, clients=clients))
        shards = desc["shardlist"]
        base = desc.get("base") or storage.dirname(index)
        return [storage.join(base, s["url"]) for s in shards]
    except (ValueError, KeyError, TypeError) as e:
        raise ArgumentError(f"{op}: '{index}' is not a wids shard index (JSON with a 'shardlist' of "
                            f"{{'url': ..., 'nsamples': ...}}): {e}") from None


def _wids_counts(index: str, clients: storage.S3Clients | None) -> list[int | None]:
    desc = json.loads(storage.read_text(index, clients=clients))
    return [s.get("nsamples") for s in desc["shardlist"]]


# ---- the reader ------------------------------------------------------------------------------------------------
@SCHEMA.operator_class("cpu")
class WebdatasetReader(ReaderBase):
    op_name = "fn.readers.webdataset"

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        a = spec.args
        self.exts = [[e for e in group.split(";") if e] for group in a["ext"]]
        if not self.exts or any(not g for g in self.exts):
            raise ArgumentError(f"{self.op_name}: ext needs one non-empty extension set per output, got {a['ext']}")
        self.dtypes = self._dtypes(a["dtypes"])
        s3 = self.s3
        self.shards = expand_paths(self.op_name, as_list(self.op_name, "paths", a["paths"]), s3)
        index_paths = a["index_paths"]
        if index_paths and len(index_paths) != len(self.shards):
            raise ArgumentError(f"{self.op_name}: {len(index_paths)} index_paths for {len(self.shards)} shards; give "
                                "one index per shard, in the same order")
        behavior = a["missing_component_behavior"] or "empty"
        sensitive = a["case_sensitive_extensions"]
        fold = (lambda e: e) if sensitive else str.lower
        wanted = [[fold(e) for e in g] for g in self.exts]
        # Per output: shard, offset, size, name of each kept sample's component (size 0, offset -1: missing).
        shard_of, offsets, sizes, names = [], [[] for _ in wanted], [[] for _ in wanted], [[] for _ in wanted]
        wids = [p for p in as_list(self.op_name, "paths", a["paths"]) if p.endswith(".json")]
        counts = _wids_counts(wids[0], s3) if len(wids) == 1 and len(a["paths"]) == 1 else None
        for s, shard in enumerate(self.shards):
            if index_paths:
                where = f"'{index_paths[s]}' (of shard '{shard}')"
                try:
                    samples = parse_index(storage.read_text(index_paths[s], clients=s3), where)
                except storage.StorageError as e:
                    raise ArgumentError(f"{self.op_name}: cannot read index_paths[{s}]: {e}") from None
                _check_index(samples, shard, where, s3)
            else:
                try:
                    samples = cached_index("webdataset", shard, lambda sh=shard: build_index(sh, s3),
                                           lambda text, sh=shard: parse_index(text, f"of shard '{sh}'"), clients=s3)
                except storage.StorageError as e:
                    raise ArgumentError(f"{self.op_name}: cannot read shard {s} of paths: {e}") from None
            if counts is not None and counts[s] is not None and counts[s] != len(samples):
                raise TarError(f"{self.op_name}: the wids index '{wids[0]}' says shard '{shard}' holds {counts[s]} "
                               f"samples, but it holds {len(samples)}")
            for comps in samples:
                by_ext = {}
                for c in comps:
                    ext = fold(c.ext)
                    if ext in by_ext:
                        raise TarError(f"{self.op_name}: tar shard '{shard}' has two '{c.ext}' components in one "
                                       f"sample: '{by_ext[ext].name}' and '{c.name}'")
                    by_ext[ext] = c
                picked = [next((by_ext[e] for e in g if e in by_ext), None) for g in wanted]
                if any(p is None for p in picked):
                    if behavior == "skip":
                        continue
                    if behavior == "error":
                        k = picked.index(None)
                        key = split_name(comps[0].name)[0] or comps[0].name
                        raise TarError(f"{self.op_name}: sample '{key}' of tar shard '{shard}' has no "
                                       f"'{a['ext'][k]}' component (it has: {', '.join(c.ext for c in comps)}); "
                                       "missing_component_behavior='error'")
                shard_of.append(s)
                for k, c in enumerate(picked):
                    offsets[k].append(-1 if c is None else c.offset)
                    sizes[k].append(0 if c is None else c.size)
                    names[k].append(member_name(shard, c.name if c is not None else
                                                f"{split_name(comps[0].name)[0]}.{self.exts[k][0]} (missing)"))
        if not shard_of:
            raise ArgumentError(f"{self.op_name}: the shards hold no samples with the components {a['ext']} "
                                f"(missing_component_behavior={behavior!r})")
        self.shard_of = np.asarray(shard_of, np.int32)
        self.offsets = [np.asarray(o, np.int64) for o in offsets]
        self.sizes = [np.asarray(z, np.int64) for z in sizes]
        self.names = names
        for k, dtype in enumerate(self.dtypes):
            item = torch.empty(0, dtype=dtype).element_size()
            bad = np.flatnonzero(self.sizes[k] % item)
            if bad.size:
                raise ArgumentError(f"{self.op_name}: member {self.names[k][int(bad[0])]} has "
                                    f"{int(self.sizes[k][bad[0]])} bytes, not a multiple of {item} (the size of "
                                    f"dtypes[{k}])")
        self.setup_order(len(shard_of))

    def _dtypes(self, given: Any) -> list[torch.dtype]:
        if given is None:
            return [torch.uint8] * len(self.exts)
        given = list(given) if isinstance(given, (list, tuple)) else [given]
        if len(given) != len(self.exts):
            raise ArgumentError(f"{self.op_name}: {len(given)} dtypes for {len(self.exts)} outputs (ext)")
        out = []
        for d in given:
            try:
                t = types.DALIDataType(d) if not isinstance(d, types.DALIDataType) else d
            except ValueError:
                t = None
            if isinstance(d, torch.dtype):
                t = types.from_torch_dtype(d)
            if t not in _TYPES:
                raise ArgumentError(f"{self.op_name}: invalid dtypes entry ({d!r}). Supported values are "
                                    f"{', '.join('types.' + k.name for k in _TYPES)}.")
            out.append(_TYPES[t])
        return out

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> tuple[Batch, ...]:
        """The batch's members, output after output, read back to back into one buffer (each output's stretch
        starting at a multiple of 8 bytes) by the pool's threads (:func:`read_packed`: the shards are opened once
        a batch, each thread takes the next unread member). An output whose members all have one size (``cls``
        labels of one digit) is handed out as one dense tensor, as readers.file's labels are, so that an iterator
        takes it whole instead of stacking its samples; the others are packed batches, which the image decoders
        take whole."""
        picks = np.array([i for i, _ in self.next_samples(ctx)], np.int64)
        n, k = len(picks), len(self.exts)
        listed = picks.tolist()
        starts = np.concatenate([np.maximum(self.offsets[j][picks], 0) for j in range(k)])
        sizes = np.concatenate([self.sizes[j][picks] for j in range(k)])
        names = [[self.names[j][i] for i in listed] for j in range(k)]
        buf, offsets, sizes = read_packed(self.op_name, self.shards, starts, sizes, [x for part in names for x in part],
                                          pool=ctx.thread_pool, pin=self.pin_outputs, device_id=self.spec.device_id,
                                          align_at=range(0, n * k, max(n, 1)), what="member",
                                          file_index=np.tile(self.shard_of[picks], k), clients=self.s3)
        outs = []
        for j, dtype in enumerate(self.dtypes):
            lo, hi = j * n, (j + 1) * n
            begin = int(offsets[lo])
            end = int(offsets[hi - 1] + sizes[hi - 1])
            flat = buf[begin:end]
            item = torch.empty(0, dtype=dtype).element_size()
            if item > 1:
                flat = flat.view(dtype)
            counts = sizes[lo:hi] // item
            if n and (counts == counts[0]).all():
                outs.append(Batch.from_dense(flat.view(n, int(counts[0])), "", names[j]))
            else:
                outs.append(Batch.from_packed(flat, counts[:, None], "", names[j]))
        return tuple(outs)


def _check_index(samples: list[list[Component]], shard: str, where: str, clients: storage.S3Clients) -> None:
    """An index given by the user must fit its shard: every component inside the shard's bytes."""
    size = storage.size(shard, clients=clients)
    for s, comps in enumerate(samples):
        for c in comps:
            if c.offset + c.size > size:
                raise TarError(f"webdataset index {where} is broken: sample {s} component '{c.name}' lies at bytes "
                               f"{c.offset}..{c.offset + c.size}, past the end of the shard ({size} bytes)")
