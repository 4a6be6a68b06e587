"""The documentation stays true: docs/operators.md is what the schemas generate, every relative link resolves,
every `fn.*` call in a code block names a real operator and real arguments, every environment variable sluice
reads is documented, and the README's quick-start commands exist in the Makefile."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sluice import _opdocs
from sluice.schema import REGISTRY, get_schema

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "examples" / "README.md",
         *sorted((ROOT / "docs").glob("*.md"))]


def test_operator_reference_is_current():
    assert _opdocs.main(["--check"]) == 0, "run: python -m sluice._opdocs (or make docs)"


def test_operator_reference_has_every_operator():
    text = _opdocs.DOC.read_text()
    for name in REGISTRY:
        if not name.startswith("_"):
            assert f"\n### fn.{name}\n" in text, name


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    out = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", title)))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: broken link {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: no heading for {target}"


def _fn_calls(code: str):
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call):
            parts, f = [], node.func
            while isinstance(f, ast.Attribute):
                parts.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name) and f.id == "fn" and parts:
                yield ".".join(reversed(parts)), [k.arg for k in node.keywords if k.arg]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_call_real_operators_with_real_arguments(page):
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    for code in blocks:
        for name, keywords in _fn_calls(code):
            schema = get_schema(name)
            unknown = set(keywords) - set(schema.args) - {"device", "name"}
            assert not unknown, f"{page.name}: fn.{name} has no argument {sorted(unknown)}"


def test_readme_quick_start_commands_exist():
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for command in ("make demo", "make test", "make demo GPU=1"):
        assert f"\n{command} " in readme, command
    for target in ("demo", "test", "examples", "docs"):
        assert re.search(rf"^{target}:", makefile, re.M), target
    assert "## Speed, measured" in readme and "| DALI 2.4 | sluice | sluice / DALI |" in readme
