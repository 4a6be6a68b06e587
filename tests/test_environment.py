"""sluice's environment variables: few, all read by sluice.env, all documented in docs/environment.md; the
accessors parse each value once and name the variable when it is wrong."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sluice import env

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "sluice"
DOC = ROOT / "docs" / "environment.md"
# a whole SLUICE_ name (not the tail of another identifier, nor a prefix such as SLUICE_S3_*)
NAME = re.compile(r"\bSLUICE_[A-Z0-9_]*[A-Z0-9]\b")
READS = re.compile(r"\b(?:os\.environ|os\.getenv|environ\.get|getenv)\b[^\n]*\bSLUICE_")


def _sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*") if p.is_file() and p.suffix in (".py", ".pyi", ".cpp", ".h", ".c"))


def _names_in_src() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in _sources():
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def _documented() -> set[str]:
    """The variables with a row of their own in the table of docs/environment.md's section "The variables"."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## The variables", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(SLUICE_[A-Z0-9_]+)` \|", section, flags=re.M))


def test_at_most_ten_variables_remain_each_documented():
    names = _names_in_src()
    assert len(names) <= 10, sorted(names)
    missing = sorted(set(names) - _documented())
    assert not missing, f"not documented in docs/environment.md: {missing} (in {[names[m] for m in missing]})"
    assert set(names) == set(env.VARIABLES), "sluice.env.VARIABLES lists exactly the variables src/ names"
    assert _documented() == set(env.VARIABLES), "docs/environment.md documents exactly sluice.env.VARIABLES"


def test_only_sluice_env_reads_them():
    readers = []
    for path in _sources():
        if path == SRC / "env.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if READS.search(line):
                readers.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not readers, "read SLUICE_* variables through sluice.env:\n" + "\n".join(readers)


def test_the_scan_sees_a_read_and_skips_other_names():
    assert READS.search('x = os.environ.get("SLUICE_FOO", "1")') and READS.search('os.getenv("SLUICE_FOO")')
    assert NAME.findall("CONVERTED_SLUICE_MODULES ``SLUICE_S3_*`` SLUICE_CACHE") == ["SLUICE_CACHE"]


def test_defaults(monkeypatch, tmp_path):
    for name in env.VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLUICE_CACHE", str(tmp_path))
    assert env.s3() == env.S3Env(timeout=30.0, connect_timeout=5.0, retries=5, retry_timeout=60.0, concurrency=64)
    assert env.max_image_pixels(123) == 123
    assert env.eager() is False
    assert env.video_index_dir() == tmp_path / "video_index"
    monkeypatch.setenv("SLUICE_VIDEO_INDEX_DIR", "  ")  # blank: unset
    assert env.video_index_dir() == tmp_path / "video_index"


def test_values_are_parsed(monkeypatch, tmp_path):
    monkeypatch.setenv("SLUICE_S3_TIMEOUT", "0.5")
    monkeypatch.setenv("SLUICE_S3_RETRIES", " 0 ")
    monkeypatch.setenv("SLUICE_S3_CONCURRENCY", "8")
    monkeypatch.setenv("SLUICE_MAX_IMAGE_PIXELS", "1000")
    monkeypatch.setenv("SLUICE_VIDEO_INDEX_DIR", str(tmp_path / "shared"))
    s = env.s3()
    assert (s.timeout, s.retries, s.concurrency) == (0.5, 0, 8) and isinstance(s.retries, int)
    assert env.max_image_pixels(123) == 1000
    assert env.video_index_dir() == tmp_path / "shared"
    for value, want in (("1", True), ("TRUE", True), ("on", True), ("0", False), ("no", False), ("", False)):
        monkeypatch.setenv("SLUICE_EAGER", value)
        assert env.eager() is want, value


@pytest.mark.parametrize("name,value,call", [
    ("SLUICE_S3_TIMEOUT", "fast", env.s3),
    ("SLUICE_S3_TIMEOUT", "0", env.s3),
    ("SLUICE_S3_RETRIES", "2.5", env.s3),
    ("SLUICE_S3_RETRIES", "-1", env.s3),
    ("SLUICE_S3_CONCURRENCY", "0", env.s3),
    ("SLUICE_MAX_IMAGE_PIXELS", "1e9", lambda: env.max_image_pixels(1)),
    ("SLUICE_MAX_IMAGE_PIXELS", "0", lambda: env.max_image_pixels(1)),
    ("SLUICE_EAGER", "maybe", env.eager),
])
def test_a_bad_value_is_an_error_naming_the_variable(monkeypatch, name, value, call):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=rf"Invalid {name} \('{re.escape(value)}'\): expected"):
        call()


def test_eager_turns_off_the_fast_paths(monkeypatch):
    import torch

    from sluice.kernels import batched
    from sluice.pipeline import cuda_graphs
    from sluice.pipeline.passes import fusion

    monkeypatch.delenv("SLUICE_EAGER", raising=False)
    assert cuda_graphs.enabled() and not fusion._disabled()
    monkeypatch.setenv("SLUICE_EAGER", "1")
    assert not cuda_graphs.enabled() and fusion._disabled()
    assert not batched.triton_available(torch.device("cuda", 0))
    monkeypatch.setenv("SLUICE_EAGER", "0")
    monkeypatch.setattr(fusion, "ENABLED", False)
    monkeypatch.setattr(cuda_graphs, "ENABLED", False)
    assert not cuda_graphs.enabled() and fusion._disabled()


def test_the_env_module_loads_without_sluice(tmp_path):
    """The CPU video worker processes load sluice/env.py by its path (no sluice, no torch imported)."""
    import subprocess
    import sys

    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('_sluice_env', {str(SRC / 'env.py')!r})\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "print(m.video_index_dir()); assert 'torch' not in sys.modules and 'sluice' not in sys.modules\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"SLUICE_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(tmp_path / "video_index")
