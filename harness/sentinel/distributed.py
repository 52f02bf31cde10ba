"""pytest-xdist: the controller decides what is watched (it scans once) and hands the list to
each worker; every worker watches its own tests; what a worker found after its last test, and
its notes, come back to the controller, whose summary lists every finding once."""

from __future__ import annotations

import pytest

from harness.sentinel.report import SessionReport

WATCH = "sentinel_watch"       # workerinput: registry names
SCANNED = "sentinel_scanned"   # workerinput: those of them the scan chose
HOOK_ID = "sentinel_hook_id"   # workerinput: whether to wrap id()
LATE = "sentinel_late"         # workeroutput: descriptions of entries found after the last test
NOTES = "sentinel_notes"       # workeroutput: notes (registries dropped at collection)


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def distributes(config: pytest.Config) -> bool:
    """Whether this process is an xdist controller that hands tests to workers."""
    return not is_worker(config) and getattr(config.option, "dist", "no") != "no"


def worker_watch(config: pytest.Config):
    """(names, scanned names, hook_id) the controller handed this worker, or None."""
    workerinput = getattr(config, "workerinput", {})
    if WATCH not in workerinput:
        return None
    return list(workerinput[WATCH]), set(workerinput[SCANNED]), bool(workerinput[HOOK_ID])


def worker_note(config: pytest.Config, note: str) -> None:
    config.workeroutput.setdefault(NOTES, []).append(note)


def worker_late(config: pytest.Config, described: list[str]) -> None:
    config.workeroutput.setdefault(LATE, []).extend(described)


class Controller:
    """Registered on the xdist controller, beside its :class:`SessionReport`."""

    def __init__(self, report: SessionReport, names: list[str], scanned: set[str], hook_id: bool):
        self.report = report
        self.workerinput = {WATCH: names, SCANNED: sorted(scanned), HOOK_ID: hook_id}

    def pytest_configure_node(self, node) -> None:
        node.workerinput.update(self.workerinput)

    def pytest_testnodedown(self, node, error) -> None:
        output = getattr(node, "workeroutput", None) or {}
        for note in output.get(NOTES, ()):
            self.report.add_note(note)
        self.report.add_late(list(output.get(LATE, ())))
