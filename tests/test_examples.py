"""Every program under examples/ runs on the CPU with small data (as examples/README.md shows), and says what it
checked: the Lightning fit reports its loss, the Whisper features agree with Whisper's formula, and every decoded
video frame is the one asked for. Each example writes its data to sluice's cache (here pytest's folder)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

RUNS = {
    "lightning_datamodule.py": (["--cpu", "--per-class", "8", "--epochs", "1"], ("lightning", "PIL"),
                                r"trained 1 epochs on CPU: loss \d"),
    "whisper_logmel.py": (["--cpu", "--clips", "4", "--batch", "2", "--iterations", "2", "--threads", "2", "--check"],
                          ("soundfile", "soxr", "librosa"), r"max \|diff\| (\d\.\d+e-0[5-9]|\d\.\d+e-1\d)"),
    "proxy_video_clips.py": (["--cpu", "--count", "2", "--epochs", "1", "--workers", "1"], ("av",),
                             r"epoch 0: 16 clips of 16 frames on cpu .*, 0 wrong frames"),
}


def test_every_example_is_run_and_listed_in_the_index():
    scripts = {p.name for p in EXAMPLES.glob("*.py")}
    assert scripts == set(RUNS)
    index = (EXAMPLES / "README.md").read_text()
    for name, (args, _, _) in RUNS.items():
        assert f"({name})" in index and " ".join(args[:2]) in index, name


@pytest.mark.parametrize("name", sorted(RUNS))
def test_example_runs_on_the_cpu(name):
    args, needs, expected = RUNS[name]
    if not os.environ.get("CI"):  # CI installs the test extra, which brings them all: there none may be missing
        for module in needs:
            pytest.importorskip(module)
    result = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(expected, result.stdout), result.stdout[-3000:]
