"""The scan-marker check of :func:`~sluice.backends.image.formats.jpeg_scan_is_plausible` for a whole batch at
once, on the GPU.

nvJPEG (the CUDA decoder and the hardware engines) decodes some damaged streams without an error. The mixed
decoder sends JPEGs whose entropy-coded data holds markers that cannot be there to libjpeg-turbo (strict), which
names the damage. Per image on the CPU that check costs ~45 us of NumPy, and threads running it contend for the
GIL with the GPU paths' host work (measured on the H200: one thread 44 us/image, 16 threads 151 us/image of wall
time, and the mixed decoder fell from 12.9k to 4.7k images/s). Here the batch's streams are gathered into one
pinned buffer (one ``torch.cat``, without the GIL; not even that when readers.file read them back to back into
page-locked memory), copied to the GPU, and every (FF, follower) pair is classified there; only the positions of
marker pairs come back, and the host keeps those inside an entropy-coded segment.

Example::

    check = BatchScanCheck(torch.device("cuda", 0))
    ok = check([jpeg_a, damaged_jpeg_b])      # [True, False]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from sluice.runtime import Runtime

from .formats import as_bytes, jpeg_scan_is_plausible, jpeg_scan_start

__all__ = ["BatchScanCheck"]

#: Bytes classified per step (the comparisons' temporaries are a few times this).
CHUNK_BYTES = 64 << 20


def _as_tensor(view: memoryview) -> torch.Tensor:
    if not len(view):
        return torch.empty(0, dtype=torch.uint8)
    if view.readonly:  # torch warns about tensors over read-only memory: copy those (bytes given directly)
        return torch.from_numpy(np.frombuffer(view, np.uint8).copy())
    return torch.frombuffer(view, dtype=torch.uint8)


class BatchScanCheck:
    """Checks the entropy-coded data of baseline JPEGs, a batch at a time. ``where="gpu"``: on ``device`` (a CPU
    device works too, for tests), on a high-priority stream of its own so that its few kernels run ahead of the
    decoders' queued work; ``where="cpu"``: image after image with NumPy in the calling thread. The stream is
    ``runtime``'s (:meth:`sluice.runtime.Runtime.stream`: its owner's, the image decoder's pipeline's); without
    one (a check made alone: tests, benchmarks), of a runtime of the check's own."""

    def __init__(self, device: torch.device, where: str = "gpu", *, runtime: Runtime | None = None):
        if where not in ("gpu", "cpu"):
            raise ValueError(f"Invalid scan check place ({where!r}). Supported values are 'gpu' and 'cpu'.")
        self.device = device
        self.where = where
        self._cuda = device.type == "cuda" and where == "gpu"
        self._stream = None
        if self._cuda:
            if runtime is None:  # its own, released with the check
                index = device.index if device.index is not None else torch.cuda.current_device()
                runtime = self._own_runtime = Runtime(device_id=index, name="scan check")
            self._stream = runtime.stream(f"scan check {id(self)}", priority=-1, device=device)

    def __call__(self, bufs: Sequence, region: torch.Tensor | None = None) -> list[bool]:
        """Whether each stream's entropy-coded data holds only markers that may appear there (see
        ``jpeg_scan_is_plausible``). Blocks until the answer is back (call it from a helper thread).

        ``region``: the streams' bytes already back to back in one tensor (readers.file's batch buffer, see
        ``contiguous_bytes``), copied to the GPU as they are instead of gathered first."""
        if self.where == "cpu":
            return [jpeg_scan_is_plausible(b) for b in bufs]
        views = [as_bytes(b) for b in bufs]
        ok = [True] * len(views)
        offsets, starts, ends, restart = [], [], [], []
        total = 0
        for k, view in enumerate(views):
            found = jpeg_scan_start(view)
            if found is None or len(view) - found[0] < 2:
                ok[k] = False
            offsets.append(total)
            start = found[0] if found is not None else len(view)
            starts.append(total + start)
            ends.append(total + len(view))
            restart.append(bool(found and found[1]))
            total += len(view)
        if total < 2:
            return ok
        if region is not None and region.numel() != total:
            raise ValueError(f"scan check: the region holds {region.numel()} bytes, the streams {total}")
        marker_pos, marker_code = self._marker_pairs(views, total, region)
        if marker_pos.size == 0:
            return ok
        # The image each pair lies in; a pair counts when both of its bytes lie in that image's entropy segment.
        image = np.searchsorted(np.asarray(offsets), marker_pos, side="right") - 1
        inside = (marker_pos >= np.asarray(starts)[image]) & (marker_pos + 1 < np.asarray(ends)[image])
        is_restart = (marker_code >= 0xD0) & (marker_code <= 0xD7)
        bad = inside & ~(is_restart & np.asarray(restart)[image])
        for k in np.unique(image[bad]):
            ok[int(k)] = False
        return ok

    def _marker_pairs(self, views: list[memoryview], total: int,
                      region: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Positions (in the concatenated streams) of FF bytes followed by a byte that is not allowed inside
        entropy-coded data, or by a restart marker (allowed when the image defines a restart interval), and
        those followers."""
        if region is not None:
            host = region
        else:
            host = torch.empty(total, dtype=torch.uint8, pin_memory=self._cuda)
            torch.cat([_as_tensor(v) for v in views], out=host)  # one parallel copy, without the GIL
        if self._cuda:
            with torch.cuda.device(self.device), torch.cuda.stream(self._stream):
                data = host.to(self.device, non_blocking=True)
                pos, code = self._classify(data)
                pos, code = pos.cpu(), code.cpu()  # waits for this stream only
        else:
            pos, code = self._classify(host)
        return pos.numpy(), code.numpy()

    @staticmethod
    def _classify(data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # In chunks, so that the comparisons' temporaries stay small for batches of large files.
        found = [BatchScanCheck._classify_chunk(data[start: start + CHUNK_BYTES + 1], start)
                 for start in range(0, max(1, data.numel() - 1), CHUNK_BYTES)]
        return torch.cat([f[0] for f in found]), torch.cat([f[1] for f in found])

    @staticmethod
    def _classify_chunk(data: torch.Tensor, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The pairs whose first byte lies in ``data[:-1]`` (the last byte only follows)."""
        follower = data[1:]
        # 0x01-0xBF: reserved or SOF-family codes (the DHT marker C4 between scans is allowed); D8: a second SOI;
        # D0-D7: restart markers, allowed only with a restart interval (decided per image on the host).
        suspicious = ((follower >= 0x01) & (follower <= 0xBF)) | ((follower >= 0xD0) & (follower <= 0xD8))
        pos = torch.nonzero((data[:-1] == 0xFF) & suspicious).flatten()
        return pos + offset, follower[pos]
