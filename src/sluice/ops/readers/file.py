"""``fn.readers.file``: files from disk as encoded bytes, with their labels.

Files come from ``file_root`` (its sorted sub-folders are the classes 0..N-1, as in DALI), from a ``file_list``
(lines ``path label``, relative to ``file_root`` or to the list's folder), or from ``files`` (+ ``labels``).
Outputs: the file's bytes (1-D UINT8) and its label (INT32 of shape [1]). Each sample carries its path as
source info, so that a decoder's error names the file. When the reader feeds GPU or mixed operators, each batch is
read back to back into one page-locked buffer (up to 256 MiB a batch; torch's host allocator reuses them), from
which the GPU copies by DMA: the mixed audio decoder copies each payload straight into its row. The files are read
by the compiled core (:mod:`sluice.native`), each of the pipeline's threads reading a run of them in one call with
the GIL released, so that reading holds no GIL the GPU stage needs.
"""

from __future__ import annotations

import fnmatch
import logging
import os
from typing import Any

import numpy as np
import torch

from sluice import native
from sluice.backends import storage
from sluice.errors import ArgumentError, SampleError
from sluice.ops._host import MAX_PINNED_BATCH_BYTES, batch_buffer  # noqa: F401 - MAX_PINNED_BATCH_BYTES re-exported
from sluice.ops.readers._base import read_packed
from sluice.ops.readers._sharding import SampleOrder, ShardingArgs
from sluice.pipeline.batch import Batch, is_page_locked
from sluice.pipeline.pool import map_all, run_shared, runs
from sluice.runtime import runtime_of
from sluice.schema import Arg, BatchArgs, BatchContext, Operator, OpSchema, OpSpec

logger = logging.getLogger(__name__)

DEFAULT_FILTERS = ["*.jpg", "*.jpeg", "*.png", "*.bmp", "*.tif", "*.tiff", "*.pnm", "*.ppm", "*.pgm", "*.pbm",
                   "*.jp2", "*.webp", "*.gif", "*.flac", "*.ogg", "*.wav", "*.mp3", "*.opus"]

# Arguments shared by every reader (DALI's reader base): sharding, shuffling, padding, naming.
READER_ARGS = [
    Arg("random_shuffle", bool, False, "Shuffle with a buffer of initial_fill samples (DALI's buffer shuffle)."),
    Arg("initial_fill", int, 1024, "Size of the random_shuffle buffer.", min=1),
    Arg("shuffle_after_epoch", bool, False, "Reorder the whole data set every epoch, identically on every shard."),
    Arg("seed", int, -1, "Seed of the reader's shuffling; -1 uses the pipeline's (shuffle_after_epoch uses a fixed "
        "seed unless this is given, so that shards agree)."),
    Arg("shard_id", int, None, "This reader's shard; default: torch.distributed's rank, else 0.", min=0),
    Arg("num_shards", int, None, "Number of shards; default: torch.distributed's world size, else 1.", min=1),
    Arg("stick_to_shard", bool, False, "Read the same shard every epoch (else move to the next one)."),
    Arg("pad_last_batch", bool, False, "Repeat the last sample so every shard gives the same number of full "
        "batches."),
    Arg("prefetch_queue_depth", int, 1, "Accepted for DALI compatibility.", min=1),
    Arg("read_ahead", bool, False, "Accepted for DALI compatibility."),
    Arg("lazy_init", bool, False, "Accepted for DALI compatibility."),
    Arg("skip_cached_images", bool, False, "Accepted for DALI compatibility."),
    Arg("dont_use_mmap", bool, False, "Accepted for DALI compatibility."),
    Arg("tensor_init_bytes", int, 1048576, "Accepted for DALI compatibility."),
]

