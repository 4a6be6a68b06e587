"""Cutting windows out of a batch of decoded CHW images into HWC crops that lie back to back in one buffer.

The batched GPU JPEG decoders return planar (CHW) images, one allocation each; the image decoders hand out HWC
images. :func:`gather_hwc_crops` does the window cut and the layout change for the whole batch in one Triton launch
reading each image through a table of its address, so that no per-image copy or view is made in Python and the
crops come out contiguous in one allocation, as the batched resize kernel reads them.

Example::

    buf, sizes = gather_hwc_crops([img_chw_a, img_chw_b], np.array([[0, 0, 32, 32], [4, 4, 16, 8]]))
    crops = [p.view(h, w, 3) for p, (h, w) in zip(buf.split(sizes), [(32, 32), (16, 8)])]
"""

from __future__ import annotations

import numpy as np
import torch

from sluice import env

__all__ = ["gather_hwc_crops"]

_BLOCK = 4096


def _triton_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def gather(ptrs, geo, out, C: tl.constexpr, BLOCK: tl.constexpr):
        i = tl.program_id(0)
        b = tl.program_id(1)
        # geo row: window y, x, h, w, the image's H and W, the crop's output offset
        y0 = tl.load(geo + i * 7)
        x0 = tl.load(geo + i * 7 + 1)
        h = tl.load(geo + i * 7 + 2)
        w = tl.load(geo + i * 7 + 3)
        big_h = tl.load(geo + i * 7 + 4)
        big_w = tl.load(geo + i * 7 + 5)
        start = tl.load(geo + i * 7 + 6)
        count = h * w * C
        if b * BLOCK < count:
            base = tl.load(ptrs + i).to(tl.pointer_type(tl.uint8))
            idx = b * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
            mask = idx < count
            c = idx % C
            p = idx // C
            src = c * (big_h * big_w) + (y0 + p // w) * big_w + (x0 + p % w)
            v = tl.load(base + src, mask=mask)
            tl.store(out + start + idx, v, mask=mask)

    return gather


_KERNEL: list = []


def gather_hwc_crops(images: list[torch.Tensor], windows: np.ndarray, out: torch.Tensor | None = None,
                     offsets: np.ndarray | None = None) -> tuple[torch.Tensor, list[int]]:
    """Crops ``windows[i] = (y, x, h, w)`` of the contiguous CHW ``images`` (one device, one dtype uint8, one
    channel count) as HWC images back to back in one uint8 buffer on the current stream: ``(buffer, sizes)``, crop
    ``i`` being ``buffer.split(sizes)[i].view(h, w, C)``. The windows must lie inside their images. ``out``: the
    buffer to fill (1-D uint8, at least the crops' size), else a new one. ``offsets``: where each crop starts in
    ``out`` (given with ``out``; e.g. the places of some samples of a batch whose others come from elsewhere),
    instead of back to back from 0. A ``(1, 1, k)`` "image" with the window ``(0, 0, 1, k)`` is a plain copy of
    ``k`` bytes: contiguous HWC pieces are placed that way (C = 1)."""
    n = len(images)
    windows = np.asarray(windows, dtype=np.int64).reshape(n, 4)
    c = int(images[0].shape[0]) if n else 1
    sizes = (windows[:, 2] * windows[:, 3] * c).astype(np.int64)
    device = images[0].device if n else torch.device("cpu")
    if offsets is not None and out is None:
        raise ValueError("gather_hwc_crops: offsets need the buffer they refer to (out)")
    starts = (np.concatenate([[0], np.cumsum(sizes)[:-1]]) if offsets is None
              else np.asarray(offsets, dtype=np.int64).reshape(n))
    if out is None:
        out = torch.empty(int(sizes.sum()), dtype=torch.uint8, device=device)
    if n == 0:
        return out, []
    if device.type == "cuda" and not env.eager():
        if not _KERNEL:
            _KERNEL.append(_triton_kernel())
        geo = np.empty((n, 7), np.int64)
        geo[:, :4] = windows
        geo[:, 4] = [t.shape[1] for t in images]
        geo[:, 5] = [t.shape[2] for t in images]
        geo[:, 6] = starts
        ptrs = torch.tensor([t.data_ptr() for t in images], dtype=torch.int64).to(device, non_blocking=True)
        geo_t = torch.from_numpy(geo).to(device, non_blocking=True)
        _KERNEL[0][(n, int(-(-sizes.max() // _BLOCK)))](ptrs, geo_t, out, C=c, BLOCK=_BLOCK)
        return out, sizes.tolist()
    for t, (y, x, h, w), size, start in zip(images, windows.tolist(), sizes.tolist(), starts.tolist()):
        out[start: start + size].view(h, w, c).copy_(t[:, y:y + h, x:x + w].permute(1, 2, 0))
    return out, sizes.tolist()
