"""The runner stays readable: no module over 400 lines, no function over 80."""

from __future__ import annotations

import ast
import pathlib

RUNNER = pathlib.Path(__file__).resolve().parents[2] / "harness" / "runner"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def oversized(root: pathlib.Path = RUNNER) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{path.relative_to(root.parent.parent)}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{path.relative_to(root.parent.parent)}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_runner_module_or_function_is_oversized():
    assert oversized() == []


def test_the_check_sees_an_oversized_function(tmp_path):
    (tmp_path / "big.py").write_text("def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES + "\n")
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert [line.split(":")[0].split("/")[-1] for line in oversized(tmp_path)] == ["big.py", "long.py"]
