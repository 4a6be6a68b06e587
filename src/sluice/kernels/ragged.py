"""Element-wise bookkeeping of ragged batches held back to back in one 1-D buffer: which sample each element belongs
to and where it lies in it, computed on the buffer's device in a few whole-batch launches (no loop over samples).

Example::

    >>> seg, local = segments(np.array([2, 3]), torch.device("cpu"))
    >>> seg.tolist(), local.tolist()
    ([0, 0, 1, 1, 1], [0, 1, 0, 1, 2])
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["segments", "per_element"]


def segments(sizes: np.ndarray, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """For ``sizes[i]`` elements of sample ``i`` back to back: each element's sample (int64) and its index within
    the sample (int64), on ``device``."""
    sizes = np.asarray(sizes, np.int64)
    total = int(sizes.sum())
    counts = torch.from_numpy(sizes).to(device, non_blocking=True)
    starts = torch.from_numpy(np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)).to(device,
                                                                                                 non_blocking=True)
    seg = torch.repeat_interleave(torch.arange(len(sizes), device=device), counts, output_size=total)
    local = torch.arange(total, device=device) - starts[seg]
    return seg, local


def per_element(values: np.ndarray | torch.Tensor, seg: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A per-sample value (an array of one value per sample) spread to every element: ``values[seg]``."""
    t = values if isinstance(values, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(values))
    if dtype is not None:
        t = t.to(dtype)
    return t.to(seg.device, non_blocking=True)[seg]
