"""The layers of docs/architecture.md, checked on the source: imports point one way only.

Every ``import`` counts, those inside functions included.  A *unit* is a subpackage of flegel
(``flegel.runtime``, ``flegel.sync``, ...) or a top-level module (``flegel.run``); the built-in
algorithms (``algorithms/``, installed as ``flegel.algorithms``) are one unit.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {p.name for p in (ROOT / "flegel").iterdir() if (p / "__init__.py").is_file()}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "algorithms":
        parts = ["flegel", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _unit(module: str) -> str:
    parts = module.split(".")
    if len(parts) >= 2 and (parts[1] in PACKAGES or parts[1] == "algorithms"):
        return ".".join(parts[:2])
    return module if len(parts) >= 2 else "flegel"


def _imports(path: Path, module: str) -> set[str]:
    """Every flegel module ``path`` imports (absolute and relative, anywhere in the file)."""
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.add(base)
            # ``from flegel import sync`` imports the module flegel.sync.
            out.update(f"{base}.{a.name}" for a in node.names
                       if f"{base}.{a.name}".split(".")[1:2] and base == "flegel"
                       and (a.name in PACKAGES or (ROOT / "flegel" / f"{a.name}.py").is_file()))
    return {m.replace("algorithms", "flegel.algorithms", 1) if m.split(".")[0] == "algorithms"
            else m for m in out if m.split(".")[0] in ("flegel", "algorithms")}


def _graph() -> dict[str, set[str]]:
    """unit -> units it imports (itself excluded)."""
    files = [*(ROOT / "flegel").rglob("*.py"), *(ROOT / "algorithms").rglob("*.py")]
    graph: dict[str, set[str]] = {}
    for path in files:
        module = _module_name(path)
        unit = _unit(module)
        targets = {_unit(m) for m in _imports(path, module)} - {unit}
        graph.setdefault(unit, set()).update(targets)
    return graph


GRAPH = _graph()


def test_the_graph_is_read() -> None:
    assert {"flegel.protocol", "flegel.runtime", "flegel.sync", "flegel.run"} <= set(GRAPH)
    assert "flegel.protocol" in GRAPH["flegel.sync"]


def test_protocol_and_schema_are_at_the_bottom() -> None:
    assert GRAPH["flegel.protocol"] == set()
    assert GRAPH["flegel.schema"] == set()
    assert GRAPH["flegel.state"] == set()  # the checkpoint protocol (flegel/state.py)
    assert GRAPH["flegel.ports"] <= {"flegel.protocol", "flegel.state"}


@pytest.mark.parametrize("unit, forbidden", [
    ("flegel.runtime", {"flegel.sync", "flegel.run", "flegel.config", "flegel.cli",
                        "flegel.interval", "flegel.algorithms"}),
    ("flegel.sync", {"flegel.runtime", "flegel.run", "flegel.config", "flegel.cli",
                     "flegel.data", "flegel.algorithms"}),
    ("flegel.data", {"flegel.runtime", "flegel.sync", "flegel.run", "flegel.config",
                     "flegel.cli"}),
    ("flegel.interval", {"flegel.runtime", "flegel.sync", "flegel.run", "flegel.config"}),
    ("flegel.algorithms", {"flegel.runtime", "flegel.sync", "flegel.run", "flegel.config",
                           "flegel.cli"}),
])
def test_imports_point_down(unit: str, forbidden: set[str]) -> None:
    assert GRAPH[unit] & forbidden == set(), f"{unit} imports {GRAPH[unit] & forbidden}"


def test_no_import_cycle_between_units() -> None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(u: str) -> None:
        state[u] = 1
        path.append(u)
        for v in sorted(GRAPH.get(u, ())):
            if state.get(v) == 1:
                cycle = path[path.index(v):] + [v]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if v not in state:
                visit(v)
        path.pop()
        state[u] = 2

    for u in sorted(GRAPH):
        if u not in state:
            visit(u)
