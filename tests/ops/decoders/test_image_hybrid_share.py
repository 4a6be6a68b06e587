"""HybridShare, the CPU's part of a batch of plain JPEGs beside the GPU's: it follows the two paths' measured
rates so that both finish together, stays below its cap, and holds still when fixed."""

from __future__ import annotations

import pytest

from sluice.backends.image.hybrid import HybridShare


def test_the_share_moves_to_where_both_paths_finish_together():
    share = HybridShare(first_share=0.08, smoothing=1.0)
    assert share.cpu_count(256) == round(256 * 0.08)
    # the GPU decodes 236 images in 12 ms, the CPU its 20 in 4 ms: 19.7k and 5k images/s
    share.record(236, 0.012, 20, 0.004)
    assert share.share == pytest.approx(5000 / (5000 + 236 / 0.012))
    assert share.cpu_count(256) == round(256 * share.share)


def test_the_share_is_capped_and_small_batches_stay_on_the_gpu():
    share = HybridShare(max_share=0.3, smoothing=1.0)
    share.record(100, 1.0, 100, 0.01)  # a CPU a hundred times faster still gets 30 %
    assert share.share == 0.3
    assert share.cpu_count(7) == 0


def test_a_fixed_share_holds_still():
    share = HybridShare(fixed=0.25)
    share.record(10, 1.0, 90, 0.001)
    assert share.share == 0.25 and share.cpu_count(100) == 25
