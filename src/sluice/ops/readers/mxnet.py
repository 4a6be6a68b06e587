"""``fn.readers.mxnet``: images and labels of MXNet RecordIO files (``.rec`` with their ``.idx``), as DALI's
reader, without MXNet.

A ``.rec`` file is a run of records, each a 4-byte magic (``0xced7230a``), a 4-byte word holding a 3-bit
continuation flag and a 29-bit length, and that many bytes padded to a multiple of 4. A payload holding the magic
at an aligned position was written as several parts (flag 1, 2..., 3), the magic dropped between them; they are
joined back with it. The payload of an image record starts with MXNet's ``IRHeader`` (``uint32 flag``, ``float
label``, ``uint64 id[2]``); ``flag`` > 0 means ``flag`` float labels follow it. The rest is the encoded image.

The ``.idx`` files (``key<TAB>offset`` per line, as ``im2rec`` writes them) locate the records; a batch's records
are read as byte ranges into one buffer (:func:`sluice.ops.readers._base.read_packed`). Outputs: the image bytes
(1-D uint8, back to back in one buffer) and the labels (float32, one or ``flag`` values). Sharding, shuffling,
``pad_last_batch`` and checkpoints are ``readers.file``'s.
"""

from __future__ import annotations

import struct

import numpy as np
import torch

from sluice.backends import storage
from sluice.errors import ArgumentError, SampleError
from sluice.ops._host import batch_buffer
from sluice.ops.readers._base import as_list, member_name, read_packed, record_table
from sluice.ops.readers.file import READER_ARGS, ReaderBase
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import map_all, runs
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema, OpSpec

__all__ = ["SCHEMA", "MAGIC", "parse_index", "parse_record"]

MAGIC = 0xCED7230A
_HEADER = struct.Struct("<IfQQ")  # IRHeader: flag, label, id, id2

SCHEMA = OpSchema(
    "readers.mxnet",
    doc="""Reads images and labels from MXNet RecordIO files (``.rec`` with the ``.idx`` index ``im2rec``
    writes). Outputs the encoded images (1-D uint8) and their labels (float32).

    Example::

        jpegs, labels = fn.readers.mxnet(path=["train.rec"], index_path=["train.idx"], random_shuffle=True)
        images = fn.decoders.image(jpegs, device="mixed")
    """,
    inputs=0,
    outputs=2,
    devices=("cpu",),
    stateful=True,
    output_layout="",
    args=[
        Arg("path", "str_list", REQUIRED, "RecordIO (.rec) files, paths or s3:// URLs."),
        Arg("index_path", "str_list", REQUIRED, "Their index (.idx) files, one per .rec file, in the same order."),
        *READER_ARGS,
    ],
)


