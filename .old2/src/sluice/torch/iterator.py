"""Iterators that hand a pipeline's outputs to a PyTorch training loop, with DALI's epoch arithmetic.

A reader is an endless stream: it never stops at the end of an epoch. The iterator counts the samples of an
epoch and decides where the epoch ends, what to do with a last batch that the epoch does not fill
(:class:`LastBatchPolicy`) and, with several shards, how many samples each shard holds in each epoch. With the
data set ``1..7`` and batch size 2 (``last_batch_padded`` must match the reader's ``pad_last_batch``):

==========  =================  ==========  ======================
policy      last_batch_padded  last batch  next epoch starts with
==========  =================  ==========  ======================
PARTIAL     True               [7]         [1, 2]
PARTIAL     False              [7]         [2, 3]
FILL        True               [7, 7]      [1, 2]
FILL        False              [7, 1]      [2, 3]
DROP        True               [5, 6]      [1, 2]
DROP        False              [5, 6]      [2, 3]
==========  =================  ==========  ======================

Outputs are torch tensors on the pipeline's device: CUDA outputs stay on the GPU, and the consumer's current
stream already waits for the pipeline's work. A batch whose samples differ in shape cannot be one tensor: such an
output raises an error naming it, unless it is listed in ``ragged_outputs``; those outputs are always lists of
per-sample tensors (also when a batch happens to be uniform), so the training loop sees one type.

Example::

    from sluice.torch import DALIGenericIterator, LastBatchPolicy

    pipe = train_pipe(root, batch_size=64, device_id=0)
    loader = DALIGenericIterator(pipe, ["images", "labels"], reader_name="Reader",
                                 last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)
    for epoch in range(3):
        for batch in loader:
            images, labels = batch[0]["images"], batch[0]["labels"]
"""

from __future__ import annotations

import enum
import logging
import math
import pickle
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sluice.errors import ArgumentError, PipelineError
from sluice.pipeline.batch import Batch
from sluice.pipeline.pipeline import Pipeline
from sluice.torch import _control

log = logging.getLogger(__name__)

__all__ = ["LastBatchPolicy", "DALIGenericIterator", "DALIClassificationIterator", "batch_to_torch"]


class LastBatchPolicy(enum.Enum):
    """What an iterator does with the last batch of an epoch when the epoch does not fill it."""

    FILL = "fill"
    """Return a full batch: the reader's padding (``pad_last_batch``) or the next epoch's first samples."""
    DROP = "drop"
    """Drop the batch: the epoch ends with the last full batch."""
    PARTIAL = "partial"
    """Return only the samples of this epoch: the last batch is shorter."""


def batch_to_torch(batch: Batch, name: str, as_list: bool) -> torch.Tensor | list[torch.Tensor]:
    """One output batch as a dense torch tensor (or a list of samples when ``as_list``)."""
    if as_list:
        return list(batch.samples)
    if len(batch) and not batch.is_dense_tensor():
        shapes = sorted(set(batch.shape()))
        shown = ", ".join(str(s) for s in shapes[:4]) + (", ..." if len(shapes) > 4 else "")
        raise PipelineError(f"output '{name}' has samples of different shapes ({shown}), which cannot be stacked "
                            f"into one tensor; make them one shape in the pipeline (fn.resize, fn.crop, fn.pad) or "
                            f"pass ragged_outputs=['{name}'] to get a list of per-sample tensors")
    if not len(batch):
        return torch.empty(0)
    return batch.as_tensor()


def _auto_reset(value: Any) -> bool:
    if value in (False, None, "no"):
        return False
    if value in (True, "yes"):
        return True
    raise ArgumentError(f"invalid auto_reset ({value!r}). Supported values are False, True, 'no', 'yes'.")


