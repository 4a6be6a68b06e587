"""sluice with numpy and torch only (``pip install sluice``, no extras): it imports, builds pipelines and runs the
operators that need no codec; an operator or a command whose codec is missing fails, when the pipeline is built,
with one error naming the operator, the package and the extra that brings it.

The missing packages are simulated in a subprocess by an import hook that refuses them (the packages are installed
here); tests/test_fresh_install.py checks the same in a real venv made by ``pip install .``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from sluice import _optional
from sluice.errors import MissingDependencyError, SluiceError

ROOT = Path(__file__).resolve().parents[1]

#: Everything an extra brings (the import names of _optional.EXTRAS)
CODECS = sorted({m.split(".")[0] for m in _optional.EXTRAS})

WITHOUT_EXTRAS = textwrap.dedent(f"""
    import importlib.abc, sys

    BLOCKED = {CODECS!r}

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Refuse())
""")


def run_without_extras(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS + textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=300)


def test_every_extra_module_is_in_the_extra_pyproject_names():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for module, (package, extra) in _optional.EXTRAS.items():
        listed = [r.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip().lower() for r in extras[extra]]
        assert package.lower() in listed, f"{module}: {package} is not in the '{extra}' extra: {extras[extra]}"


def test_require_names_the_package_and_the_extra():
    with pytest.raises(MissingDependencyError) as e:
        _optional.require("sluice_no_such_codec", "fn.something (device 'cpu')")
    assert "fn.something (device 'cpu') needs 'sluice_no_such_codec', which is not installed" in str(e.value)
    assert isinstance(e.value, ImportError) and isinstance(e.value, SluiceError)
    assert _optional.install_hint("cv2") == "pip install 'sluice[image]'"
    assert _optional.install_hint("av") == "pip install 'sluice[video]'"
    assert _optional.require("json", "x").__name__ == "json"


def test_an_import_error_of_a_codec_maps_to_its_extra():
    err = _optional.from_import_error(ModuleNotFoundError("No module named 'PIL'", name="PIL"), "sluice demo")
    assert "sluice demo needs Pillow (module 'PIL')" in str(err) and "sluice[image]" in str(err)
    assert _optional.from_import_error(ModuleNotFoundError("x", name="requests"), "sluice demo") is None


def test_import_and_codec_free_operators_work_without_any_extra():
    result = run_without_extras("""
        import sys
        import numpy as np
        import sluice
        from sluice import fn, types

        @sluice.pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=1)
        def pipe():
            x = fn.external_source(source=lambda: [np.full((40, 60, 3), 100, np.uint8)] * 2, layout="HWC")
            x = fn.resize(x, resize_x=30, resize_y=20)
            x = fn.crop_mirror_normalize(x, dtype=types.FLOAT, output_layout="CHW", mean=[100.0] * 3,
                                         mirror=fn.random.coin_flip())
            return x, fn.spectrogram(fn.random.normal(shape=[4000]), nfft=256, window_length=256)

        images, spec = pipe().run()
        assert images.as_tensor().shape == (2, 3, 20, 30) and float(images.as_tensor().abs().max()) == 0.0
        assert len(spec) == 2
        loaded = sorted({m.split(".")[0] for m in sys.modules} & set(BLOCKED))
        assert not loaded, loaded
        print("ok")
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"


BUILDS = {  # graph -> (the operator the error names, the extra it asks for)
    "fn.decoders.image(fn.readers.file(file_root=ROOT)[0])": ("fn.decoders.image (device 'cpu')", "image"),
    "fn.peek_image_shape(fn.readers.file(file_root=ROOT)[0])": ("fn.peek_image_shape (device 'cpu')", "image"),
    "fn.decoders.audio(fn.readers.file(file_root=ROOT)[0])[0]": ("fn.decoders.audio (device 'cpu')", "audio"),
    "fn.audio_resample(fn.random.normal(shape=[100]), scale=0.5)": ("fn.audio_resample (device 'cpu')", "audio"),
    "fn.decoders.video(fn.readers.file(file_root=ROOT)[0])": ("fn.decoders.video (device 'cpu')", "video"),
    "fn.readers.video(filenames=['x.mp4'], sequence_length=2)[0]": ("fn.readers.video (device 'cpu')", "video"),
}

COMMANDS = {  # command line -> the extra its one-line error asks for
    ("demo", "--cpu"): "image", ("bench",): "image", ("probe", "clip.mp4"): "video", ("index", "videos"): "video",
}


@pytest.fixture(scope="module")
def without_extras(tmp_path_factory):
    """What building each of BUILDS and running each of COMMANDS print, in one process without the extras."""
    root = tmp_path_factory.mktemp("files")
    (root / "a.jpg").write_bytes(b"x")
    result = run_without_extras("""
        import contextlib, io, json, sys
        import sluice
        from sluice import fn
        from sluice.cli import main
        ROOT, builds, commands = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
        out = {"builds": {}, "commands": {}}
        for graph in builds:
            pipe = sluice.pipeline_def(lambda: eval(graph), batch_size=1, num_threads=1, device_id=None)()
            try:
                pipe.build()
                out["builds"][graph] = "built"
            except sluice.MissingDependencyError as e:
                out["builds"][graph] = str(e)
        for args in commands:
            err, std = io.StringIO(), io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
                code = main(args)
            out["commands"][" ".join(args)] = [code, std.getvalue(), err.getvalue()]
        print(json.dumps(out))
    """, str(root), json.dumps(list(BUILDS)), json.dumps([list(c) for c in COMMANDS]))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("graph", list(BUILDS))
def test_a_missing_codec_fails_when_the_pipeline_is_built_naming_operator_package_and_extra(without_extras, graph):
    operator, extra = BUILDS[graph]
    message = without_extras["builds"][graph]
    assert message.startswith(f"{operator} needs "), message
    assert "which is not installed" in message and message.endswith(f"pip install 'sluice[{extra}]'"), message


@pytest.mark.parametrize("args", list(COMMANDS))
def test_a_command_whose_extra_is_missing_says_which_in_one_line(without_extras, args):
    code, stdout, stderr = without_extras["commands"][" ".join(args)]
    assert code == 1 and stdout == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"sluice: error: sluice {args[0]} needs "), lines[0]
    assert lines[0].endswith(f"pip install 'sluice[{COMMANDS[args]}]'"), lines[0]


def test_help_needs_no_extra():
    result = run_without_extras("""
        import runpy
        runpy.run_module("sluice.cli", run_name="__main__")
    """, "--help")
    assert result.returncode == 0 and "demo" in result.stdout, result.stderr