def parse_index(text: str, where: str, file_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and sizes of the records an ``.idx`` text lists, in its order (a record runs to the next offset
    of the file, the last to its end)."""
    offsets = []
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            offsets.append(int(parts[-1]))
        except ValueError:
            raise ArgumentError(f"fn.readers.mxnet: line {n} of the index {where} is not 'key<TAB>offset': "
                                f"{line!r}") from None
    offsets = np.asarray(offsets, np.int64)
    if len(offsets) and (offsets.min() < 0 or offsets.max() >= file_size):
        raise ArgumentError(f"fn.readers.mxnet: the index {where} has offsets outside the file of {file_size} bytes")
    ends = np.sort(np.unique(np.concatenate([offsets, [file_size]])))
    sizes = ends[np.searchsorted(ends, offsets, side="right")] - offsets
    return offsets, sizes


def _payload(buf: memoryview, start: int, end: int) -> bytes | memoryview:
    """The payload of the record at ``buf[start:end]``, its parts joined with the magic between them."""
    parts = []
    pos = start
    while True:
        if pos + 8 > end:
            raise ValueError("the record ends inside its 8-byte frame header")
        magic, word = struct.unpack_from("<II", buf, pos)
        if magic != MAGIC:
            raise ValueError(f"wrong magic number 0x{magic:08x} (expected 0x{MAGIC:08x}): not a RecordIO record, "
                             "or the index does not fit the file")
        flag, length = word >> 29, word & ((1 << 29) - 1)
        pos += 8
        if pos + length > end:
            raise ValueError(f"a record part of {length} bytes runs past the record's end")
        if flag not in ((0, 1) if not parts else (2, 3)):
            raise ValueError(f"continuation flag {flag} where a {'first' if not parts else 'later'} part belongs")
        parts.append(buf[pos:pos + length])
        pos += (length + 3) & ~3
        if flag in (0, 3):
            break
    if len(parts) == 1:
        return parts[0]
    return struct.pack("<I", MAGIC).join(bytes(p) for p in parts)


def parse_record(buf: memoryview, start: int, end: int) -> tuple[memoryview, np.ndarray]:
    """The image bytes and the float32 labels of the image record at ``buf[start:end]``."""
    payload = memoryview(_payload(buf, start, end))
    if len(payload) < _HEADER.size:
        raise ValueError(f"the record holds {len(payload)} bytes, less than MXNet's {_HEADER.size}-byte IRHeader")
    flag, label, _, _ = _HEADER.unpack_from(payload, 0)
    if flag == 0:
        return payload[_HEADER.size:], np.array([label], np.float32)
    lo = _HEADER.size + 4 * flag
    if lo > len(payload):
        raise ValueError(f"the IRHeader announces {flag} labels, more than the record holds")
    return payload[lo:], np.frombuffer(payload[_HEADER.size:lo], "<f4").astype(np.float32)


@SCHEMA.operator_class("cpu")
class MXNetReader(ReaderBase):
    op_name = "fn.readers.mxnet"

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        a = spec.args
        self.files = as_list(self.op_name, "path", a["path"])
        indexes = as_list(self.op_name, "index_path", a["index_path"])
        if len(indexes) != len(self.files):
            raise ArgumentError(f"{self.op_name}: {len(indexes)} index_path entries for {len(self.files)} files in "
                                "path; give one .idx per .rec, in the same order")
        per_file = []
        s3 = self.s3
        for path, idx in zip(self.files, indexes):
            try:
                per_file.append(parse_index(storage.read_text(idx, clients=s3), f"'{idx}' (of '{path}')",
                                            storage.size(path, clients=s3)))
            except storage.StorageError as e:
                raise ArgumentError(f"{self.op_name}: {e}") from None
        self.file_of, self.offsets, self.sizes, self.record_no = record_table(
            self.op_name, per_file, f"the index files list no records: {indexes}")
        self.setup_order(len(self.file_of))

    def _name(self, i: int) -> str:
        return member_name(self.files[self.file_of[i]], f"record {self.record_no[i]}")

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> tuple[Batch, Batch]:
        picks = np.array([i for i, _ in self.next_samples(ctx)], np.int64)
        n = len(picks)
        names = [self._name(i) for i in picks.tolist()]
        buf, offs, sizes = read_packed(self.op_name, [self.files[f] for f in self.file_of[picks].tolist()],
                                       self.offsets[picks], self.sizes[picks], names, pool=ctx.thread_pool,
                                       what="record", clients=self.s3)
        view = memoryview(buf.numpy())
        parsed: list = [None] * n

        def parse(run: range) -> None:
            for k in run:
                try:
                    parsed[k] = parse_record(view, int(offs[k]), int(offs[k] + sizes[k]))
                except ValueError as e:
                    raise SampleError(k, names[k], ValueError(f"{names[k]}: {e}")) from None

        map_all(ctx.thread_pool, parse, runs(n, ctx.thread_pool))
        lengths = np.array([len(p[0]) for p in parsed], np.int64)
        out = batch_buffer(max(1, int(lengths.sum())), self.pin_outputs, self.spec.device_id)
        dst = out.numpy()
        pos = 0
        for (image, _), z in zip(parsed, lengths.tolist()):
            dst[pos:pos + z] = np.frombuffer(image, np.uint8)
            pos += z
        images = Batch.from_packed(out[:pos], lengths[:, None], "", names)
        labels = [torch.from_numpy(p[1]) for p in parsed]
        if labels and all(len(x) == len(labels[0]) for x in labels):
            return images, Batch.from_dense(torch.stack(labels), "", names)
        return images, Batch(labels, "", names)
