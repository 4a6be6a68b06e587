"""A newcomer's install, in a new venv: ``pip install .`` with torch alone (no extras) imports, runs an operator
that needs no codec, fails a JPEG pipeline naming the extra, answers ``sluice demo --epochs 0`` with one line and
exit status 2, and imports within the start-up budget. The build prints no licence-table deprecation warning.

This makes a venv and installs torch and sluice into it (a couple of minutes), so it runs only with
``SLUICE_TEST_INSTALL=1``, which CI's ``.ci/run`` sets. torch is the build running these tests
(``torch==<its version>``: the CPU build where the tests run on the CPU), from pip's configured indexes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(os.environ.get("SLUICE_TEST_INSTALL") != "1",
                                reason="makes a venv and pip-installs sluice: set SLUICE_TEST_INSTALL=1 (CI does)")

CODECS = ("cv2", "PIL", "simplejpeg", "av", "soundfile", "soxr", "torchvision", "tqdm")


def _sources(dest: Path) -> Path:
    """A copy of the checkout's files (tracked, and untracked but not ignored): pip builds in the source folder,
    which must not be the checkout."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    base = tmp_path_factory.mktemp("fresh_install")
    env_dir = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, timeout=300)
    python = env_dir / "bin" / "python"
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "install"]
    subprocess.run([*pip, "-q", f"torch=={torch.__version__}"], check=True, timeout=900)
    build = subprocess.run([*pip, "-v", str(_sources(base / "src"))], capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return python, build.stdout + build.stderr


def _run(venv, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    python, _ = venv
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run([str(python), *args], capture_output=True, text=True, timeout=600, env=env, cwd=cwd)


def test_the_build_prints_no_license_warning(venv):
    _, log = venv
    assert "project.license" not in log, [line for line in log.splitlines() if "license" in line.lower()]


def test_pip_install_without_extras_imports_and_runs_a_codec_free_pipeline(venv, tmp_path):
    code = textwrap.dedent(f"""
        import importlib.util, shutil
        import numpy as np
        import sluice, sluice.native
        from sluice import fn, types

        missing = [m for m in {CODECS!r} if importlib.util.find_spec(m) is not None]
        assert not missing, f"installed without being asked for: {{missing}}"

        @sluice.pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=1)
        def pipe():
            x = fn.external_source(source=lambda: [np.full((40, 60, 3), 7, np.uint8)] * 2, layout="HWC")
            return fn.crop_mirror_normalize(fn.resize(x, resize_shorter=20), dtype=types.FLOAT, mean=[7.0] * 3)

        (out,) = pipe().run()
        assert out.as_tensor().shape == (2, 3, 20, 30)  # CHW, crop_mirror_normalize's default layout
        built = sluice.native.core() is not None
        assert built or shutil.which("c++") is None, "pip did not build the compiled core"
        print(sluice.__file__, "compiled core:", built)
    """)
    result = _run(venv, "-c", code, cwd=tmp_path)  # not the checkout: the installed package is imported
    assert result.returncode == 0, result.stderr[-3000:]
    assert "site-packages" in result.stdout, result.stdout


def test_a_jpeg_pipeline_without_simplejpeg_names_the_extra(venv, tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"\xff\xd8\xff")
    code = textwrap.dedent("""
        import sys
        import sluice
        from sluice import fn

        @sluice.pipeline_def(batch_size=1, num_threads=1, device_id=None)
        def pipe():
            jpegs, _ = fn.readers.file(file_root=sys.argv[1])
            return fn.decoders.image(jpegs)

        try:
            pipe().build()
        except sluice.MissingDependencyError as e:
            print(e)
    """)
    result = _run(venv, "-c", code, str(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == ("fn.decoders.image (device 'cpu') needs 'simplejpeg', which is not installed: "
                                     "pip install 'sluice[image]'")


def test_sluice_demo_epochs_0_exits_2_with_one_line(venv, tmp_path):
    python, _ = venv
    result = subprocess.run([str(python.parent / "sluice"), "demo", "--epochs", "0"], capture_output=True,
                            text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("sluice demo: error: argument --epochs: expected a whole number >= 1, got 0")


def test_import_time_is_within_a_second_of_torch(venv, tmp_path):
    best = float("inf")
    for _ in range(3):
        result = _run(venv, "-X", "importtime", "-c", "import sluice", cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        times = {}
        for line in result.stderr.splitlines():
            if line.startswith("import time:") and "cumulative" not in line:
                _, cumulative, name = line[len("import time:"):].split("|")
                times.setdefault(name.strip(), int(cumulative) / 1e6)
        best = min(best, times["sluice"] - times["torch"])
    print(f"import sluice beyond torch, best of 3: {best:.3f} s")
    assert best < 1.0