class _BaseIterator:
    """The epoch arithmetic shared by the torch and JAX iterators (DALI's ``_DaliBaseIterator``).

    Subclasses implement ``_convert(pipeline_index, outputs)`` turning one pipeline's Batches into the
    framework's batch.
    """

    _STATE_FIELDS = ("_counter", "_counter_per_gpu", "_shard_sizes_per_gpu", "_shards_id", "_size")

    def __init__(self, pipelines: Pipeline | Sequence[Pipeline], size: int = -1, reader_name: str | None = None,
                 auto_reset: bool | str | None = False, fill_last_batch: bool | None = None,
                 last_batch_padded: bool = False, last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL,
                 prepare_first_batch: bool = True):
        pipes = list(pipelines) if isinstance(pipelines, (list, tuple)) else [pipelines]
        if not pipes or not all(isinstance(p, Pipeline) for p in pipes):
            raise ArgumentError("the iterator needs a Pipeline or a list of Pipelines (one per GPU), got "
                                f"{type(pipelines).__name__}")
        self._pipes = pipes
        self._num_gpus = len(pipes)
        self.batch_size = pipes[0].max_batch_size
        sizes = {p.max_batch_size for p in pipes}
        if len(sizes) > 1:
            raise ArgumentError(f"all pipelines of an iterator must have the same batch_size, got {sorted(sizes)}")
        self._auto_reset = _auto_reset(auto_reset)
        if fill_last_batch is not None:
            warnings.warn("fill_last_batch is deprecated; use last_batch_policy", DeprecationWarning, stacklevel=3)
            last_batch_policy = LastBatchPolicy.FILL if fill_last_batch else LastBatchPolicy.PARTIAL
        if not isinstance(last_batch_policy, LastBatchPolicy):
            raise ArgumentError(f"invalid last_batch_policy ({last_batch_policy!r}). Supported values are "
                                "LastBatchPolicy.FILL, LastBatchPolicy.DROP, LastBatchPolicy.PARTIAL.")
        self._last_batch_policy = last_batch_policy
        self._last_batch_padded = bool(last_batch_padded)
        self._size = int(size)
        if self._size == 0:
            raise ArgumentError("size must be positive, or -1 to run until the pipeline's sources end")
        if reader_name is not None and self._size > 0:
            raise ArgumentError("give either reader_name or size, not both (reader_name reads the size from the "
                                "reader)")
        if reader_name is not None and last_batch_padded:
            raise ArgumentError("with reader_name, last_batch_padded comes from the reader's pad_last_batch; do "
                                "not set it")
        if self._size < 0 and reader_name is None:
            if self._num_gpus > 1:
                raise ArgumentError("with several pipelines give reader_name or size: the iterator must know where "
                                    "an epoch ends")
            # The sources end the epoch themselves: their last batch is whatever they give.
            self._last_batch_policy = LastBatchPolicy.FILL
            self._last_batch_padded = False
        if self._size > 0 and reader_name is None:
            warnings.warn("give reader_name instead of size and last_batch_padded where you can: with an explicit "
                          "size, shards that change per epoch can skip or repeat samples", UserWarning, stacklevel=3)
        self._reader_name = reader_name
        self._counter = 0
        for p in pipes:
            p.build()
        if reader_name is not None:
            self._read_reader_meta()
        self._ever_scheduled = False
        self._ever_consumed = False
        if prepare_first_batch:
            self._schedule()

    # ---- sizes ----------------------------------------------------------------------------------------------
    def _read_reader_meta(self) -> None:
        metas = [p.reader_meta(self._reader_name) for p in self._pipes]

        def same(key: str) -> Any:
            values = {int(m[key]) for m in metas}
            if len(values) > 1:
                raise ArgumentError(f"reader '{self._reader_name}' has different {key} in the pipelines: "
                                    f"{sorted(values)}; every pipeline must read the same data set")
            return values.pop()

        self._size_no_pad = same("epoch_size")
        self._shards_num = same("number_of_shards")
        self._last_batch_padded = bool(same("pad_last_batch"))
        self._is_stick_to_shard = bool(same("stick_to_shard"))
        self._shards_id = np.array([int(m["shard_id"]) for m in metas], dtype=np.int64)
        bs = self.batch_size
        if self._last_batch_policy == LastBatchPolicy.DROP:
            self._size = self._size_no_pad // self._shards_num
        elif self._last_batch_padded:
            self._size = int(metas[0]["epoch_size_padded"]) // self._shards_num
        else:
            self._size = math.ceil(math.ceil(self._size_no_pad / self._shards_num) / bs) * bs
        # Where each shard's epoch starts (FILL without padding reads into the next epoch, by a different amount
        # on each shard), and each shard's size.
        self._counter_per_gpu = np.zeros(self._shards_num, dtype=np.int64)
        self._shard_sizes_per_gpu = self._shard_sizes(np.arange(self._shards_num))
        self._shard_sizes_initial = self._shard_sizes_per_gpu.copy()

    def _shard_sizes(self, shards: np.ndarray) -> np.ndarray:
        begin = shards * self._size_no_pad // self._shards_num
        end = (shards + 1) * self._size_no_pad // self._shards_num
        return (end - begin).astype(np.int64)

    @property
    def size(self) -> int:
        """Samples per shard in this epoch (-1 when the sources end the epoch)."""
        return self._size

    def __len__(self) -> int:
        """Batches in this epoch (per pipeline). 0 without ``reader_name`` and ``size`` (the sources end the
        epoch, so the length is unknown), as DALI's ``__len__`` (``nvidia/dali/plugin/base_iterator.py``) gives:
        ``tqdm(total=len(loader))`` works and shows no total."""
        if self._size < 0:
            return 0
        per_step = self.batch_size if self._reader_name else self._num_gpus * self.batch_size
        if self._last_batch_policy == LastBatchPolicy.DROP:
            return self._size // per_step
        return math.ceil(self._size / per_step)

    # ---- running --------------------------------------------------------------------------------------------
    def _schedule(self) -> None:
        self._ever_scheduled = True
        for p in self._pipes:
            if not _control.has_ended(p):
                p.schedule_run()

    def _end_iteration(self) -> None:
        if self._auto_reset:
            self.reset()
        raise StopIteration

    def _get_outputs(self) -> list[tuple[Batch, ...]]:
        if not self._ever_scheduled:
            self._schedule()
        if self._size > 0 and self._counter >= self._size:
            self._end_iteration()
        outputs = []
        try:
            for p in self._pipes:
                outputs.append(p.run())
        except StopIteration:
            if self._size < 0 and self._auto_reset:
                self.reset()
            raise
        if self._reader_name is not None or self._size > 0:
            for i, outs in enumerate(outputs):
                bad = [len(b) for b in outs if len(b) != self.batch_size]
                if bad:
                    raise PipelineError(f"pipeline {i} returned a batch of {bad[0]} samples, but with reader_name "
                                        f"or size the iterator needs full batches of {self.batch_size}")
        return outputs

    def _advance(self, dry_run: bool = False) -> bool:
        """Count the batch just taken; whether it overflows the epoch under DROP."""
        counter = self._counter
        if self._reader_name is not None:
            counter += self.batch_size
            should_end = (self._last_batch_policy == LastBatchPolicy.DROP
                          and bool(np.any(self._counter_per_gpu + counter > self._shard_sizes_per_gpu)))
        else:
            counter += self._num_gpus * self.batch_size
            should_end = self._last_batch_policy == LastBatchPolicy.DROP and counter > self._size
        if not dry_run:
            self._counter = counter
        return should_end

    def _keep_counts(self) -> list[int] | None:
        """How many samples of each pipeline's batch belong to this epoch (PARTIAL), or None to keep all."""
        if self._last_batch_policy != LastBatchPolicy.PARTIAL or self._size <= 0:
            return None
        bs = self.batch_size
        if self._reader_name is not None:
            left = bs - (self._counter - self._shard_sizes_initial[self._shards_id])
            if not np.any(left < bs):
                return None
            return [int(min(max(x, 0), bs)) for x in left]
        if self._counter <= self._size:
            return None
        wanted = self._num_gpus * bs - (self._counter - self._size)
        return [int(min(max(wanted - i * bs, 0), bs)) for i in range(self._num_gpus)]

    def __next__(self) -> Any:
        self._ever_consumed = True
        outputs = self._get_outputs()
        batches = [self._convert(i, outs) for i, outs in enumerate(outputs)]
        if self._advance():
            self._end_iteration()
        keep = self._keep_counts()
        if keep is not None:
            batches = [self._trim(b, k) for b, k in zip(batches, keep) if k > 0 or self._reader_name is not None]
        return self._finish(batches)

    def next(self) -> Any:
        return self.__next__()

    def __iter__(self):
        # A `for` loop over an iterator whose epoch ended (without auto_reset) starts the next epoch.
        if self._ever_consumed and ((self._size > 0 and self._counter >= self._size)
                                    or any(_control.has_ended(p) for p in self._pipes)):
            self.reset()
        return self

    def reset(self) -> None:
        """Start the next epoch. Only at the end of an epoch; a reset in the middle of one is ignored (as DALI)."""
        if self._last_batch_policy == LastBatchPolicy.DROP and self._size > 0:
            # The loop may have stopped after len() batches without meeting the dropped batch: take it out.
            ended = self._counter >= self._size
            if self._advance(dry_run=True) and not ended:
                self._get_outputs()
                self._advance()
        if not (self._counter >= self._size or self._size < 0):
            log.warning("reset() in the middle of an epoch is ignored; finish the epoch first")
            return
        fill_unpadded = self._last_batch_policy == LastBatchPolicy.FILL and not self._last_batch_padded
        if fill_unpadded and self._reader_name is not None:
            # Samples each shard read past its epoch's end start the next epoch.
            read = self._counter - self._counter_per_gpu.min()
            self._counter_per_gpu = self._counter_per_gpu + read - self._shard_sizes_per_gpu
            self._counter = int(self._counter_per_gpu.min())
        elif fill_unpadded and self._size > 0:
            self._counter %= self._size
        else:
            self._counter = 0
        if self._reader_name is not None:
            if not self._is_stick_to_shard:
                self._shards_id = (self._shards_id + 1) % self._shards_num
            if fill_unpadded:
                if not self._is_stick_to_shard:
                    self._shard_sizes_per_gpu = np.roll(self._shard_sizes_per_gpu, 1)
                still_to_read = self._shard_sizes_per_gpu - self._counter_per_gpu
                bs = self.batch_size
                self._size = math.ceil(still_to_read.max() / bs) * bs
                if self._size == 0:
                    # This epoch was read entirely ahead: skip to the next one.
                    self._counter_per_gpu = np.zeros(self._shards_num, dtype=np.int64)
                    self._counter = 0
                    self._shard_sizes_per_gpu = np.roll(self._shard_sizes_per_gpu, 1)
                    self._size = math.ceil(self._shard_sizes_per_gpu.max() / bs) * bs
        for p in self._pipes:
            if _control.has_ended(p):
                # Only a pipeline whose source ended restarts; readers are endless streams, and resetting them
                # would throw away the iterations already prefetched.
                p.reset()
        if self._ever_scheduled:
            self._schedule()

    # ---- checkpoints ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The iterator's position and its pipelines' checkpoints (pipelines need ``enable_checkpointing=True``),
        as torchdata's ``StatefulDataLoader.state_dict()``: ``load_state_dict`` on a new iterator over new
        pipelines of the same definition continues with exactly the next batch."""
        missing = [i for i, p in enumerate(self._pipes) if not p.enable_checkpointing]
        if missing:
            raise PipelineError(f"state_dict() needs pipelines built with enable_checkpointing=True (pipelines "
                                f"{missing} are not)")
        fields = {k: getattr(self, k) for k in self._STATE_FIELDS if hasattr(self, k)}
        return {"version": 1, "iterator": pickle.dumps(fields), "ever_consumed": self._ever_consumed,
                "pipelines": [p.checkpoint() for p in self._pipes]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from :meth:`state_dict`). Prefetched batches are discarded."""
        if not isinstance(state, dict) or state.get("version") != 1:
            raise ArgumentError("load_state_dict expects a dict made by an iterator's state_dict()")
        if len(state["pipelines"]) != len(self._pipes):
            raise ArgumentError(f"the state holds {len(state['pipelines'])} pipelines, this iterator has "
                                f"{len(self._pipes)}")
        for p, ckpt in zip(self._pipes, state["pipelines"]):
            _control.restore(p, ckpt)
        for key, value in pickle.loads(state["iterator"]).items():
            setattr(self, key, value)
        self._ever_consumed = state.get("ever_consumed", True)
        self._ever_scheduled = False

    # ---- hooks ----------------------------------------------------------------------------------------------
    def _convert(self, index: int, outputs: tuple[Batch, ...]) -> Any:
        raise NotImplementedError

    def _trim(self, batch: Any, keep: int) -> Any:
        raise NotImplementedError

    def _finish(self, batches: list[Any]) -> Any:
        return batches


