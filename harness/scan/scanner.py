"""Scan files and directories: find the Python files, parse them, analyze them together,
apply suppressions. The one entry point the CLI and tests call is :func:`scan_paths`.

Files are parsed, never imported: nothing of the scanned code runs.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import os
import platform
import re
import tokenize
from typing import Callable, Iterable, Optional

from harness.errors import UsageError
from harness.scan.analyzer import analyze
from harness.scan.codes import Code
from harness.scan.environment import Place
from harness.scan.facts import ModuleFacts, find_factories, find_id_attributes
from harness.scan.finding import Finding, RegistryFinding, Severity
from harness.scan.index import ScanIndex
from harness.scan.registry import group, judge, to_findings
from harness.scan.resets import exit_clears
from harness.scan.suppression import read_suppressions

# Directories never entered when a directory is scanned: caches, virtual environments and
# version-control data are not the project's code.
_SKIPPED_DIRECTORIES = {"__pycache__", "node_modules", "site-packages"}
# A file that never spells id or hash cannot make an id-derived key itself; it is analyzed
# only if it calls a key factory found elsewhere. Skipping the rest keeps big trees fast.
_SPELLS_IDENTITY = re.compile(rb"\b(id|hash)\b")
_SUPPRESSION_MARKER = b"id-hazard"


@dataclasses.dataclass
class ScanResult:
    """Everything one scan found. ``findings`` are the per-line uses, sorted, suppressed ones
    left out; ``registries`` group them, one finding per registry (what the report prints)."""

    findings: list[Finding]
    files_scanned: int
    suppressed: int
    registries: list[RegistryFinding] = dataclasses.field(default_factory=list)
    class_files: dict[str, str] = dataclasses.field(default_factory=dict)   # class name -> defining file

    @property
    def failed(self) -> bool:
        return any(f.severity.fails_scan for f in self.findings)

    def count(self, severity: Severity) -> int:
        """Registry findings of ``severity``."""
        return sum(1 for f in self.registries if f.severity is severity)

    def lines(self, severity: Severity) -> int:
        """Distinct source lines among the uses of findings of ``severity``."""
        return len({line for f in self.registries if f.severity is severity for line in f.lines})


def python_files(paths: Iterable[str]) -> list[str]:
    """Every ``*.py`` file under ``paths`` (files named directly are taken whatever their
    suffix), in a stable order. Hidden directories and caches are skipped.

    Raises UsageError naming the first path that is empty, does not exist, or is a directory
    without any Python file (an empty scan would pass silently).
    """
    found: list[str] = []
    for path in paths:
        if not path:
            raise UsageError("an empty path was given (give existing files or directories to scan)")
        if os.path.isfile(path):
            found.append(path)
        elif os.path.isdir(path):
            in_directory = _walk_directory(path)
            if not in_directory:
                raise UsageError(f"no Python files under {path} (nothing to scan: check the path)")
            found.extend(in_directory)
        else:
            raise UsageError(f"no such file or directory: {path} (give existing files or directories to scan)")
    return list(dict.fromkeys(found))


def _walk_directory(top: str) -> list[str]:
    found = []
    for directory, subdirectories, files in os.walk(top):
        subdirectories[:] = sorted(
            d for d in subdirectories if not d.startswith(".") and d not in _SKIPPED_DIRECTORIES
        )
        found.extend(os.path.normpath(os.path.join(directory, name)) for name in sorted(files) if name.endswith(".py"))
    return found


def _decoded_lines(source: bytes) -> list[str]:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    except SyntaxError:
        encoding = "utf-8"
    try:
        return source.decode(encoding, errors="replace").splitlines()
    except LookupError:
        return source.decode("utf-8", errors="replace").splitlines()


def _unparsed(path: str, error: Exception, lines: list[str]) -> Finding:
    line = getattr(error, "lineno", None) or 1
    col = max(1, getattr(error, "offset", None) or 1)
    reason = getattr(error, "msg", None) or str(error)
    if isinstance(error, SyntaxError):
        # A file written for a newer Python fails to parse with an older one: say which one
        # parsed it, so "invalid syntax" on valid new syntax is recognised for what it is.
        reason = f"{reason} (parsed by Python {platform.python_version()}; a file written for a newer Python needs the scan run with that Python)"
    snippet = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return Finding(
        path, line, col, Code.FILE_NOT_PARSED, Severity.ERROR,
        f"{reason}; this file was not checked (fix it, or leave it out of the paths scanned)", snippet,
    )


def _place_for(module, scope, flow, factories) -> Place:
    return Place(module, scope, flow, factories)


def scan_paths(paths: Iterable[str], skip: Optional[Callable[[str], bool]] = None) -> ScanResult:
    """Scan every Python file under ``paths`` together (key factories and the stores into
    shared registries are matched across files); ``skip(path)`` leaves files out (the
    settings' ``exclude``)."""
    files = python_files(paths)
    if skip is not None:
        files = [path for path in files if not skip(path)]
    findings: list[Finding] = []
    sources: dict[str, bytes] = {}
    lines: dict[str, list[str]] = {}
    trees: dict[str, ast.Module] = {}
    for path in files:
        try:
            with open(path, "rb") as handle:
                source = handle.read()
        except OSError as error:
            findings.append(_unparsed(path, OSError(f"cannot be read: {error.strerror or error}"), []))
            continue
        sources[path] = source
        lines[path] = _decoded_lines(source)
        try:
            trees[path] = ast.parse(source, filename=path)
        except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError, MemoryError) as error:
            # RecursionError, MemoryError: Python's own parser gives up on deep nesting
            findings.append(_unparsed(path, error, lines[path]))

    index = ScanIndex(trees, sources, ModuleFacts)
    modules = [index.facts(path) for path in trees if _SPELLS_IDENTITY.search(sources[path])]
    factories = find_factories(modules, _place_for)
    factory_names = {name.rsplit(".", 1)[-1].encode() for name in factories}
    analyzed = {module.path for module in modules}
    for path in trees:
        if path not in analyzed and any(name in sources[path] for name in factory_names):
            modules.append(index.facts(path))
    for module in modules:
        find_id_attributes(module, _place_for, factories)
    hits, prunes = analyze(modules, factories)
    clears = [clear for module in modules for clear in exit_clears(module)]
    judged = judge(hits, prunes, clears)
    findings.extend(to_findings(judged, lines))

    kept, suppressed = _apply_suppressions(findings, sources, lines, set(trees))
    kept.sort(key=Finding.sort_key)
    class_files = {name: module.path for module in modules for name in module.classes}
    bases = factory_bases(factories, trees)
    return ScanResult(kept, len(files), suppressed, group(kept, judged, bases), class_files)