SCHEMA = OpSchema(
    "readers.file",
    doc="""Reads files as encoded bytes, with integer labels.

    Example::

        jpegs, labels = fn.readers.file(file_root="/data/train", random_shuffle=True, name="Reader")
        images = fn.decoders.image(jpegs, device="mixed")
    """,
    inputs=0,
    outputs=2,
    devices=("cpu",),
    stateful=True,
    args=[
        Arg("file_root", str, None, "Folder of class sub-folders (or the root of file_list / files)."),
        Arg("file_list", str, None, "Text file with lines 'path label'."),
        Arg("files", "str_list", None, "Explicit list of files."),
        Arg("labels", "int_list", None, "Labels of `files`; default: 0, 1, 2, ... in order."),
        Arg("file_filters", "str_list", DEFAULT_FILTERS, "Glob patterns of the files taken from file_root."),
        Arg("case_sensitive_filter", bool, False, "Match file_filters case-sensitively."),
        Arg("dir_filters", "str_list", None, "Glob patterns of the class folders taken from file_root."),
        *READER_ARGS,
    ],
    output_layout="",
)


def list_files(op: str, args: dict[str, Any], *, clients: storage.S3Clients | None = None
               ) -> tuple[list[str], list[int]]:
    """The files and labels a reader's arguments describe, in DALI's order (``clients``: the pipeline's S3 clients,
    for a file_list or file_root in S3)."""
    root, file_list, files = args["file_root"], args["file_list"], args["files"]
    given = [k for k in ("file_list", "files") if args[k] is not None]
    if len(given) > 1:
        raise ArgumentError(f"{op}: give only one of file_list and files")
    if files is not None:
        labels = args["labels"] if args["labels"] is not None else list(range(len(files)))
        if len(labels) != len(files):
            raise ArgumentError(f"{op}: {len(labels)} labels for {len(files)} files")
        paths = [os.path.join(root, f) if root else f for f in files]
        return paths, list(labels)
    if file_list is not None:
        try:
            text = storage.read_text(file_list, clients=clients)  # a local file or an s3:// URL
        except storage.StorageError:
            raise ArgumentError(f"{op}: file_list '{file_list}' does not exist") from None
        base = root if root else storage.dirname(file_list)
        paths, labels = [], []
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.rsplit(maxsplit=1)
            if len(parts) != 2:
                raise ArgumentError(f"{op}: line {number} of '{file_list}' should be 'path label': {line!r}")
            try:
                labels.append(int(parts[1]))
            except ValueError:
                raise ArgumentError(f"{op}: line {number} of '{file_list}' has a non-integer label "
                                    f"{parts[1]!r}") from None
            paths.append(storage.join(base, parts[0]))
        return paths, labels
    if root is None:
        raise ArgumentError(f"{op}: give file_root, file_list or files")
    if storage.is_url(root):
        return _list_url(op, root, args, clients)
    if not os.path.isdir(root):
        raise ArgumentError(f"{op}: file_root '{root}' does not exist or is not a folder")
    patterns = args["file_filters"] or ["*"]
    sensitive = args["case_sensitive_filter"]

    def keep(name: str) -> bool:
        if sensitive:
            return any(fnmatch.fnmatchcase(name, p) for p in patterns)
        return any(fnmatch.fnmatch(name.lower(), p.lower()) for p in patterns)

    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    if args["dir_filters"]:
        classes = [d for d in classes if any(fnmatch.fnmatch(d, p) for p in args["dir_filters"])]
    paths, labels = [], []
    for label, cls in enumerate(classes):
        found = []
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, cls), followlinks=True):
            dirnames.sort()
            found.extend(os.path.join(dirpath, f) for f in filenames if keep(f))
        for path in sorted(found):
            paths.append(path)
            labels.append(label)
    if not classes:
        # A flat folder: every file has label 0.
        for f in sorted(os.listdir(root)):
            if os.path.isfile(os.path.join(root, f)) and keep(f):
                paths.append(os.path.join(root, f))
                labels.append(0)
    return paths, labels


