"""Sessions: a run configuration's cases, one by one, through one case pipeline.

``open_session(cfg)`` gives a :class:`Session` (a :class:`~harness.runner.pipeline.CasePipeline`
over the backend the configuration asks for); ``run(cfg)`` runs every case of ``cfg`` in one
session and returns the :class:`~harness.report.model.RunReport`. The CLI uses :func:`run`;
the pytest plugin keeps one session per configuration and sends it one case per test; stress
runs batches of generated cases through :func:`run` and shrinks through a session.
"""

from __future__ import annotations

from typing import Protocol

from harness.errors import HarnessError
from harness.report.model import CaseReport, RunReport
from harness.runner.config import Launcher, RunConfig
from harness.runner.interrupts import Interrupted, interruptible
from harness.runner.pipeline import CasePipeline, GroupLost
from harness.stacks import run_info

__harness_hidden__ = True


class Session(Protocol):
    def run(self, case) -> CaseReport | None:
        """Run and judge one case (None on an SPMD rank other than 0, which does not judge)."""

    def close(self) -> None:
        """End every process the session started and remove what it left behind."""


def open_session(cfg: RunConfig, events=None, spmd=None, freeze: bool = True, stack=None) -> CasePipeline:
    """A session for ``cfg``: in this process, on a controlled rank group, or as one rank of an
    SPMD launch (``spmd``: the :class:`~harness.runner.spmd_env.SpmdEnv` this process runs in).
    ``freeze=False`` leaves this process's objects in the collector's sight (a pytest process,
    which goes on after the session). ``stack``: the stack the caller loaded for ``cfg.sut`` (it is
    loaded here when not given), handed down so that a process loads its stack once."""
    if spmd is not None:
        from harness.runner.spmd import SpmdBackend
        backend = SpmdBackend(cfg, spmd, stack)
    elif cfg.launcher is Launcher.INPROC:
        from harness.runner.inproc import InprocBackend
        backend = InprocBackend(cfg, freeze=freeze, stack=stack)
    else:
        from harness.runner.controlled import GroupBackend
        backend = GroupBackend(cfg, events, stack)
    return CasePipeline(cfg, backend, events)


def run_cases(session: Session, cases, report: RunReport, on_case=None) -> None:
    """Run ``cases`` one by one; after each, ``on_case(report)`` (the reports are rewritten there).
    Marks the report complete when every case ran."""
    for case in cases:
        case_report = session.run(case)
        if case_report is None:
            continue
        report.cases.append(case_report)
        if on_case is not None:
            on_case(report)
    report.complete = True


def run(cfg: RunConfig, on_case=None, events=None, spmd=None, stack=None) -> RunReport | None:
    """Every case of ``cfg`` in one session. SIGINT or SIGTERM stops the run: the ranks are
    ended and the report keeps every finished case, ``interrupted`` saying why."""
    launcher = spmd.launcher if spmd is not None else cfg.launcher.value
    report = RunReport(cfg.sut, launcher, cfg.world_size, cfg.seed, cfg.reuse.text())
    leader = spmd is None or spmd.rank == 0     # only rank 0 of an SPMD launch writes the reports
    with interruptible() as signals:
        session = None
        try:
            session = open_session(cfg, events, spmd, stack=stack)
            report.stack_info = run_info(cfg.sut, cfg.world_size)
            run_cases(session, cfg.cases, report, on_case)
        except Interrupted as exc:
            report.interrupted = f"controller received {exc.args[0]}"
            # Said before the clean-up starts; from here on a further signal is noted and ignored.
            print(f"{exc.args[0]} received: stopping the ranks, then writing the reports "
                  "(a further signal is ignored until they are written)", flush=True)
        except GroupLost as exc:
            report.interrupted = str(exc)
            if exc.report is not None:
                report.cases.append(exc.report)
        except HarnessError as exc:
            # e.g. a replacement group that cannot start: the reports keep every finished case and say why
            report.interrupted = f"the run stopped: {exc}"
            raise
        finally:
            try:
                with signals.deferred():
                    if session is not None:
                        session.close()
            except Interrupted as exc:     # after the last case, while its group was stopped
                report.interrupted = f"controller received {exc.args[0]}"
            if report.interrupted and on_case is not None and leader:
                on_case(report)      # the reports say the run was interrupted, with every finished case
    return report if leader else None
