"""The analysis walks every file Python parses to its end: a cycle in what it follows is
cut, and a statement nested too deep to follow costs only that statement. ``IDK010`` is
left for what Python itself cannot parse."""

from __future__ import annotations

import pathlib

from harness.scan.codes import Code
from harness.scan.finding import Severity
from harness.scan.scanner import scan_paths

# A name rebound to a list holding itself: following the name through its value never ends
# unless the cycle is cut.
SELF_REFERENTIAL = """\
_registry = {}
def register(params, owner):
    if not isinstance(params, list):
        params = [params]
    _registry[id(owner)] = params
    return _registry
"""


def _codes(result) -> list[tuple[str, int, str, str]]:
    return [(pathlib.Path(f.path).name, f.line, f.code.label, f.severity.value) for f in result.findings]


def test_a_name_bound_to_a_list_holding_itself_is_checked(tmp_path):
    (tmp_path / "selfref.py").write_text(SELF_REFERENTIAL)
    result = scan_paths([str(tmp_path)])
    assert _codes(result) == [("selfref.py", 5, "IDK001", "hazard")]


def _deep_sum(terms: int) -> str:
    return " + ".join(["obj"] * terms)


def test_a_statement_too_deep_to_follow_leaves_the_rest_of_the_file_checked(tmp_path):
    # Python parses a sum of 900 terms; following it term by term passes the recursion limit.
    (tmp_path / "deep.py").write_text(
        "_reg = {}\n"
        "def f(obj):\n"
        f"    total = {_deep_sum(900)}\n"
        "    _reg[id(obj)] = total\n"
        "    return total\n"
    )
    result = scan_paths([str(tmp_path)])
    assert _codes(result) == [("deep.py", 4, "IDK001", "hazard")]


def test_what_python_cannot_parse_for_its_depth_is_not_checked(tmp_path):
    (tmp_path / "too_deep.py").write_text(f"def f(obj):\n    return {_deep_sum(5000)}\n")
    (tmp_path / "reg.py").write_text(SELF_REFERENTIAL)
    result = scan_paths([str(tmp_path)])
    unparsed = [f for f in result.findings if f.code is Code.FILE_NOT_PARSED]
    assert [pathlib.Path(f.path).name for f in unparsed] == ["too_deep.py"]
    assert unparsed[0].severity is Severity.ERROR
    assert ("reg.py", 5, "IDK001", "hazard") in _codes(result)
