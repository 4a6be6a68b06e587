"""How many of a batch's JPEGs the CPU decodes while the GPU's JPEG engines decode the rest.

The engines of a GPU decode a fixed number of images per second; the host's cores, decoding with libjpeg-turbo in
the compiled core (GIL released), add their own. :class:`HybridShare` gives the CPU the tail of each batch in
proportion to the two rates measured on the previous batches, so that both finish together: the engines' rate
from the time of the batched GPU call for its part, the CPU's from the wall time its threads took for theirs. It
starts with a small CPU share (to measure), moves with an exponential average, and never gives the CPU more than
``max_share`` of a batch. ``fixed`` (the decoder's ``cpu_load``) holds the share
still; 0 keeps every image on the GPU. Example::

    share = HybridShare()
    k = share.cpu_count(256)            # samples for the CPU, the last k of the batch
    share.record(256 - k, gpu_seconds, k, cpu_seconds)
"""

from __future__ import annotations

import logging
import threading

__all__ = ["HybridShare"]

log = logging.getLogger(__name__)


class HybridShare:
    """The CPU's part of the next batch, from the measured rates (images per second) of both paths."""

    # At most 0.3: a larger CPU share measured slower (0.35: -4 % on `decode`, -18 % on `train`), the cores it takes
    # being those that read and parse the next batch, which its own rate does not see.
    def __init__(self, first_share: float = 0.08, max_share: float = 0.3, smoothing: float = 0.3,
                 fixed: float | None = None):
        self.first_share, self.max_share, self.smoothing, self.fixed = first_share, max_share, smoothing, fixed
        self.gpu_rate: float | None = None
        self.cpu_rate: float | None = None
        self._records = 0
        self._lock = threading.Lock()

    @property
    def share(self) -> float:
        """The fraction of a batch the CPU decodes next."""
        if self.fixed is not None:
            return self.fixed
        with self._lock:
            return self._share()

    def _share(self) -> float:
        if self.cpu_rate is None or self.gpu_rate is None:
            return self.first_share
        return min(self.max_share, self.cpu_rate / (self.cpu_rate + self.gpu_rate))

    def cpu_count(self, n: int) -> int:
        """The number of samples of a batch of ``n`` the CPU decodes (at least one while measuring)."""
        share = self.share
        if n < 8 or share <= 0:
            return 0
        return max(1, min(n - 1, int(round(n * share))))

    def record(self, gpu_images: int, gpu_seconds: float, cpu_images: int, cpu_seconds: float) -> None:
        """Fold one batch's timings into the rates."""
        with self._lock:
            if gpu_images and gpu_seconds > 0:
                self.gpu_rate = self._mix(self.gpu_rate, gpu_images / gpu_seconds)
            if cpu_images and cpu_seconds > 0:
                self.cpu_rate = self._mix(self.cpu_rate, cpu_images / cpu_seconds)
            self._records += 1
            if self._records % 16 == 0 and log.isEnabledFor(logging.DEBUG):
                log.debug("CPU share %.3f (GPU %.0f img/s, CPU %.0f img/s)", self._share(), self.gpu_rate or 0,
                          self.cpu_rate or 0)

    def _mix(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.smoothing * (new - old)
