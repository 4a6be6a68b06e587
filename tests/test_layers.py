"""The layers point one way (CONVENTIONS.md, issue 37): import-linter's layers contract in pyproject.toml holds, and
sluice's import graph, counting imports inside functions (tools/import_graph.py, which reads the sources with
``ast``), has no cycle beyond the known one and no more imports inside functions than it has today."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sluice

ROOT = Path(__file__).resolve().parent.parent
SRC = Path(sluice.__file__).resolve().parent.parent  # the tree under test (a worktree's src, or the install)

#: Cycles left, as sorted module lists: none (the last, decoders.image <-> _image_cpu, ended when the decoders'
#: window helpers moved to decoders.windows).
KNOWN_CYCLES: list[list[str]] = []

#: sluice-internal imports inside functions: an upper bound that may only fall (the issue's aim is 25, each for
#: import time or an optional dependency, with a comment saying which).
MAX_FUNCTION_IMPORTS = 7


def _import_graph():
    spec = importlib.util.spec_from_file_location("_sluice_import_graph", ROOT / "tools" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_layers_contract_holds():
    pytest.importorskip("importlinter", reason="import-linter is not installed (pip install -e '.[test]' brings it)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())",
         "--no-cache", "--no-logo"],  # the contract: pyproject.toml, found from cwd
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert "1 kept, 0 broken" in run.stdout, run.stdout[-3000:]


def test_no_import_cycles_counting_imports_inside_functions():
    graph = _import_graph()
    found = graph.cycles(graph.imports(SRC))
    new = [c for c in found if c not in KNOWN_CYCLES]
    assert not new, f"import cycles (counting imports inside functions): {new}; run tools/import_graph.py"


def test_imports_inside_functions_do_not_grow():
    graph = _import_graph()
    inner = graph.function_imports(graph.imports(SRC))
    listing = "\n".join(f"{e.importer}:{e.line} -> {e.imported}" for e in inner)
    assert len(inner) <= MAX_FUNCTION_IMPORTS, (
        f"{len(inner)} sluice-internal imports inside functions (at most {MAX_FUNCTION_IMPORTS}): import at the "
        f"top of the module, or move the helper to the layer below\n{listing}")


def test_the_graph_sees_imports_inside_functions_and_cycles(tmp_path):
    """The measuring tool itself: an import in a function, a relative one and a two-module cycle are all seen;
    an ``if TYPE_CHECKING:`` import is not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import c\n"
                              "def f():\n    from . import b\n")
    (pkg / "b.py").write_text("import pkg.a\n")
    (pkg / "c.py").write_text("from pkg.b import x\n")
    graph = _import_graph()
    edges = graph.imports(tmp_path, "pkg")
    assert {(e.importer, e.imported, e.in_function) for e in edges} == {
        ("pkg.a", "pkg.b", True), ("pkg.b", "pkg.a", False), ("pkg.c", "pkg.b", False)}
    assert graph.cycles(edges) == [["pkg.a", "pkg.b"]]
