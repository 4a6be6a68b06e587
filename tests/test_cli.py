"""The `sluice` command: --version, demo on the CPU (small), help with every default, -v/-q, and bad input handled
as one-line errors with exit status 2."""

import argparse
import logging
import subprocess
import sys

import pytest

import sluice
from sluice.cli import main


@pytest.fixture(autouse=True)
def _restore_logging():
    """main() sets the level of the 'sluice' logger (-v / -q), as a command should; tests put it back."""
    logger = logging.getLogger("sluice")
    level = logger.level
    yield
    logger.setLevel(level)


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


def _run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sluice.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env)


BAD = [
    (["demo", "--epochs", "0"], "argument --epochs: expected a whole number >= 1, got 0"),
    (["demo", "--images", "many"], "argument --images: expected a whole number >= 1, got 'many'"),
    (["demo", "--batch-size", "-3"], "argument --batch-size: expected a whole number >= 1, got -3"),
    (["bench", "--iterations", "-1"], "argument --iterations: expected a whole number >= 1, got -1"),
    (["bench", "--images", "8", "--batch-size", "16"], "--images (8) must be at least --batch-size (16)"),
    (["index", "--workers", "0", "videos"], "argument --workers: expected a whole number >= 1, got 0"),
    (["demo", "--no-such-option"], "unrecognized arguments: --no-such-option"),
]


@pytest.mark.parametrize("args, message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_value_is_one_line_and_exit_status_2(capsys, args, message):
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"sluice {args[0]}: error: ") and message in lines[0], lines[0]


def test_demo_epochs_0_from_the_command_line_exits_2_with_one_line():
    result = _run_cli("demo", "--epochs", "0")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("sluice demo: error: argument --epochs")


@pytest.mark.parametrize("command", [[], ["demo"], ["bench"], ["probe"], ["index"]])
def test_every_option_has_help_with_its_default(command):
    from sluice.cli import build_parser

    parser = build_parser()
    target = parser.commands[command[0]] if command else parser
    text = target.format_help()
    for action in target._actions:
        if not action.option_strings or action.dest in ("help", "version"):
            continue
        assert action.help, f"{command} {action.option_strings} has no help"
        if action.default not in (None, argparse.SUPPRESS) and not isinstance(action, argparse._CountAction):
            assert f"(default: {action.default})" in " ".join(text.split()), (command, action.option_strings)
    for word in ("-v, --verbose", "-q, --quiet"):
        assert word in text


@pytest.mark.parametrize("args, level", [([], logging.WARNING), (["-v"], logging.INFO), (["-vv"], logging.DEBUG),
                                         (["-q"], logging.ERROR), (["-v", "-q"], logging.WARNING),
                                         (["demo", "-v"], logging.INFO)])
def test_verbose_and_quiet_set_the_log_level(monkeypatch, args, level):
    import sluice.cli as cli

    seen = {}
    monkeypatch.setattr(cli, "cmd_demo", lambda a: seen.setdefault("level", logging.getLogger("sluice").level))
    argv = args if "demo" in args else [*args, "demo"]
    assert main(argv) == level  # cmd_demo's return value: the level it ran with
    assert seen["level"] == level


def test_demo_trains_on_exactly_the_images_asked_for(tmp_path, monkeypatch, capsys):
    pytest.importorskip("PIL")
    monkeypatch.setenv("SLUICE_CACHE", str(tmp_path / "cache"))
    for count in (10, 6):  # a smaller count after a larger one reads only its own images
        assert main(["demo", "--cpu", "--images", str(count), "--batch-size", "4", "--epochs", "1", "-q",
                     "--output", str(tmp_path / "sheet.png")]) == 0
        text = capsys.readouterr().out
        assert f"demo: {count} JPEGs" in text
        assert f"({count - 4} images in" in text  # everything after the first batch, which is not timed
    assert len(list((tmp_path / "cache" / "demo_images").rglob("*.jpg"))) == 10
