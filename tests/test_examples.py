"""Every program under examples/ runs on the CPU with small data (as examples/README.md shows), and says what it
checked: the Lightning fit reports its loss, the Whisper features agree with Whisper's formula, and every decoded
video frame is the one asked for. Each example writes its data to sluice's cache (here pytest's folder)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: Seconds an example may run (each takes about a minute on a 2-core CI machine); then its threads' Python stacks
#: are printed and the test fails (a run of whisper_logmel.py once hung on CI, with no trace of where).
TIMEOUT = 300

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
    result = _run_example([str(EXAMPLES / name), *args])
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(expected, result.stdout), result.stdout[-3000:]


def _run_example(argv: list[str]) -> subprocess.CompletedProcess:
    """Run an example with faulthandler on: if it outlasts TIMEOUT, SIGABRT makes it print every thread's Python
    stack to its stderr before it dies, and the test fails with them."""
    with subprocess.Popen([sys.executable, "-X", "faulthandler", *argv], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            try:
                out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # not even SIGABRT ended it
                proc.kill()
                out, err = "", "(no stacks: the example did not end on SIGABRT and was killed)"
            pytest.fail(f"{os.path.basename(argv[0])} ran more than {TIMEOUT} s; its threads' stacks (stderr, "
                        f"last 6000 characters):\n{err[-6000:]}\nstdout:\n{out[-2000:]}", pytrace=False)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
