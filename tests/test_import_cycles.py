"""No import circles: the modules of the library (`kafscale_iceberg/`) and of `bench/` import each other
along a graph without a cycle, counting every import - at module level, under `TYPE_CHECKING`, and inside
functions. A type both sides of a circle need lives below both (STYLE.md, rule 12)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kafscale_iceberg", "bench")


def module_files() -> dict[str, Path]:
    """Every module of the walked packages, by dotted name (a package by its `__init__.py`)."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_by(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """The walked modules `name` imports anywhere in its file: `import a.b` names `a.b` (or the walked
    package holding it), `from p import m` names the module `p.m` when there is one, else `p`."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for imported in targets:
            target = imported
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def import_graph() -> dict[str, set[str]]:
    """Each walked module and the walked modules it imports."""
    modules = module_files()
    return {name: set(imported_by(name, path, set(modules))) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
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
                    found.append(sorted(component))
    return found


def test_the_walk_sees_imports_at_every_level() -> None:
    graph = import_graph()
    # a function-level import (choice.py imports the format modules through importlib, so another)
    assert "kafscale_iceberg.adapters.iceberg_catalog" in graph["kafscale_iceberg.assembly"]
    assert "kafscale_iceberg.ports" in graph["kafscale_iceberg.services.launch"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_itself_through_others() -> None:
    found = cycles(import_graph())
    assert not found, "import circles (move the type both sides need below both):\n" + "\n".join(
        " <-> ".join(component) for component in found
    )
