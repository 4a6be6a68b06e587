"""The `sluice` command: --version, demo on the CPU (small), and bad input handled as errors."""

import subprocess
import sys

import pytest

import sluice
from sluice.cli import main


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert sluice.__version__ in capsys.readouterr().out


def test_demo_runs_on_the_cpu_and_writes_a_contact_sheet(tmp_path, monkeypatch, capsys):
    pytest.importorskip("PIL")
    monkeypatch.setenv("SLUICE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "sheet.png"
    assert main(["demo", "--cpu", "--images", "24", "--batch-size", "8", "--epochs", "2",
                 "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "throughput:" in text and "images/s" in text
    assert "(8, 3, 224, 224) torch.float16" in text
    from PIL import Image

    sheet = Image.open(out)
    assert sheet.size == (8 * 228, 228)  # 8 images of 224 px with 4 px gaps, one row


def test_probe_of_a_missing_file_is_an_error_not_a_traceback(tmp_path):
    pytest.importorskip("av")
    result = subprocess.run([sys.executable, "-m", "sluice.cli", "probe", str(tmp_path / "missing.mp4")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "missing.mp4" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_help_lists_the_commands(capsys):
    assert main([]) == 0
    text = capsys.readouterr().out
    for command in ("demo", "bench", "probe", "index"):
        assert command in text
