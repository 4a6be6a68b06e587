"""Start-up: ``import sluice`` and ``sluice --version`` take under a second more than importing torch, and no
codec, Triton or the DALI compatibility layer is imported until used. Measured with ``python -X importtime`` (the
import of sluice minus the import of torch inside it) and with the wall time of the command; the best of a few runs,
so that a busy machine does not fail the test. As after ``pip install``, the modules' bytecode is compiled once
first (here into the test's temporary folder, whatever PYTHONDONTWRITEBYTECODE says)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

BUDGET_S = 1.0

#: Imported on first use only
HEAVY = ("cv2", "PIL", "simplejpeg", "av", "soundfile", "soxr", "triton", "torchvision", "PyNvVideoCodec", "nvidia",
         "jax", "scipy", "librosa", "sluice.compat", "sluice.kernels._triton_channels",
         "sluice.kernels._triton_resample")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(tmp_path_factory.mktemp("pycache")))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "sluice.cli", "--version"], env=env, capture_output=True, timeout=300,
                   check=True)
    return env


def importtime(code: str, env: dict | None = None) -> dict[str, float]:
    """Cumulative import time in seconds of every module ``code`` imports (the first time each is imported)."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                            timeout=300, check=True, env=env)
    times: dict[str, float] = {}
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cumulative, name = line[len("import time:"):].split("|")
            times.setdefault(name.strip(), int(cumulative) / 1e6)
    return times


def test_import_sluice_is_within_a_second_of_torch_and_loads_no_codec(env):
    runs = [importtime("import sluice", env) for _ in range(3)]
    own = min(t["sluice"] - t["torch"] for t in runs)
    assert own < BUDGET_S, f"import sluice took {own:.2f} s beyond torch's import"
    loaded = [m for m in runs[0] if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert not loaded, f"imported by 'import sluice': {loaded}"


def _wall(args: list[str], env: dict) -> float:
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        subprocess.run(args, capture_output=True, timeout=300, check=True, env=env)
        best = min(best, time.perf_counter() - start)
    return best


def test_sluice_version_is_within_a_second_of_importing_torch(env):
    torch_s = _wall([sys.executable, "-c", "import torch"], env)
    version_s = _wall([sys.executable, "-m", "sluice.cli", "--version"], env)
    assert version_s - torch_s < BUDGET_S, f"sluice --version: {version_s:.2f} s, import torch: {torch_s:.2f} s"