def _list_url(op: str, root: str, args: dict[str, Any], clients: storage.S3Clients | None
              ) -> tuple[list[str], list[int]]:
    """``list_files`` for an s3:// ``file_root``: the first level of key prefixes below it are the classes (or,
    with none, the objects directly below it have label 0), as sub-folders of a local root are."""
    try:
        urls, _ = storage.list_files(root, clients=clients)
    except storage.StorageError as e:
        raise ArgumentError(f"{op}: file_root: {e}") from None
    prefix = root.rstrip("/") + "/"
    fold = (lambda n: n) if args["case_sensitive_filter"] else str.lower
    patterns = [fold(p) for p in (args["file_filters"] or ["*"])]
    rel = [(u, u[len(prefix):]) for u in urls]
    rel = [(u, r) for u, r in rel if any(fnmatch.fnmatchcase(fold(r.rsplit("/", 1)[-1]), p) for p in patterns)]
    classes = sorted({r.split("/", 1)[0] for _, r in rel if "/" in r})
    if args["dir_filters"]:
        classes = [d for d in classes if any(fnmatch.fnmatch(d, p) for p in args["dir_filters"])]
    if not classes:
        return [u for u, r in rel if "/" not in r], [0] * sum("/" not in r for _, r in rel)
    label = {c: k for k, c in enumerate(classes)}
    picked = [(label[r.split("/", 1)[0]], u) for u, r in rel if "/" in r and r.split("/", 1)[0] in label]
    picked.sort()
    return [u for _, u in picked], [k for k, _ in picked]


def _cannot_read(path: str, e: OSError) -> OSError:
    return OSError(f"cannot read '{path}': {e.strerror or e}")


def _read_fully(fd: int, view: np.ndarray) -> tuple[int, bool]:
    """Read into ``view`` until it is full or the file ends: (the bytes read, whether the file holds more than
    ``view``, having grown since its size was taken). Each read asks for one byte more than is left, into a spare
    byte, so growth is seen without another system call."""
    got, spare = 0, bytearray(1)
    while True:  # a short read (pipes, network file systems): read on
        more = os.readv(fd, [view[got:], spare])
        if got + more > view.size:
            return view.size, True
        got += more
        if not more or got == view.size:
            return got, False


