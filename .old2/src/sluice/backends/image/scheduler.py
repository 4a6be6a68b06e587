"""The split scheduler: shares one batch of JPEGs between the hardware JPEG engines, the CUDA decoder and the CPU
so that all of them finish at about the same time.

Each path's measured throughput (pixels per second, smoothed over batches) sets its share of the next batch;
a path that was never measured keeps its initial guess, and every path keeps a small share so its estimate stays
fresh. Pure Python, no GPU: it only decides who decodes what.

Example::

    s = SplitScheduler({"hw": 0.6, "cuda": 0.25, "cpu": 0.15})
    paths = s.assign([h * w for h, w in sizes])      # ["hw", "cuda", "hw", "cpu", ...]
    s.record("hw", pixels=3e7, seconds=0.004)
"""

from __future__ import annotations

import threading

__all__ = ["SplitScheduler", "ShareTuner"]


class SplitScheduler:
    """Shares work between paths in proportion to their measured speed.

    ``initial`` maps path name -> initial share (normalised); ``adaptive=False`` keeps those shares fixed;
    ``min_share`` is the smallest share an adaptive path gets; ``smoothing`` weighs a new measurement.
    """

    def __init__(self, initial: dict[str, float], *, adaptive: bool = True, min_share: float = 0.03,
                 smoothing: float = 0.3):
        if not initial or any(v < 0 for v in initial.values()) or sum(initial.values()) <= 0:
            raise ValueError(f"Invalid initial shares ({initial!r}). Give each path a share >= 0, summing above 0.")
        self.adaptive = adaptive
        self.min_share = min_share
        self.smoothing = smoothing
        total = sum(initial.values())
        self._shares = {k: v / total for k, v in initial.items()}
        self._rates: dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def shares(self) -> dict[str, float]:
        """The share of the next batch each path gets."""
        with self._lock:
            return dict(self._shares)

    def record(self, path: str, *, pixels: float, seconds: float) -> None:
        """Report that ``path`` decoded ``pixels`` in ``seconds`` of wall time."""
        if not self.adaptive or pixels <= 0 or seconds <= 0 or path not in self._shares:
            return
        rate = pixels / seconds
        with self._lock:
            old = self._rates.get(path)
            self._rates[path] = rate if old is None else (1 - self.smoothing) * old + self.smoothing * rate
            self._rebalance()

    def _rebalance(self) -> None:
        # Paths with a measured rate share in proportion to it; unmeasured ones keep their initial share.
        measured = {k: r for k, r in self._rates.items() if self._shares.get(k, 0) > 0}
        if not measured:
            return
        free = 1.0 - sum(v for k, v in self._shares.items() if k not in measured)
        total = sum(measured.values())
        for k, r in measured.items():
            self._shares[k] = max(self.min_share, free * r / total)
        norm = sum(self._shares.values())
        self._shares = {k: v / norm for k, v in self._shares.items()}

    def assign(self, weights: list[float], available: set[str] | None = None) -> list[str]:
        """Give each item (weighted by its pixel count) a path so that each path's total follows its share.

        Items are dealt greedily, heaviest first, to the path furthest below its target. ``available``
        restricts the paths (others' shares are spread over the rest).
        """
        shares = {k: v for k, v in self.shares.items() if available is None or k in available}
        shares = {k: v for k, v in shares.items() if v > 0} or shares
        if not shares:
            raise ValueError("no decoding path is available")
        norm = sum(shares.values()) or 1.0
        total = float(sum(weights)) or 1.0
        names = list(shares)
        deficit = [shares[k] / norm * total for k in names]  # what each path still should get
        out = [""] * len(weights)
        for i in sorted(range(len(weights)), key=weights.__getitem__, reverse=True):
            best = 0
            for j in range(1, len(names)):
                if deficit[j] > deficit[best]:
                    best = j
            out[i] = names[best]
            deficit[best] -= weights[i]
        return out


class ShareTuner:
    """Tunes one fraction in [lo, hi] by hill climbing on a measured rate (higher is better).

    Used for the hardware-engine share of the GPU's JPEGs: the hardware engines and CUDA nvJPEG finish on one
    stream, so only their combined speed can be timed; the tuner moves the share by ``step`` while the combined
    rate improves and turns back when it does not (halving the step down to ``min_step`` on each turn, so a far
    start converges in a few windows). The best rate decays slowly so that it keeps exploring.

    Example::

        t = ShareTuner(0.9)
        t.record(12000.0)    # rate measured with share t.value
    """

    def __init__(self, value: float, *, step: float = 0.05, lo: float = 0.0, hi: float = 1.0, window: int = 3,
                 decay: float = 0.99, min_step: float | None = None):
        self.value = min(hi, max(lo, float(value)))
        self.step, self.lo, self.hi, self.window, self.decay = step, lo, hi, window, decay
        self.min_step = step if min_step is None else min(min_step, step)  # the step halves on each turn
        self._direction = -1.0 if self.value >= hi else 1.0
        self._kept = self.value      # best share so far
        self._kept_rate: float | None = None
        self._rates: list[float] = []

    def record(self, rate: float) -> bool:
        """Report the rate measured with the current ``value``; True when this completed a window (and the value
        may have moved)."""
        self._rates.append(rate)
        if len(self._rates) < self.window:
            return False
        mean = sum(self._rates) / len(self._rates)
        self._rates.clear()
        if self._kept_rate is None or mean > self._kept_rate:
            self._kept, self._kept_rate = self.value, mean
        else:
            self._direction = -self._direction  # worse: go back and try the other way next, in smaller steps
            self._kept_rate *= self.decay
            self.step = max(self.min_step, self.step / 2)
        nxt = self._kept + self._direction * self.step
        if not self.lo <= nxt <= self.hi:
            self._direction = -self._direction
            nxt = self._kept + self._direction * self.step
        self.value = min(self.hi, max(self.lo, nxt))
        return True
