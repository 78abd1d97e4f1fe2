"""The package's layering, read from the source: no module imports a folder above its own (engine < core <
acceptance, metrics < drafters < decode < training < methods < run < studies), and no import cycle between modules,
imports inside functions included (a lazy import hides a cycle; it does not remove it)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "specrepro"
FOLDER_RANK = {"engine": 0, "core": 1, "acceptance": 2, "metrics": 2, "drafters": 3, "decode": 4, "training": 5,
               "methods": 6, "run": 7, "studies": 8}


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the package (a package by its ``__init__.py``)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its file. ``from pkg import sub`` names the submodule
    ``sub``; ``from pkg import thing`` names ``pkg`` (its ``__init__`` runs)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # ``specrepro.x.y.attr`` -> the module that defines it
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _folder(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in FOLDER_RANK else None


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
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


@pytest.fixture(scope="module")
def edges() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def test_no_module_imports_a_folder_above_its_own(edges):
    upward = [f"{a} -> {b}" for a, outs in edges.items() for b in outs
              if _folder(a) and _folder(b) and FOLDER_RANK[_folder(b)] > FOLDER_RANK[_folder(a)]]
    assert not upward, "imports that climb the layers:\n" + "\n".join(sorted(upward))


def test_no_import_cycle_lazy_imports_included(edges):
    assert not _cycles(edges), f"import cycles: {_cycles(edges)}"


def test_the_checks_see_a_cycle_and_a_climb():
    """The checks can fail: a made-up two-module cycle is found, and the real package has edges to check."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    modules = _modules()
    base = _imported("specrepro.methods.base", modules["specrepro.methods.base"], modules)
    assert "specrepro.drafters" in base  # imported inside Method.build_drafter: lazy imports count
    assert _folder("specrepro.run.explore") == "run" and _folder("specrepro.cli") is None
