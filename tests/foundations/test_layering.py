"""The package's import structure: no import circle, no import from a lower layer up to a higher one.

Layers come from :data:`verifier._layers.LAYERS` (declared once); every folder and top-level
module of ``verifier/`` has its one-line job in the layer table of docs/ARCHITECTURE.md.  Imports
are read with :mod:`ast`: module-level, inside functions (lazy), under ``if TYPE_CHECKING``,
relative ones resolved, ``from pkg import mod`` counted as an import of the module ``pkg.mod``,
``importlib.import_module("literal")`` and ``runpy.run_module("literal")``.  Importing ``a.b.c`` is an edge to ``a.b.c`` only (the
parent packages' ``__init__`` run too, but they are not what the importer uses).

Reproduce a failure: ``python -m pytest -q tests/foundations/test_layering.py``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from verifier._layers import COMPAT_SHIMS, LAYERS, layer_of

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "verifier"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"


# --------------------------------------------------------------------------- the graph


def _modules(package: Path) -> dict[str, tuple[Path, bool]]:
    """``{dotted name: (file, is a package __init__)}`` of every module under ``package``."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        out[".".join(parts)] = (path, is_pkg)
    return out


def _resolve(module: str, is_pkg: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _imported(tree: ast.AST, module: str, is_pkg: bool, known: set[str]) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_pkg, node.level, node.module)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "run_module")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
    return found


def module_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}`` (itself excluded)."""
    modules = _modules(package)
    known = set(modules)
    root = package.name
    graph: dict[str, set[str]] = {}
    for name, (path, is_pkg) in modules.items():
        edges = set()
        for target in _imported(ast.parse(path.read_text(encoding="utf-8"), str(path)), name, is_pkg, known):
            if target != root and not target.startswith(root + "."):
                continue
            while target not in known and "." in target:  # `import pkg.mod.attr` -> the module that holds attr
                target = target.rsplit(".", 1)[0]
            if target in known and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


def unit_of(module: str) -> str:
    """``verifier.runner.run`` -> ``runner``; the package root is ``verifier``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


# --------------------------------------------------------------------------- the checks


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle ``[a, b, ..., a]`` per strongly connected component with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(root: str) -> None:  # iterative Tarjan: the graph may be deep
        work = [(root, iter(sorted(graph.get(root, ()))))]
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
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_path(graph, component) for component in components]


