"""A JAX iterator over sluice pipelines: outputs become ``jax.Array`` s through DLPack, without copies where the
devices allow it. Needs ``jax`` (``pip install jax``; ``jax[cuda12]`` for GPU outputs).

The epoch arithmetic (``reader_name``, ``size``, ``last_batch_policy``, ``last_batch_padded``, ``auto_reset``,
shards per epoch, ``state_dict``) is that of :class:`sluice.torch.DALIGenericIterator`. Each step returns a
dict mapping the names of ``output_map`` to arrays. With one pipeline per device (a list of pipelines) the
arrays of the pipelines are joined along the batch dimension into one array sharded over those devices (or
concatenated when the devices are not distinct).

Example::

    from sluice.jax import DALIGenericIterator

    it = DALIGenericIterator(pipe, ["images", "labels"], reader_name="Reader", auto_reset=True)
    for batch in it:
        step(batch["images"], batch["labels"])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    import jax
    import jax.numpy as jnp
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("sluice.jax needs JAX: pip install jax (or jax[cuda12] for GPU outputs)") from e

import torch

from sluice.errors import ArgumentError, PipelineError
from sluice.pipeline.batch import Batch
from sluice.pipeline.pipeline import Pipeline
from sluice.torch.iterator import LastBatchPolicy, _BaseIterator, batch_to_torch

__all__ = ["DALIGenericIterator", "Iterator", "LastBatchPolicy", "to_jax"]


def to_jax(tensor: torch.Tensor) -> jax.Array:
    """A torch tensor as a jax.Array through DLPack (no copy when JAX can use the tensor's memory)."""
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    if tensor.dtype == torch.bool:
        return jnp.asarray(tensor.cpu().numpy()) if not tensor.is_cuda else jax.dlpack.from_dlpack(tensor)
    try:
        return jax.dlpack.from_dlpack(tensor)
    except Exception as e:  # noqa: BLE001 - name what failed and what to do
        if tensor.is_cuda:
            raise PipelineError(f"JAX cannot take a CUDA tensor on {tensor.device} ({e}); install jax with CUDA "
                                "support (pip install jax[cuda12]) or move the output to the CPU with .cpu() in "
                                "the pipeline") from e
        return jnp.asarray(tensor.numpy())


class DALIGenericIterator(_BaseIterator):
    """Iterates over one pipeline (or one per device), returning a dict of ``jax.Array`` per step.

    Arguments as :class:`sluice.torch.DALIGenericIterator`. ``ragged_outputs``: names of outputs returned as
    lists of per-sample arrays.

    Example::

        it = DALIGenericIterator(pipe, ["x", "y"], reader_name="Reader")
        batch = next(it)      # {"x": jax.Array, "y": jax.Array}
    """

    def __init__(self, pipelines: Pipeline | Sequence[Pipeline], output_map: Sequence[str], size: int = -1,
                 reader_name: str | None = None, auto_reset: bool | str | None = False,
                 last_batch_padded: bool = False, last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL,
                 prepare_first_batch: bool = True, *, ragged_outputs: Sequence[str] | bool = ()):
        output_map = list(output_map)
        if len(set(output_map)) != len(output_map):
            raise ArgumentError(f"output_map names must be distinct, got {output_map}")
        self.output_map = output_map
        self._ragged = set(output_map if ragged_outputs is True else (ragged_outputs or ()))
        super().__init__(pipelines, size, reader_name, auto_reset, None, last_batch_padded, last_batch_policy,
                         prepare_first_batch)

    def _convert(self, index: int, outputs: tuple[Batch, ...]) -> dict[str, Any]:
        if len(outputs) != len(self.output_map):
            raise ArgumentError(f"pipeline {index} has {len(outputs)} outputs but output_map names "
                                f"{len(self.output_map)}: {self.output_map}")
        out = {}
        for name, batch in zip(self.output_map, outputs):
            value = batch_to_torch(batch, name, name in self._ragged)
            out[name] = [to_jax(t) for t in value] if isinstance(value, list) else to_jax(value)
        return out

    def _trim(self, batch: dict[str, Any], keep: int) -> dict[str, Any]:
        return {k: v[:keep] for k, v in batch.items()}

    def _finish(self, batches: list[dict[str, Any]]) -> dict[str, Any]:
        if len(batches) == 1:
            return batches[0]
        return {name: _join([b[name] for b in batches]) for name in self.output_map}

    def __next__(self) -> dict[str, Any]:
        return super().__next__()


def _join(parts: list[Any]) -> Any:
    if isinstance(parts[0], list):
        return [x for p in parts for x in p]
    devices = [next(iter(p.devices())) for p in parts]
    same_shape = all(p.shape == parts[0].shape for p in parts)
    if same_shape and len(set(devices)) == len(devices):
        mesh = jax.sharding.Mesh(devices, ("batch",))
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))
        shape = (parts[0].shape[0] * len(parts),) + tuple(parts[0].shape[1:])
        return jax.make_array_from_single_device_arrays(shape, sharding, list(parts))
    return jnp.concatenate([jax.device_put(p, devices[0]) for p in parts])


Iterator = DALIGenericIterator
