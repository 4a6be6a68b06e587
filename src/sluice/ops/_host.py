"""Host buffers for a whole batch, shared by the readers, decoders and CPU operators that fill one buffer."""

from __future__ import annotations

import torch

from sluice.pipeline.batch import host_empty

#: Larger batches (of videos, say) are read into ordinary memory: page-locked memory is scarce, and torch's
#: host allocator keeps what it has handed out.
MAX_PINNED_BATCH_BYTES = 256 << 20


def batch_buffer(nbytes: int, pin: bool, device_id: int | None) -> torch.Tensor:
    """A batch's buffer: page-locked (:func:`sluice.pipeline.batch.host_empty`, on the pipeline's GPU) with
    ``pin`` up to MAX_PINNED_BATCH_BYTES, else ordinary memory (a large one reused once no batch holds it)."""
    return host_empty((nbytes,), torch.uint8, pin=pin and nbytes <= MAX_PINNED_BATCH_BYTES, device=device_id,
                      reuse=True)
