"""Where a mixed operator's ``prepare`` step runs: in the CPU stage (ahead of its batch) or in the device stage.

The executor runs a mixed operator's host work on CPU inputs (``Operator.prepare``) in the CPU stage, where it
overlaps the device stage's previous batch. That is right while the device stage is the slower one; once CUDA
graphs made the device stage's host time small, the log-mel pipeline's CPU stage (reading 56 MB of WAVs, then
the audio decoder's header parsing and planning) became the slower one, and the device stage waited for it. An
operator whose ``prepare`` is plain host work that gives the same result wherever it runs says so with
``Operator.prepare_movable``; for those, this balance measures both stages and the prepare step, and moves the step
to the device stage when that makes the slower stage faster, and back when the device stage becomes the slower.

Times are moving averages over iterations (the first WARMUP of them, which capture graphs and fill caches, are
not counted). After each move the averages start again, and a move needs the slower stage to gain more than
MARGIN of its time, so that noise does not make the step go back and forth.
"""

from __future__ import annotations

__all__ = ["PrepareBalance"]


class PrepareBalance:
    """Decides, iteration by iteration, whether the movable prepare steps run in the device stage (``moved``)."""

    WARMUP = 4        # iterations not counted after a start or a move
    SETTLE = 8        # iterations counted before a decision
    ALPHA = 0.25      # weight of the newest time in the moving averages
    MARGIN = 0.10     # the slower stage must gain more than this share of its time

    def __init__(self, active: bool):
        self.active = active
        self.moved = False
        self._prepare: float | None = None  # kept across moves: it is measured only while in the CPU stage
        self._restart()

    def _restart(self) -> None:
        self._stage: list[float | None] = [None, None]
        self._seen = [0, 0]

    def _average(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.ALPHA * (new - old)

    def record_stage(self, k: int, seconds: float) -> None:
        """Stage ``k``'s host time for one iteration (0: the CPU stage, 1: the device stage)."""
        if not self.active or k > 1:
            return
        self._seen[k] += 1
        if self._seen[k] > self.WARMUP:
            self._stage[k] = self._average(self._stage[k], seconds)

    def record_prepare(self, seconds: float) -> None:
        """The movable prepare steps' time in one iteration of the CPU stage."""
        if self.active and not self.moved:
            self._prepare = self._average(self._prepare, seconds)

    def decide(self) -> bool:
        """Update and return ``moved`` from the averages so far."""
        if not self.active or self._prepare is None or None in self._stage \
                or min(self._seen) < self.WARMUP + self.SETTLE:
            return self.moved
        cpu, device, prepare = self._stage[0], self._stage[1], self._prepare
        if not self.moved:
            # device stage: device + prepare; CPU stage: cpu - prepare. Worth it if the slower of the two gains.
            after = max(cpu - prepare, device + prepare)
            if max(cpu, device) > after * (1 + self.MARGIN):
                self.moved = True
                self._restart()
        else:
            after = max(cpu + prepare, device - prepare)
            if max(cpu, device) > after * (1 + self.MARGIN):
                self.moved = False
                self._restart()
        return self.moved