def read_file(path: str) -> torch.Tensor:
    """The bytes of ``path`` as a 1-D uint8 tensor, read straight into its memory: one copy, made with the GIL
    released, so the pipeline's threads read in parallel (1.7x faster than read() + a bytearray here). Errors
    name the file."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            buf = np.empty(os.fstat(fd).st_size, np.uint8)
            got, grew = _read_fully(fd, buf)
            if grew:  # written to since its size was taken: read it whole, however long it is now
                os.lseek(fd, 0, os.SEEK_SET)
                with os.fdopen(os.dup(fd), "rb") as f:
                    buf = np.frombuffer(bytearray(f.read()), np.uint8)
                got = buf.size
        finally:
            os.close(fd)
    except OSError as e:
        raise _cannot_read(path, e) from None
    return torch.from_numpy(buf[:got])


def read_files(paths: list[str], pool=None, *, one_buffer: bool = False, pin: bool = False,
               device_id: int | None = None) -> list[torch.Tensor]:
    """``read_file`` for each path, in ``pool`` (runs of files per task) when given; in order. A failure raises a
    SampleError naming the sample's index and the file.

    With ``one_buffer`` (implied by ``pin``) the files are read back to back into one buffer, page-locked with
    ``pin``, and the samples are views of it (:func:`contiguous_bytes` finds that stretch again): a GPU consumer
    then copies the whole batch, or any part of it, by DMA without staging it first. ``device_id``: the GPU the
    pipeline uses (page-locking must not create a CUDA context on another GPU)."""
    if pin or one_buffer:
        return _read_into_one_buffer(paths, pool, pin, device_id).samples
    parts = runs(len(paths), pool)

    def read_run(run: range) -> list[torch.Tensor]:
        out = []
        for i in run:
            try:
                out.append(read_file(paths[i]))
            except Exception as exc:  # noqa: BLE001 - named with its sample
                raise SampleError(i, paths[i], exc) from exc
        return out

    return [t for part in map_all(pool, read_run, parts) for t in part]


def _read_into_one_buffer(paths: list[str], pool, pin: bool, device_id: int | None) -> Batch:
    """The files back to back in one buffer (page-locked with ``pin``), as a packed batch of 1-D uint8 samples
    named by their paths (see :meth:`Batch.from_packed`; a file that changed size while read makes the batch an
    ordinary one of views of the buffer and separate reads). With the compiled core the sizes are taken in one
    call and the files are read by the calling thread and the pool's threads together, the GIL released: each
    takes the next unread file (``FileBatchRead``), so that a thread that starts late (its core busy, the GIL
    taken) reads fewer files rather than holding the batch back with a fixed share. The fallback reads runs of
    files in Python (the same bytes)."""
    n = len(paths)
    c = native.core()
    sizes = c.file_sizes(paths) if c is not None else np.array([_size_of(p) for p in paths], np.int64)
    bad = np.flatnonzero(sizes < 0)
    if bad.size:
        i = int(bad[0])
        raise SampleError(i, paths[i], _cannot_read(paths[i], OSError(-int(sizes[i]), os.strerror(-int(sizes[i])))))
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    buf = batch_buffer(max(1, int(offsets[-1])), pin, device_id)
    host = buf.numpy()
    got = np.zeros(n, np.int64)
    grown: dict[int, torch.Tensor] = {}
    if c is not None:
        done, status = run_shared(pool, c.FileBatchRead(paths, offsets[:n], sizes, host), n)
        got[:] = done
        for i in np.flatnonzero(status).tolist():  # rare: a file that cannot be read, or grew
            if status[i] < 0:
                code = -int(status[i])
                raise SampleError(i, paths[i], _cannot_read(paths[i], OSError(code, os.strerror(code))))
            grown[i] = read_file(paths[i])  # written to since its size was taken: read whole, apart
    else:
        def read_run(run: range) -> None:
            for i in run:
                try:
                    fd = os.open(paths[i], os.O_RDONLY)
                    try:
                        got[i], grew = _read_fully(fd, host[offsets[i]: offsets[i + 1]])
                    finally:
                        os.close(fd)
                    if grew:
                        grown[i] = read_file(paths[i])
                except OSError as e:
                    raise SampleError(i, paths[i], _cannot_read(paths[i], e)) from None

        map_all(pool, read_run, runs(n, pool, per_thread=1, weights=sizes))
    if not grown and (got == sizes).all():  # the usual case: the samples lie back to back, as read
        return Batch.from_packed(buf[: int(offsets[-1])], sizes[:, None], "", paths)
    # A file that shrank since its size was read keeps a gap after its bytes; its sample is what was read.
    return Batch([grown[i] if i in grown else buf[int(offsets[i]): int(offsets[i] + got[i])] for i in range(n)],
                 "", paths)


def _size_of(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError as e:
        return -(e.errno or 5)


def is_page_locked_buffer(region: torch.Tensor) -> bool:
    """Whether ``region`` (from :func:`contiguous_bytes`) lies in a page-locked batch buffer."""
    return is_page_locked(region)


def batch_region(samples) -> tuple[torch.Tensor, np.ndarray, np.ndarray] | None:
    """When ``samples`` (a Batch, or a list of contiguous CPU tensors; 1-D uint8 as readers.file makes them) lie
    back to back, in order,
    in the first one's storage (as ``read_files`` reads a batch for a GPU pipeline): ``(region, offsets, sizes)``,
    that stretch as one uint8 tensor and each sample's place in it (int64 arrays); else None. A consumer copies or
    parses the batch in one call. Three cheap calls a sample: it runs once per batch."""
    packed = getattr(samples, "packed", None)
    if packed is not None:  # a packed batch (readers.file's): nothing to walk
        flat, shapes = packed
        if flat.device.type != "cpu" or flat.dtype != torch.uint8 or shapes.shape[1] != 1:
            return None
        sizes = shapes[:, 0].copy()
        offsets = np.zeros(len(sizes), np.int64)
        np.cumsum(sizes[:-1], out=offsets[1:])
        return (flat[: int(sizes.sum())], offsets, sizes) if len(sizes) else None
    samples = getattr(samples, "samples", samples)
    n = len(samples)
    if not n or samples[0].device.type != "cpu":
        return None
    sizes = np.fromiter((s.nbytes for s in samples), np.int64, n)
    full = [s for s, size in zip(samples, sizes.tolist()) if size]  # an empty view's data_ptr() is 0
    if not full:
        return None
    first = full[0]
    storage = first.untyped_storage()
    base = storage.data_ptr()
    start = end = first.data_ptr()
    for s in full:
        if s.data_ptr() != end or not s.is_contiguous():
            return None
        end += s.nbytes
    if end - base > storage.nbytes():
        return None  # the chain runs past the first sample's storage into another allocation
    offsets = np.zeros(n, np.int64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    return first.new_empty(0, dtype=torch.uint8).set_(storage, start - base, (end - start,), (1,)), offsets, sizes


def contiguous_bytes(samples) -> torch.Tensor | None:
    """The region of :func:`batch_region` (the samples' bytes back to back in one tensor), or None."""
    found = batch_region(samples)
    return None if found is None else found[0]


class ReaderBase(Operator):
    """A reader: a list of samples read in the order of :class:`SampleOrder`. Subclasses fill ``self.count``
    and implement ``load(index) -> tuple of tensors``."""

    op_name = "fn.readers"

    def setup_order(self, count: int) -> None:
        a = self.spec.args
        try:
            self.order = SampleOrder(count, ShardingArgs.from_args(self.op_name, a, self.spec.batch_size,
                                                                   self.spec.seed if a.get("seed", -1) < 0
                                                                   else a["seed"]),
                                     explicit_seed=a.get("seed", -1) >= 0)
        except ArgumentError as e:
            raise ArgumentError(f"{self.op_name}: {e}") from None

    def next_samples(self, ctx: BatchContext) -> list[tuple[int, int]]:
        return self.order.next_indices(self.spec.batch_size)

    def peek_samples(self) -> list[tuple[int, int]]:
        """The samples the next :meth:`next_samples` returns (a reader that starts work ahead asks)."""
        return self.order.peek_indices(self.spec.batch_size)

    @property
    def s3(self) -> storage.S3Clients:
        """The pipeline's S3 clients (a session of its runtime, made on first use, closed with the pipeline), which
        the reader passes to every :mod:`sluice.backends.storage` call that may reach S3."""
        return storage.clients_of(runtime_of(self.spec))

    def reader_meta(self) -> dict[str, Any]:
        return self.order.meta()

    def state_dict(self) -> dict[str, Any]:
        return self.order.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.order.load_state_dict(state)


@SCHEMA.operator_class("cpu")
class FileReader(ReaderBase):
    op_name = "fn.readers.file"

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        self.paths, self.labels = list_files(self.op_name, spec.args, clients=self.s3)
        self._labels = np.asarray(self.labels, dtype=np.int32)
        if not self.paths:
            where = spec.args["file_root"] or spec.args["file_list"] or "files"
            raise ArgumentError(f"{self.op_name}: no files found in '{where}' (file_filters="
                                f"{spec.args['file_filters']})")
        self.remote = any(storage.is_url(p) for p in self.paths)
        self.setup_order(len(self.paths))

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> tuple[Batch, Batch]:
        picks = self.next_samples(ctx)
        paths = [self.paths[i] for i, _ in picks]
        if self.remote:  # objects in S3 (or a mix): fetched concurrently, back to back in one buffer
            n = len(paths)
            buf, _, sizes = read_packed(self.op_name, paths, np.zeros(n, np.int64), np.full(n, -1, np.int64),
                                        paths, pool=ctx.thread_pool, pin=self.pin_outputs,
                                        device_id=self.spec.device_id, what="file", clients=self.s3)
            data = Batch.from_packed(buf[: int(sizes.sum())], sizes[:, None], "", paths)
        elif self.pin_outputs or native.available():
            # the batch back to back in one buffer (page-locked for a GPU pipeline), read by runs of files in the
            # compiled core: decoders then parse and decode it in one call per run too
            data = _read_into_one_buffer(paths, ctx.thread_pool, self.pin_outputs, self.spec.device_id)
        else:
            data = Batch(read_files(paths, ctx.thread_pool), "", paths)
        labels = torch.from_numpy(self._labels[[i for i, _ in picks]].reshape(-1, 1))
        return data, Batch.from_dense(labels, "", paths)
