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

_SESSIONS: dict = {}


class HarnessRetentionWarning(UserWarning):
    """Registries grew during a case and keep dead models' state alive (see the retention oracle)."""


def add_options(parser) -> None:
    group = parser.getgroup("harness", "FP8 id-reuse harness")
    group.addoption("--sut", default="emulated-patched", help="stack under test (name or package.module:attr)")
    group.addoption("--inject", default=None, help="bug to inject into a real stack (id-hook)")
    group.addoption("--launcher", default="spawn", help="spawn, torchrun, mpirun or inproc")
    group.addoption("--world-size", type=int, default=None, help="ranks per group (default 2; inproc: 1)")
    group.addoption("--reuse", default="natural", help="off | natural | symmetric | asymmetric[:RANKS]")
    group.addoption("--seed", type=int, default=0, help="run seed")
    group.addoption("--deadline", type=float, default=10.0, help="seconds per collective or buffer wait")
    group.addoption("--harness-strict", action="store_true", help="retention findings fail cases")
    group.addoption("--no-isolation", action="store_true", help="skip the isolated re-run of each case")


def config_from(pytest_config, **overrides):
    """A validated RunConfig from the pytest options (and explicit overrides)."""
    from harness.idreuse.morgue import ReusePolicy
    from harness.runner.case_exec import RunOptions
    from harness.runner.config import RunConfig

    opt = pytest_config.getoption
    launcher = overrides.pop("launcher", opt("--launcher"))
    world = overrides.pop("world_size", opt("--world-size"))
    if world is None:
        world = 1 if launcher == "inproc" else 2
    inject = overrides.pop("inject", opt("--inject"))
    options = RunOptions(run_seed=overrides.pop("seed", opt("--seed")),
                         reuse=ReusePolicy.parse(overrides.pop("reuse", opt("--reuse"))),
                         strict=overrides.pop("strict", opt("--harness-strict")),
                         deadline_s=overrides.pop("deadline", opt("--deadline")))
    cfg = RunConfig(sut=overrides.pop("sut", opt("--sut")), sut_options={"inject": inject} if inject else {},
                    launcher=launcher, world_size=world, options=options,
                    isolation=overrides.pop("isolation", not opt("--no-isolation")))
    if overrides:
        raise TypeError(f"unknown overrides {sorted(overrides)}")
    return cfg.validate()


def session_for(cfg):
    """The persistent session for ``cfg`` (created on first use, closed at exit)."""
    key = (cfg.sut, tuple(sorted(cfg.sut_options.items())), cfg.launcher, cfg.world_size,
           cfg.options.reuse.text(), cfg.options.run_seed, cfg.options.deadline_s, cfg.options.strict, cfg.isolation)
    session = _SESSIONS.get(key)
    if session is None:
        if cfg.launcher == "inproc":
            from harness.runner.inproc import InprocSession
            session = InprocSession(cfg, freeze=False)
        else:
            from harness.runner.controller import CaseSession
            session = CaseSession(cfg)
        _SESSIONS[key] = session
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
    skips the test with its reason; retention findings become warnings."""
    import warnings

    __tracebackhide__ = True      # pytest points skips and failures at the test that called this
    if report.outcome == "skipped":
        pytest.skip(report.skip_reason)
    if report.warnings:
        warnings.warn(HarnessRetentionWarning(f"retention: {report.warnings[0]}"))
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