class DALIGenericIterator(_BaseIterator):
    """Iterates over one pipeline (or a list of them, one per GPU), returning a list with one dict per pipeline
    that maps the names of ``output_map`` to torch tensors.

    Arguments are DALI's: ``size`` (samples per epoch, summed over pipelines) or ``reader_name`` (the reader
    tells the size, shards and padding: recommended), ``auto_reset`` (False/True/'no'/'yes'),
    ``last_batch_policy``, ``last_batch_padded`` (must match the reader's ``pad_last_batch``; taken from the
    reader with ``reader_name``), ``prepare_first_batch`` (start preparing data when the iterator is made).
    ``dynamic_shape`` is accepted for compatibility. ``ragged_outputs``: names of outputs returned as lists of
    per-sample tensors (``True``: every output), for samples of different shapes.

    Example::

        it = DALIGenericIterator(pipe, ["images", "labels"], reader_name="Reader", auto_reset=True)
        for batch in it:
            images = batch[0]["images"]     # torch tensor on the pipeline's device
    """

    def __init__(self, pipelines: Pipeline | Sequence[Pipeline], output_map: Sequence[str], size: int = -1,
                 reader_name: str | None = None, auto_reset: bool | str | None = False,
                 fill_last_batch: bool | None = None, dynamic_shape: bool | None = False,
                 last_batch_padded: bool = False, last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL,
                 prepare_first_batch: bool = True, *, ragged_outputs: Sequence[str] | bool = ()):
        output_map = list(output_map)
        if len(set(output_map)) != len(output_map):
            raise ArgumentError(f"output_map names must be distinct, got {output_map}")
        if ragged_outputs is True:
            ragged_outputs = output_map
        unknown = [n for n in (ragged_outputs or ()) if n not in output_map]
        if unknown:
            raise ArgumentError(f"ragged_outputs names {unknown} are not in output_map {output_map}")
        self.output_map = output_map
        self._ragged = set(ragged_outputs or ())
        super().__init__(pipelines, size, reader_name, auto_reset, fill_last_batch, last_batch_padded,
                         last_batch_policy, prepare_first_batch)

    def _convert(self, index: int, outputs: tuple[Batch, ...]) -> dict[str, Any]:
        if len(outputs) != len(self.output_map):
            raise ArgumentError(f"pipeline {index} has {len(outputs)} outputs but output_map names "
                                f"{len(self.output_map)}: {self.output_map}")
        return {name: batch_to_torch(b, name, name in self._ragged) for name, b in zip(self.output_map, outputs)}

    def _trim(self, batch: dict[str, Any], keep: int) -> dict[str, Any]:
        return {k: v[:keep] for k, v in batch.items()}

    def __next__(self) -> list[dict[str, torch.Tensor]]:
        return super().__next__()


class DALIClassificationIterator(DALIGenericIterator):
    """:class:`DALIGenericIterator` for pipelines with two outputs, named ``"data"`` and ``"label"``.

    Example::

        it = DALIClassificationIterator(pipe, reader_name="Reader")
        for batch in it:
            images, labels = batch[0]["data"], batch[0]["label"]
    """

    def __init__(self, pipelines: Pipeline | Sequence[Pipeline], size: int = -1, reader_name: str | None = None,
                 auto_reset: bool | str | None = False, fill_last_batch: bool | None = None,
                 dynamic_shape: bool | None = False, last_batch_padded: bool = False,
                 last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL, prepare_first_batch: bool = True,
                 *, ragged_outputs: Sequence[str] | bool = ()):
        super().__init__(pipelines, ["data", "label"], size=size, reader_name=reader_name, auto_reset=auto_reset,
                         fill_last_batch=fill_last_batch, dynamic_shape=dynamic_shape,
                         last_batch_padded=last_batch_padded, last_batch_policy=last_batch_policy,
                         prepare_first_batch=prepare_first_batch, ragged_outputs=ragged_outputs)
