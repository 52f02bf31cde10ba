"""What the sentinel tells: the session header (what is watched, what could not be, and why), the
failure of a test that left a dead object's id behind, and the session summary that lists every
finding once (also those xdist workers made: they travel with the test reports)."""

from __future__ import annotations

import pytest

from harness.sentinel.witness import Stale

HINT = (
    "Prune the entry when the object dies (weakref.finalize(obj, registry.pop, key, None)), "
    "or key the registry by the object itself (weakref.WeakKeyDictionary)."
)
MAX_REPORTED = 20


def plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def failure_message(stale: list[Stale]) -> str:
    count = len(stale)
    entries = "\n  ".join(s.describe() for s in stale[:MAX_REPORTED])
    if count > MAX_REPORTED:
        entries += f"\n  ... and {count - MAX_REPORTED} more"
    return (f"sentinel: {plural(count, 'registry entry', 'registry entries')} outlived "
            f"{'its object' if count == 1 else 'their objects'}:\n  {entries}\n{HINT}")


class SessionReport:
    """Registered where the session is reported (the session itself, or the xdist controller)."""

    def __init__(self, header: list[str], watched: list[str]):
        self.header = header
        self.watched = watched
        self.findings: dict[str, None] = {}   # one line per finding, in order, each once
        self.late: list[str] = []             # full descriptions, found after the last test
        self.notes: list[str] = []

    def add_late(self, described: list[str]) -> None:
        self.late.extend(described)

    def add_note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def pytest_report_header(self) -> list[str]:
        return self.header

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for line in getattr(report, "sentinel_findings", None) or ():
            self.findings.setdefault(line, None)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.late and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.watched and not self.notes:
            return
        found = len(self.findings) + len(self.late)
        title = (f"sentinel: {plural(found, 'registry entry', 'registry entries')} outlived "
                 f"{'its object' if found == 1 else 'their objects'}"
                 if found else "sentinel: no registry entry outlived its object")
        terminalreporter.section(title)
        terminalreporter.line(f"watched: {', '.join(self.watched) or 'nothing'}")
        for note in self.notes:
            terminalreporter.line(note)
        for line in self.findings:
            terminalreporter.line(line)
        if self.late:
            terminalreporter.line("after the last test:")
            for described in self.late:
                terminalreporter.line(described)
        if found:
            terminalreporter.line(HINT)
