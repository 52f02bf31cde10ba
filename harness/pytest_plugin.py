"""pytest as the controller: each test in ``cases/`` is one case, sent to a persistent rank group.

Loaded by the project's ``conftest.py``; cheap to import (torch and the runner load on first
use). One session per distinct run configuration (stack, launcher, world size, reuse mode,
seed, deadline), kept for the whole pytest session, so a hundred cases cost one launch. Under
``pytest -n N`` every xdist worker has its own groups; rendezvous uses private temp folders and
ports the OS chooses, so they never collide.

(PYTEST_DONT_REWRITE: the project's conftest imports this module before pytest could rewrite it.)
"""

from __future__ import annotations

import atexit

import pytest

__harness_hidden__ = True

_SESSIONS: dict = {}


class HarnessRetentionWarning(UserWarning):
    """Registries grew during a case and keep dead models' state alive (see the retention oracle)."""


def add_options(parser) -> None:
    from harness.runner.options import add_to_pytest

    add_to_pytest(parser.getgroup("harness", "FP8 id-reuse harness"))


def config_from(pytest_config, **overrides):
    """A validated RunConfig from the pytest options, with ``overrides`` (RunConfig fields) on top."""
    from harness.runner.options import Front, config_from_values, pytest_values

    return config_from_values(pytest_values(pytest_config), Front.PYTEST, **overrides)


def session_for(cfg):
    """The persistent session for ``cfg`` (created on first use, closed at exit)."""
    from harness.runner.session import open_session

    key = cfg.session_key()
    session = _SESSIONS.get(key)
    if session is None:
        session = _SESSIONS[key] = open_session(cfg, freeze=False)
    return session


def close_sessions() -> None:
    while _SESSIONS:
        _, session = _SESSIONS.popitem()
        session.close()


atexit.register(close_sessions)


def failure_text(report) -> str:
    ranks = ", ".join(map(str, report.ranks)) or "-"
    return (f"case {report.name!r} {report.outcome}: oracle {report.oracle} on rank(s) {ranks} "
            f"(all failing oracles: {', '.join(report.oracles)})\n{report.detail}\n\nreproduce: {report.repro}")


def check_case(report) -> None:
    """Fail the current test unless the case passed; a skipped case (the stack declines it)
    skips the test with its reason; each retention finding becomes a warning, worded as the
    report words it."""
    import warnings

    from harness.oracles.retention import RETENTION_NOTE, is_retention_warning

    __tracebackhide__ = True      # pytest points skips and failures at the test that called this
    if report.outcome == "skipped":
        pytest.skip(report.skip_reason)
    for line in report.warnings:
        warnings.warn(HarnessRetentionWarning(line if is_retention_warning(line) else f"{RETENTION_NOTE}{line}"))
    if report.outcome != "passed":
        pytest.fail(failure_text(report), pytrace=False)


@pytest.fixture(scope="session")
def harness_config(request):
    return config_from(request.config)


@pytest.fixture
def run_case(harness_config):
    """``run_case(case, **overrides) -> CaseReport`` on the persistent group for the configuration."""

    def run(case, cfg=None):
        return session_for(cfg or harness_config).run(case)

    return run


def pytest_sessionfinish(session, exitstatus):
    close_sessions()