def _cycle_path(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest circle through the component's first node (breadth-first inside the component)."""
    inside, start = set(component), component[0]
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if child in inside and child not in parent:
                    parent[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no circle through {start}")  # a strongly connected component always has one


def upward_edges(graph: dict[str, set[str]], layer=layer_of, unit=unit_of) -> list[tuple[str, str]]:
    """Imports from a module on a lower layer (larger index) to a module on a higher one."""
    return sorted((a, b) for a, targets in graph.items() for b in targets if layer(unit(a)) > layer(unit(b)))


def unit_graph_within_layers(graph: dict[str, set[str]], layer=layer_of, unit=unit_of) -> dict[str, set[str]]:
    """Imports between different units of the same layer, as a unit graph (must be acyclic)."""
    units: dict[str, set[str]] = {}
    for a, targets in graph.items():
        for b in targets:
            if unit(a) != unit(b) and layer(unit(a)) == layer(unit(b)):
                units.setdefault(unit(a), set()).add(unit(b))
    return units


def _edge_lines(graph: dict[str, set[str]], path: list[str]) -> str:
    return " -> ".join(path)


# --------------------------------------------------------------------------- the checker can fail


def test_checker_flags_a_circle_and_an_upward_import():
    """A synthetic graph: ``low.b -> low.c -> low.b`` (circle) and ``low.d -> top.e`` (upward)."""
    graph = {"pkg.top.a": {"pkg.low.b"}, "pkg.low.b": {"pkg.low.c"}, "pkg.low.c": {"pkg.low.b"},
             "pkg.low.d": {"pkg.top.e"}, "pkg.top.e": set()}
    layers = {"top": 0, "low": 1}
    assert find_cycles(graph) == [["pkg.low.b", "pkg.low.c", "pkg.low.b"]]
    assert upward_edges(graph, layer=layers.__getitem__) == [("pkg.low.d", "pkg.top.e")]
    same = {"pkg.x.a": {"pkg.y.b"}, "pkg.y.b": {"pkg.x.c"}, "pkg.x.c": set()}  # no module circle, a unit circle
    assert find_cycles(same) == []
    assert find_cycles(unit_graph_within_layers(same, layer=lambda _u: 0)) == [["x", "y", "x"]]


def test_checker_reads_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import mod\n")
    (pkg / "sub" / "mod.py").write_text("def f():\n    from ..other import thing\n    import pkg.sub.leaf\n")
    (pkg / "sub" / "leaf.py").write_text("import importlib\nimportlib.import_module('pkg.other')\n")
    (pkg / "other.py").write_text("from pkg.sub import mod\n")
    graph = module_graph(pkg)
    assert graph["pkg.sub"] == {"pkg.sub.mod"}
    assert graph["pkg.sub.mod"] == {"pkg.other", "pkg.sub.leaf"}
    assert graph["pkg.sub.leaf"] == {"pkg.other"}
    assert find_cycles(graph) == [["pkg.other", "pkg.sub.mod", "pkg.other"]]


# --------------------------------------------------------------------------- the package


@pytest.fixture(scope="module")
def graph():
    return module_graph()


def test_every_unit_is_on_one_layer(graph):
    units = {unit_of(m) for m in graph}
    declared = [u for _name, members in LAYERS for u in members]
    assert len(declared) == len(set(declared)), "a unit is on two layers in verifier/_layers.py"
    assert sorted(units - set(declared)) == [], "place these in verifier/_layers.py LAYERS"
    assert sorted(set(declared) - units) == [], "verifier/_layers.py names units that do not exist"


def test_no_import_circle(graph):
    cycles = find_cycles(graph)
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_upward_import(graph):
    up = [(a, b) for a, b in upward_edges(graph) if COMPAT_SHIMS.get(a) != b]
    names = [name for name, _units in LAYERS]
    assert not up, "imports from a lower layer up to a higher one:\n" + "\n".join(
        f"{a} ({names[layer_of(unit_of(a))]}) -> {b} ({names[layer_of(unit_of(b))]})" for a, b in up)


def test_compatibility_shims_only_run_their_new_home(graph):
    """A shim of :data:`verifier._layers.COMPAT_SHIMS` imports nothing but its target and defines nothing."""
    for shim, target in COMPAT_SHIMS.items():
        assert graph[shim] == {target}, f"{shim} imports {sorted(graph[shim])}; allowed: only {target}"
        tree = ast.parse((ROOT / (shim.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
        defined = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Assign))]
        assert not defined, f"{shim} defines {[getattr(n, 'name', '=') for n in defined]}; a shim only runs {target}"


def test_the_old_torchrun_path_names_the_new_command_without_importing_upward(graph):
    import subprocess
    import sys

    assert graph["verifier.runner.torchrun"] <= set()  # imports nothing of the package
    done = subprocess.run([sys.executable, "-m", "verifier.runner.torchrun", "suite.toml"], capture_output=True, text=True)
    assert done.returncode == 2 and "-m verifier.cli.torchrun" in done.stderr and "Traceback" not in done.stderr


def test_units_of_one_layer_form_no_circle(graph):
    within = unit_graph_within_layers(graph)
    cycles = find_cycles(within)
    detail = []
    for cycle in cycles:
        for a, b in zip(cycle, cycle[1:]):
            edges = sorted((m, t) for m, ts in graph.items() if unit_of(m) == a for t in ts if unit_of(t) == b)
            detail.append(f"  {a} -> {b}: " + ", ".join(f"{m} -> {t}" for m, t in edges))
    assert not cycles, "units of one layer that import each other:\n" + "\n".join(
        " -> ".join(c) for c in cycles) + "\n" + "\n".join(detail)


# --------------------------------------------------------------------------- the documentation


def _layer_table() -> dict[str, tuple[str, str]]:
    """``{path: (layer, job)}`` from the table under '## Layers' in docs/ARCHITECTURE.md."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`verifier/[^`]*`", cells[1]):
            assert cells[1] not in rows, f"{cells[1]} has two rows in the layer table"
            rows[cells[1].strip("`")] = (cells[0], cells[2])
    return rows


def _paths() -> list[str]:
    """Every folder of verifier/ (``verifier/x/y/``) and every top-level module (``verifier/x.py``)."""
    folders = [p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__" and "__pycache__" not in p.parts]
    out = [f"{p.relative_to(ROOT).as_posix()}/" for p in folders]
    out += [p.relative_to(ROOT).as_posix() for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    return sorted(out + ["verifier/__init__.py"])


def test_every_folder_and_module_has_its_job_in_the_layer_table():
    rows = _layer_table()
    missing = [p for p in _paths() if p not in rows]
    assert not missing, "add a row (| layer | `path` | job |) under '## Layers' in docs/ARCHITECTURE.md for:\n" + "\n".join(missing)
    stale = sorted(set(rows) - set(_paths()))
    assert not stale, f"rows for paths that do not exist: {stale}"
    names = [name for name, _units in LAYERS]
    for path, (layer, job) in rows.items():
        parts = path.removeprefix("verifier/").rstrip("/").removesuffix(".py").split("/")
        unit = "verifier" if parts == ["__init__"] else parts[0]
        assert layer == names[layer_of(unit)], f"{path}: the table says layer {layer!r}, verifier/_layers.py says {names[layer_of(unit)]!r}"
        assert job and "\n" not in job, f"{path}: no job"
