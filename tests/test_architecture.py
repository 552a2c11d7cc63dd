"""The layers of docs/architecture.md, checked on the source: imports point one way only.

Every ``import`` counts, those inside functions and under ``TYPE_CHECKING`` included.  The
checks run at two grains:

* *files*: a module (``flegel.runtime.server``); ``from flegel.runtime import store`` names
  the file ``flegel.runtime.store``, ``from flegel.runtime import Backoff`` the package's
  ``__init__``.  No two files may import each other, directly or around a loop.
* *units*: a package of flegel (``flegel.runtime``, ``flegel.sync``, ...) or a top-level
  module (``flegel.run``); the built-in algorithms (``algorithms/``, installed as
  ``flegel.algorithms``) are one unit.  Units form layers: no loop between them either.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [*(ROOT / "flegel").rglob("*.py"), *(ROOT / "algorithms").rglob("*.py")]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "algorithms":
        parts = ["flegel", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


FILES = {_module_name(p): p for p in SOURCES}
PACKAGES = {m for m, p in FILES.items() if p.name == "__init__.py"}


def _owner(name: str) -> str | None:
    """The file that defines module ``name`` (or its nearest enclosing package)."""
    while name and name not in FILES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(path: Path, module: str) -> set[str]:
    """Every flegel file ``path`` imports (absolute and relative, anywhere in the file)."""
    names: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] == "algorithms":
                base = "flegel." + base
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                names.add(sub if sub in FILES else base)
    out = {_owner(n) for n in names if n.split(".")[0] == "flegel"}
    return {m for m in out if m is not None and m != module}


FILE_GRAPH = {m: _imports(p, m) for m, p in FILES.items()}


def _unit(module: str) -> str:
    parts = module.split(".")
    if len(parts) >= 2 and ".".join(parts[:2]) in PACKAGES:
        return ".".join(parts[:2])
    return module


def _unit_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, targets in FILE_GRAPH.items():
        unit = _unit(module)
        graph.setdefault(unit, set()).update({_unit(t) for t in targets} - {unit})
    return graph


GRAPH = _unit_graph()


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(u: str) -> list[str] | None:
        state[u] = 1
        path.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                return path[path.index(v):] + [v]
            if v not in state and (found := visit(v)):
                return found
        path.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state and (found := visit(u)):
            return found
    return None


def test_the_graph_is_read() -> None:
    assert {"flegel.protocol", "flegel.runtime", "flegel.sync", "flegel.run"} <= set(GRAPH)
    assert "flegel.protocol" in GRAPH["flegel.sync"]
    assert "flegel.runtime.store" in FILE_GRAPH["flegel.runtime.worker"]
    assert "flegel.sync.zipline" in FILE_GRAPH["flegel.sync.elastic"]


def test_the_cycle_finder_finds_cycles() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set(), "c": {"a"}}) is None


def test_bottom_modules_import_nothing_from_flegel() -> None:
    assert GRAPH["flegel.protocol"] == set()
    assert GRAPH["flegel.validation"] == set()  # the one validation vocabulary
    assert GRAPH["flegel.state"] == set()  # the checkpoint protocol (flegel/state.py)
    assert GRAPH["flegel.ports"] <= {"flegel.protocol", "flegel.state"}


@pytest.mark.parametrize("unit, forbidden", [
    ("flegel.runtime", {"flegel.sync", "flegel.run", "flegel.job", "flegel.cli",
                        "flegel.interval", "flegel.algorithms", "flegel.rundir"}),
    ("flegel.sync", {"flegel.runtime", "flegel.run", "flegel.job", "flegel.cli",
                     "flegel.data", "flegel.algorithms", "flegel.rundir"}),
    ("flegel.data", {"flegel.runtime", "flegel.sync", "flegel.run", "flegel.job",
                     "flegel.cli", "flegel.rundir"}),
    ("flegel.interval", {"flegel.runtime", "flegel.sync", "flegel.run", "flegel.job"}),
    ("flegel.algorithms", {"flegel.runtime", "flegel.sync", "flegel.run", "flegel.job",
                           "flegel.cli"}),
    ("flegel.rundir", {"flegel.sync", "flegel.run", "flegel.job", "flegel.cli",
                       "flegel.estimators"}),
    ("flegel.job", {"flegel.run", "flegel.cli", "flegel.estimators"}),
    ("flegel.run", {"flegel.cli", "flegel.estimators"}),
])
def test_imports_point_down(unit: str, forbidden: set[str]) -> None:
    assert GRAPH[unit] & forbidden == set(), f"{unit} imports {GRAPH[unit] & forbidden}"


def test_no_import_cycle_between_units() -> None:
    cycle = _find_cycle(GRAPH)
    assert cycle is None, "import cycle between units: " + " -> ".join(cycle or [])


def test_no_import_cycle_between_files() -> None:
    cycle = _find_cycle(FILE_GRAPH)
    assert cycle is None, "import cycle between files: " + " -> ".join(cycle or [])


def test_few_modules_directly_under_flegel() -> None:
    top = sorted(p.name for p in (ROOT / "flegel").glob("*.py"))
    assert len(top) <= 12, f"{len(top)} modules directly under flegel/: {top}"


def _code_lines(path: Path) -> int:
    """Lines holding code: blank lines, comments and docstrings not counted."""
    source = path.read_text()
    doc_lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                and isinstance(first.value.value, str):
            doc_lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    code: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                            tokenize.DEDENT, tokenize.ENDMARKER):
            code.update(r for r in range(tok.start[0], tok.end[0] + 1) if r not in doc_lines)
    return len(code)


def test_code_lines_counts_code_only() -> None:
    assert _code_lines(ROOT / "flegel" / "__main__.py") == 3


def test_no_module_over_600_lines_of_code() -> None:
    big = {m: n for m, p in FILES.items() if (n := _code_lines(p)) > 600}
    assert big == {}, f"modules over 600 lines of code: {big}"
