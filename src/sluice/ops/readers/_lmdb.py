"""What ``readers.caffe`` and ``readers.caffe2`` share: an LMDB database (``pip install 'sluice[lmdb]'``) read as a
list of records in key order, with ``readers.file``'s sharding, shuffling, padding and checkpoints. A batch's
values are fetched in one read transaction and parsed in the pipeline's threads; a value that does not parse is
an error naming the database and the record."""

from __future__ import annotations

from typing import Any

from sluice._optional import require
from sluice.errors import ArgumentError, SampleError
from sluice.ops.readers._base import member_name
from sluice.ops.readers.file import ReaderBase
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import map_all, runs
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSpec

__all__ = ["LmdbReader", "LMDB_ARGS"]

#: The arguments of both LMDB readers before their own (then readers.file's).
LMDB_ARGS = [
    Arg("path", "str_list", REQUIRED, "The LMDB database (its folder)."),
    Arg("image_available", bool, True, "Output the images."),
]


class LmdbReader(ReaderBase):
    """Subclasses set ``op_name`` and implement ``parse(value: memoryview, name: str) -> tuple`` (one sample's
    outputs) and ``collate(columns, names) -> tuple[Batch, ...]``."""

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        lmdb = require("lmdb", self.op_name)
        path = spec.args["path"]
        if isinstance(path, (list, tuple)):
            if len(path) != 1:
                raise ArgumentError(f"{self.op_name}: path names one LMDB database, got {len(path)}")
            path = path[0]
        self.path = str(path)
        try:
            self.env = lmdb.open(self.path, readonly=True, lock=False, readahead=False, max_readers=512,
                                 subdir=True)
        except lmdb.Error as e:
            raise ArgumentError(f"{self.op_name}: '{self.path}' is not an LMDB database ({e})") from None
        with self.env.begin(buffers=False) as txn:
            self.keys = [bytes(k) for k in txn.cursor().iternext(keys=True, values=False)]
        if not self.keys:
            raise ArgumentError(f"{self.op_name}: the LMDB database '{self.path}' holds no records")
        self.setup_order(len(self.keys))

    def _name(self, i: int) -> str:
        return member_name(self.path, f"record {i}")

    def parse(self, value: memoryview, name: str) -> tuple:
        raise NotImplementedError

    def collate(self, columns: list[list[Any]], names: list[str]) -> tuple[Batch, ...]:
        raise NotImplementedError

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> tuple[Batch, ...]:
        picks = [i for i, _ in self.next_samples(ctx)]
        names = [self._name(i) for i in picks]
        with self.env.begin(buffers=False) as txn:
            values = [txn.get(self.keys[i]) for i in picks]
        n = len(picks)
        rows: list = [None] * n

        def parse(run: range) -> None:
            for k in run:
                if values[k] is None:
                    raise SampleError(k, names[k], KeyError(f"{names[k]} vanished from the database"))
                try:
                    rows[k] = self.parse(memoryview(values[k]), names[k])
                except (ValueError, IndexError) as e:
                    raise SampleError(k, names[k], ValueError(f"{self.op_name}: {names[k]}: {e}")) from None

        map_all(ctx.thread_pool, parse, runs(n, ctx.thread_pool))
        return self.collate([list(col) for col in zip(*rows)] if rows else [], names)

    def close(self) -> None:
        env = getattr(self, "env", None)
        if env is not None:
            env.close()
            self.env = None
