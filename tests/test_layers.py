"""Imports point one way: from the entry points down to the numerics.

Every module of ``harness/`` belongs to one layer of :data:`LAYERS` (the longest matching
prefix decides); a module may import from its own layer and the layers below it, never from a
layer above, and no set of modules may import each other in a circle. Every import counts,
also one inside a function. A new package must be given a layer here, or this test fails.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Bottom first.
LAYERS = [
    ("base", ["harness.errors", "harness.files", "harness.frames", "harness.phases"]),
    ("numerics", ["harness.fp8"]),
    ("cases", ["harness.case"]),
    ("mechanisms", ["harness.idreuse", "harness.collectives", "harness.comm", "harness.hangs"]),
    ("reference", ["harness.reference"]),
    ("stacks", ["harness.stacks"]),
    ("oracles", ["harness.oracles"]),
    ("reports", ["harness.report"]),
    ("faults", ["harness.faults"]),
    ("rank side", ["harness.runner.rank", "harness.runner.messages", "harness.runner.placement",
                   "harness.runner.address"]),
    ("runner", ["harness.runner"]),
    ("entry points", ["harness.cli", "harness.__main__", "harness.pytest_plugin", "harness.stress",
                      "harness.bench", "harness.faultmatrix", "harness.sentinel", "harness.scan",
                      "harness.classcases"]),
]


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: pathlib.Path, name: str, modules) -> set[str]:
    """Every module of ``modules`` that module ``name`` imports, at any depth of the file.

    ``from pkg import mod`` imports ``pkg.mod`` (a package's ``__init__`` runs on the way to any
    of its modules, so it is not counted); ``from pkg import attr`` imports ``pkg``.
    """
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                found.add(f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target)
    return {m for m in found if m in modules and m != name}


def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports."""
    files = {module_name(p, root): p for p in (root / "harness").rglob("*.py")}
    return {name: imports_of(path, name, files) for name, path in files.items()}


def layer_of(module: str, layers=LAYERS) -> int | None:
    best = None
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    return None if best is None else best[0]


def violations(graph: dict[str, set[str]], layers=LAYERS) -> list[str]:
    """Modules without a layer, and imports from a layer above the importer's."""
    out = []
    for module in sorted(graph):
        if module == "harness":
            continue
        mine = layer_of(module, layers)
        if mine is None:
            out.append(f"{module}: in no layer (add it to LAYERS in tests/test_layers.py)")
            continue
        for target in sorted(graph[module]):
            theirs = layer_of(target, layers)
            if theirs is not None and theirs > mine:
                out.append(f"{module} ({layers[mine][0]}) imports {target} ({layers[theirs][0]}), a layer above it")
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_from_a_layer_above_it():
    problems = violations(import_graph())
    assert not problems, "imports against the layer order:\n" + "\n".join(problems)


def test_no_import_circle():
    found = circles(import_graph())
    assert not found, "modules that import each other in a circle:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_rank_side_imports_nothing_of_the_controller_side():
    graph = import_graph()
    rank_side = [m for m in graph if layer_of(m) == layer_of("harness.runner.rank")]
    assert "harness.runner.rank.serve" in rank_side and "harness.runner.rank.worker" in rank_side
    for module in rank_side:
        assert not {t for t in graph[module] if layer_of(t) == layer_of("harness.runner.group")}, module


# --- the checker itself, on known-bad graphs -------------------------------------------------

def test_checker_reports_an_upward_import_and_a_module_without_a_layer():
    graph = {"harness.fp8.cast": {"harness.runner.session"}, "harness.runner.session": set(),
             "harness.newthing": set()}
    problems = violations(graph)
    assert any("harness.fp8.cast (numerics) imports harness.runner.session (runner)" in p for p in problems)
    assert any(p.startswith("harness.newthing: in no layer") for p in problems)


def test_checker_finds_a_circle_and_respects_the_longest_prefix():
    graph = {"harness.reference.a": {"harness.reference.b"}, "harness.reference.b": {"harness.reference.a"},
             "harness.runner.rank.state": {"harness.runner.group"}, "harness.runner.group": set()}
    assert circles(graph) == [["harness.reference.a", "harness.reference.b"]]
    assert any("harness.runner.rank.state (rank side) imports harness.runner.group (runner)" in p
               for p in violations(graph))


def test_imports_inside_functions_and_relative_imports_count(tmp_path):
    pkg = tmp_path / "harness" / "fp8"
    pkg.mkdir(parents=True)
    (tmp_path / "harness" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from . import cast\n")
    (pkg / "cast.py").write_text("def f():\n    from harness.runner import session\n")
    (tmp_path / "harness" / "runner").mkdir()
    (tmp_path / "harness" / "runner" / "__init__.py").write_text("")
    (tmp_path / "harness" / "runner" / "session.py").write_text("")
    graph = import_graph(tmp_path)
    assert graph["harness.fp8"] == {"harness.fp8.cast"}
    assert graph["harness.fp8.cast"] == {"harness.runner.session"}
    assert violations(graph)


if __name__ == "__main__":   # pragma: no cover
    pytest.main([__file__])