def factory_bases(factories: dict, trees: dict[str, ast.Module]) -> dict[str, set[str]]:
    """For each key factory (by its last name), itself and the factories it calls, directly
    or through others: a key from ``get_key_in_buffer`` embeds the one from
    ``get_unique_autocast_key`` it calls."""
    short = {qualname.rsplit(".", 1)[-1] for qualname in factories}
    calls: dict[str, set[str]] = {}
    for qualname, factory in factories.items():
        name = qualname.rsplit(".", 1)[-1]
        path, _, line = factory.where.rpartition(":")
        tree = trees.get(path)
        found = {name}
        if tree is not None:
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno == int(line) and node.name == name:
                    for inner in ast.walk(node):
                        if isinstance(inner, ast.Call):
                            callee = inner.func.attr if isinstance(inner.func, ast.Attribute) else getattr(inner.func, "id", None)
                            if callee in short:
                                found.add(callee)
        calls.setdefault(name, set()).update(found)
    for _ in range(3):
        for name, found in calls.items():
            for other in list(found):
                found |= calls.get(other, set())
    return calls


def _apply_suppressions(
    findings: list[Finding], sources: dict[str, bytes], lines: dict[str, list[str]], parsed: set[str]
) -> tuple[list[Finding], int]:
    kept: list[Finding] = []
    suppressed = 0
    by_file = {path: read_suppressions(sources[path]) for path in parsed if _SUPPRESSION_MARKER in sources[path]}
    for finding in findings:
        suppression = by_file.get(finding.path, {}).get(finding.line)
        if suppression is not None and suppression.reason is not None and finding.code is not Code.FILE_NOT_PARSED:
            suppressed += 1
            continue
        kept.append(finding)
    for path, suppressions in by_file.items():
        for suppression in suppressions.values():
            if suppression.reason is None:
                line_text = lines[path][suppression.line - 1].strip() if suppression.line <= len(lines[path]) else ""
                kept.append(Finding(
                    path, suppression.line, suppression.col + 1, Code.SUPPRESSION_WITHOUT_REASON, Severity.ERROR,
                    f"{suppression.text!r} suppresses nothing; write '# id-hazard: ok(<why the object outlives the entry>)'",
                    line_text,
                ))
    return kept, suppressed
