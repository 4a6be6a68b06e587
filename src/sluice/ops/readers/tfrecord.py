"""``fn.readers.tfrecord``: ``tf.train.Example`` records of TFRecord files, without TensorFlow (DALI's TFRecord
reader).

Each record is found through an index (``index_path``: DALI's ``tfrecord2idx`` format, which ``sluice
tfrecord-index`` writes; when none is given it is built by walking the file once and cached under
``$SLUICE_CACHE/tfrecord/``). A batch's records are read as byte ranges into one buffer, their length and data
CRC-32Cs checked in one call of the compiled core, and the requested features decoded from the protobuf wire
format. Strings (encoded images) come out back to back in one buffer (page-locked for GPU pipelines), as
``readers.file`` hands out files.

Errors name the file and the record: a damaged record (CRC), a truncated file, an index that does not fit its
file, a record that is not an Example, a record lacking a feature that has no default, a FixedLenFeature with
the wrong number of values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sluice import tfrecord as tfrec
from sluice.backends import storage
from sluice.backends.tfrecord import (
    FOOTER,
    HEADER,
    TFRecordError,
    build_index,
    check_records,
    parse_example,
    parse_index,
)
from sluice.errors import ArgumentError, SampleError
from sluice.ops._host import batch_buffer
from sluice.ops.readers._base import as_list, cached_index, member_name, read_packed, record_table
from sluice.ops.readers.file import READER_ARGS, ReaderBase
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import map_all, runs
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema, OpSpec


def _feature_names(args: dict[str, Any]) -> list[str]:
    return list((args.get("features") or {}).keys())


SCHEMA = OpSchema(
    "readers.tfrecord",
    doc="""Reads ``tf.train.Example`` records from TFRecord files; returns a dict of outputs, one per feature.

    ``features`` maps feature names to ``sluice.tfrecord.FixedLenFeature(shape, dtype, default_value)`` or
    ``VarLenFeature(dtype, default_value)``, with dtype ``tfrecord.int64`` (INT64 output), ``tfrecord.float32``
    (FLOAT) or ``tfrecord.string`` (the bytes of the first value, 1-D UINT8: encoded images for the decoders).
    ``path`` and ``index_path`` are lists of files or ``s3://`` URLs; without ``index_path`` the indexes are
    built and cached. Sharding, shuffling and padding are ``readers.file``'s, over the records of all files.

    Example::

        from sluice import tfrecord as tfrec
        inputs = fn.readers.tfrecord(path=["train-0.tfrecord"], index_path=["train-0.idx"], features={
            "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
            "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1)}, random_shuffle=True)
        images = fn.decoders.image(inputs["image/encoded"], device="mixed")
    """,
    inputs=0,
    outputs=lambda args: len(_feature_names(args)),
    output_names=_feature_names,
    devices=("cpu",),
    stateful=True,
    output_layout="",
    args=[
        Arg("path", "str_list", REQUIRED, "TFRecord files (paths or s3:// URLs)."),
        Arg("index_path", "str_list", None, "Index files (tfrecord2idx / sluice tfrecord-index format), one per "
            "file; default: built and cached under $SLUICE_CACHE/tfrecord."),
        Arg("features", object, REQUIRED, "Dict: feature name -> tfrecord.FixedLenFeature / VarLenFeature."),
        Arg("use_o_direct", bool, False, "Accepted for DALI compatibility."),
        *READER_ARGS,
    ],
)

_OUT = {tfrec.int64: np.int64, tfrec.float32: np.float32}
_KIND = {tfrec.int64: "int64", tfrec.float32: "float", tfrec.string: "bytes"}


@SCHEMA.operator_class("cpu")
class TFRecordReader(ReaderBase):
    op_name = "fn.readers.tfrecord"

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        a = spec.args
        features = a["features"]
        if not isinstance(features, dict) or not features:
            raise ArgumentError(f"{self.op_name}: features must be a non-empty dict of name -> "
                                "tfrecord.FixedLenFeature / VarLenFeature")
        for name, f in features.items():
            if not isinstance(f, tfrec.Feature):
                raise ArgumentError(f"{self.op_name}: feature {name!r} is {f!r}; use tfrecord.FixedLenFeature or "
                                    "tfrecord.VarLenFeature")
        self.features: dict[str, tfrec.Feature] = dict(features)
        self.files = as_list(self.op_name, "path", a["path"])
        indexes = a["index_path"]
        if indexes and len(indexes) != len(self.files):
            raise ArgumentError(f"{self.op_name}: {len(indexes)} index_path entries for {len(self.files)} files in "
                                "path; give one index per file, in the same order")
        per_file = []
        s3 = self.s3
        for k, path in enumerate(self.files):
            try:
                size = storage.size(path, clients=s3)
                if indexes:
                    o, z = parse_index(storage.read_text(indexes[k], clients=s3), f"'{indexes[k]}' (of '{path}')",
                                       size)
                else:
                    o, z = cached_index("tfrecord", path, lambda p=path, n=size: _index_text(p, n, s3),
                                        lambda text, p=path, n=size: parse_index(text, f"of '{p}'", n), clients=s3)
            except storage.StorageError as e:
                raise ArgumentError(f"{self.op_name}: {e}") from None
            per_file.append((o, z))
        self.file_of, self.offsets, self.sizes, self.record_no = record_table(
            self.op_name, per_file, f"the files hold no records: {self.files}")
        self.setup_order(len(self.file_of))

    def _name(self, i: int) -> str:
        return member_name(self.files[self.file_of[i]], f"record {self.record_no[i]}")

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> tuple[Batch, ...]:
        picks = np.array([i for i, _ in self.next_samples(ctx)], np.int64)
        n = len(picks)
        names = [self._name(i) for i in picks.tolist()]
        paths = [self.files[f] for f in self.file_of[picks].tolist()]
        buf, offs, sizes = read_packed(self.op_name, paths, self.offsets[picks], self.sizes[picks], names,
                                       pool=ctx.thread_pool, what="record", clients=self.s3)
        host = buf.numpy()
        bad = check_records(host, offs, sizes)
        if bad.size:
            k = int(bad[0])
            raise SampleError(k, names[k], TFRecordError(f"{names[k]} is damaged: its length or data fails its "
                                                         "CRC-32C (or disagrees with the index)"))
        wanted = set(self.features)
        pool = ctx.thread_pool
        parsed: list[dict] = [None] * n  # type: ignore[list-item]

        def parse(run: range) -> None:
            for k in run:
                lo = int(offs[k]) + HEADER
                hi = int(offs[k] + sizes[k]) - FOOTER
                try:
                    parsed[k] = parse_example(memoryview(host)[lo:hi], wanted)
                except TFRecordError as e:
                    raise SampleError(k, names[k], TFRecordError(f"{names[k]} is not a tf.train.Example: {e}"))
                for name, value in parsed[k].items():  # spans are relative to the record's data
                    if value[0] == "bytes":
                        parsed[k][name] = ("bytes", [(b + lo, e + lo) for b, e in value[1]])

        map_all(pool, parse, runs(n, pool))
        return tuple(self._output(name, f, parsed, host, names) for name, f in self.features.items())

    def _output(self, name: str, f: tfrec.Feature, parsed: list[dict], host: np.ndarray, names: list[str]) -> Batch:
        n = len(parsed)
        kind = _KIND[f.dtype]
        if f.dtype == tfrec.string:
            spans = []
            for k, p in enumerate(parsed):
                value = p.get(name)
                if value is not None and value[0] != kind:
                    raise SampleError(k, names[k], TFRecordError(
                        f"feature {name!r} of {names[k]} is a {value[0]} list, not the bytes list its feature "
                        "declares (tfrecord.string)"))
                if value is None or not value[1]:
                    if f.default_value is None:
                        raise SampleError(k, names[k], TFRecordError(f"{names[k]} has no feature {name!r} and its "
                                                                     "FixedLenFeature has no default_value"))
                    spans.append(None)
                else:
                    if f.shape is None:
                        raise SampleError(k, names[k], TFRecordError(
                            f"feature {name!r}: VarLenFeature of strings is not supported; use "
                            "FixedLenFeature((), tfrecord.string)"))
                    spans.append(value[1][0])
            default = f.default_value.encode() if isinstance(f.default_value, str) else bytes(f.default_value or b"")
            sizes = np.array([len(default) if s is None else s[1] - s[0] for s in spans], np.int64)
            out = batch_buffer(max(1, int(sizes.sum())), self.pin_outputs, self.spec.device_id)
            dst = out.numpy()
            pos = 0
            for s, z in zip(spans, sizes.tolist()):
                dst[pos:pos + z] = np.frombuffer(default, np.uint8) if s is None else host[s[0]:s[1]]
                pos += z
            return Batch.from_packed(out[:pos], sizes[:, None], "", names)
        dtype = _OUT[f.dtype]
        samples = []
        for k, p in enumerate(parsed):
            value = p.get(name)
            if value is not None and value[0] != kind and len(value[1]):
                raise SampleError(k, names[k], TFRecordError(
                    f"feature {name!r} of {names[k]} is a {value[0]} list, not the {kind} list its feature "
                    f"declares (tfrecord.{f.dtype})"))
            values = None if value is None or value[0] != kind else np.asarray(value[1], dtype)
            if f.shape is None:
                if values is None or not values.size:
                    values = np.zeros(0, dtype) if f.default_value is None else np.array([f.default_value], dtype)
                samples.append(torch.from_numpy(values))
                continue
            count = int(np.prod(f.shape))
            if values is None or not values.size:
                if f.default_value is None:
                    raise SampleError(k, names[k], TFRecordError(f"{names[k]} has no feature {name!r} and its "
                                                                 "FixedLenFeature has no default_value"))
                values = np.full(count, f.default_value, dtype)
            elif values.size != count:
                raise SampleError(k, names[k], TFRecordError(
                    f"feature {name!r} of {names[k]} has {values.size} values; its FixedLenFeature{list(f.shape)} "
                    f"needs {count}"))
            samples.append(torch.from_numpy(values.reshape(f.shape)))
        if f.shape is not None:
            return Batch.from_dense(torch.stack(samples) if n else torch.zeros((0, *f.shape)), "", names)
        return Batch(samples, "", names)


def _index_text(path: str, size: int, clients: storage.S3Clients) -> str:
    with storage.open_file(path, buffer_size=8 << 20, clients=clients) as f:
        return build_index(f, path, size)
