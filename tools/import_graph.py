"""sluice's own import graph, read from the sources with ``ast``.

Every ``import`` / ``from ... import`` statement of a module counts, wherever it sits: at the top, inside a
function or a method, or under ``try``. Only ``if TYPE_CHECKING:`` blocks are left out (they never run).
An edge goes from the importing module to the most specific sluice module the statement names:
``from sluice.ops.image import resize`` is an edge to ``sluice.ops.image.resize``, ``from sluice.schema import
OpSchema`` one to ``sluice.schema``.

Usage: ``python tools/import_graph.py [--list]`` prints the import cycles (strongly connected components, biggest
first) and the count of sluice-internal imports inside functions; ``--list`` also prints each of those imports.
``tests/test_layers.py`` holds the numbers to their bounds.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "sluice"
#: Compiled modules (built from src/sluice/_core/), leaves of the graph.
EXTENSIONS = ("sluice._core",)


@dataclass(frozen=True)
class Import:
    importer: str  # module name
    imported: str  # most specific sluice module named
    line: int
    in_function: bool
    source: str  # the statement's first line


def module_files(src: Path = SRC, package: str = PACKAGE) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` under the package (``__init__`` names its package)."""
    out = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    for name in EXTENSIONS:
        if name.startswith(package + "."):
            out.setdefault(name, None)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(tree: ast.AST):
    """(import node, inside a function) for every import statement, skipping ``if TYPE_CHECKING:`` bodies."""
    stack = [(tree, False)]
    while stack:
        node, in_function = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            children = node.orelse
        else:
            children = list(ast.iter_child_nodes(node))
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        stack.extend((child, inner) for child in children)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    if node.level > 1:
        base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _most_specific(name: str, modules) -> str | None:
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(src: Path = SRC, package: str = PACKAGE) -> list[Import]:
    files = module_files(src, package)
    out = []
    for module, path in files.items():
        if path is None:
            continue
        text = path.read_text()
        lines = text.splitlines()
        is_package = path.name == "__init__.py"
        for node, in_function in _statements(ast.parse(text, str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(module, is_package, node)
                targets = [f"{base}.{alias.name}" if base else alias.name for alias in node.names]
            seen = set()
            for target in targets:
                if not (target == package or target.startswith(package + ".")):
                    continue
                found = _most_specific(target, files)
                if found is None or found == module or found in seen:
                    continue
                seen.add(found)
                out.append(Import(module, found, node.lineno, in_function, lines[node.lineno - 1].strip()))
    return out


def cycles(edges: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module, biggest first (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
        graph.setdefault(edge.imported, set())
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return sorted(out, key=lambda c: (-len(c), c))


def function_imports(edges: list[Import]) -> list[Import]:
    """sluice-internal import statements inside functions (one per statement and target module)."""
    return [edge for edge in edges if edge.in_function]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print each import inside a function")
    args = parser.parse_args(argv)
    edges = imports()
    found = cycles(edges)
    inner = function_imports(edges)
    print(f"{len(found)} import cycles, sizes {[len(c) for c in found]}")
    for component in found:
        print(f"  {len(component)}: {' '.join(component)}")
    print(f"{len(inner)} sluice-internal imports inside functions")
    if args.list:
        for edge in sorted(inner, key=lambda e: (e.importer, e.line)):
            print(f"  {edge.importer}:{edge.line} -> {edge.imported}   {edge.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
