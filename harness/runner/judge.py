"""Judging a case from every rank's results: the verdict, the repro command, what to recycle.

Pure functions over plain data, used by :class:`harness.runner.pipeline.CasePipeline` for
every kind of session (in-process, controlled group, SPMD):

* :func:`judge` -- every finding of a case: each rank's own, the group's (dead or hung ranks),
  cross-rank agreement of ledgers and all-reduced scales, the re-run alone's own buffer-integrity
  and reference findings, isolation against the re-run alone;
* :func:`case_report` -- the verdict (a :class:`~harness.report.model.CaseReport`) with its
  repro command (:func:`repro_command_for`);
* :func:`recycle_plan` -- what the group needs before the next case.
"""

from __future__ import annotations

import dataclasses
import enum
import shlex

from harness.oracles.crossrank import divergence_failure, drift_at_start, scale_disagreement
from harness.oracles.exercised import not_exercised
from harness.oracles.findings import COMMUNICATION, Failure, Oracle
from harness.oracles.hidden_state import name_hidden_state
from harness.oracles.isolation import alone_findings, isolation_failures
from harness.oracles.recorded import check_recorded, reported_records
from harness.report.model import CaseReport, group_digest, skipped, verdict
from harness.report.tensors import table

__harness_hidden__ = True


@dataclasses.dataclass
class GroupOutcome:
    """What running a case on every rank gave."""

    results: dict            # rank -> RankResult
    failures: list           # group-level failures (dead or hung ranks, a broken isolated run)
    broken: bool = False     # a rank died or hung: the group must be respawned
    artifacts: dict = dataclasses.field(default_factory=dict)

    def communication_failed(self) -> bool:
        """Some rank's case already failed in a way that leaves communication in doubt."""
        return any(f.oracle in COMMUNICATION for r in self.results.values() for f in r.failures)


def judge(case, shared: GroupOutcome, isolated: dict | None, world: int, expectation=None, previous=None) -> list:
    """Every finding of ``case``: the group's, each rank's, then cross-rank and isolation.

    ``expectation``: the case's reference (:class:`~harness.oracles.recorded.CaseExpectation`),
    against which the records of ranks that recorded their state instead of comparing it are
    checked here. ``previous``: the case that ran before it in this group (None after a
    recycle); registries that already differed between ranks when ``case`` began are that
    case's drift, and the finding says so first (:func:`inherited_drift`)."""
    results = shared.results
    failures = list(shared.failures)
    if len(results) == world:
        failures += inherited_drift(results, previous)
    recorded = [r for r in sorted(results) if results[r].states]
    alone_recorded = [r for r in sorted(isolated or {}) if isolated[r].states]
    if (recorded or alone_recorded) and expectation is None:
        raise ValueError(f"ranks {recorded or alone_recorded} recorded their FP8 state for the judge, "
                         f"but no expectation was given")
    for r in recorded:
        check_recorded(results[r], expectation)
        results[r].tensors = reported_records(results[r].states, expectation.digest(r)["layout"])
    for r in sorted(results):
        failures += results[r].failures
    if len(results) == world and not any(f.oracle == Oracle.CROSS_RANK for f in failures):
        ledgers = {r: results[r].collectives for r in results}
        divergence = divergence_failure(ledgers)
        truncated = divergence is not None and divergence.oracle == Oracle.LIVENESS
        if truncated and any(f.oracle in (Oracle.ERROR, Oracle.LIVENESS) for f in failures):
            pass    # a rank left the case early on a failure already reported; its short ledger adds nothing
        elif divergence is not None:
            # A ledger that merely stops early belongs to the rank that died or hung.
            failures.append(divergence)
        elif case.model.recipe.reduce_amax:
            text = scale_disagreement({r: results[r].meta_fingerprints for r in results})
            if text:
                failures.append(Failure(Oracle.CROSS_RANK, text, kind="all-reduced scales differ between ranks"))
    if isolated:
        for r in alone_recorded:       # the run alone's records, against the same reference
            check_recorded(isolated[r], expectation)
        for r in sorted(isolated):
            failures += alone_findings(isolated[r])
        for r in sorted(results):
            alone = isolated.get(r)
            if alone is not None:
                failures += isolation_failures(results[r], alone, r)
    name_hidden_state(failures, results, isolated)
    return failures


def inherited_drift(results: dict, previous=None) -> list:
    """A cross-rank failure charged to ``previous`` when the ranks' registries already differed
    as this case began (``RankResult.start_registries``), else nothing. The drift then also
    fails this case's first prechecked collective ("registries differ between ranks before
    collective #0"), which this finding explains."""
    lines = drift_at_start({r: results[r].start_registries for r in results})
    if not lines:
        return []
    culprit = f"the case before it, {previous.name}," if previous is not None else "what ran before it"
    return [Failure(Oracle.CROSS_RANK,
                    f"drift left by {previous.name if previous is not None else 'an earlier case'}: the registries "
                    f"already differed between ranks when this case began, before it built anything, so "
                    f"{culprit} left them apart:\n  " + "\n  ".join(lines),
                    left_by=previous.name if previous is not None else None,
                    kind="registries differed between ranks when the case began")]


def should_isolate(cfg, case, shared: GroupOutcome) -> bool:
    """Isolation compares a working case with itself alone; a case whose communication already
    failed has nothing to compare (its verdict stands on that failure), and a long-lived process
    is not re-run (:attr:`CaseSpec.reruns_isolated`)."""
    return cfg.isolation and case.reruns_isolated and not shared.broken and not shared.communication_failed()


def repro_argv(cfg, *, cases: str | None = None, case_file: str | None = None) -> list[str]:
    """The ``python -m harness run`` argv that runs ``cases`` (names) or ``case_file`` the way
    ``cfg`` did: same stack, launcher, world size, reuse, seed and every non-default setting."""
    argv = ["python", "-m", "harness", "run", "--sut", cfg.sut, "--launcher", cfg.launcher.value,
            "--world-size", str(cfg.world_size), "--reuse", cfg.reuse.text(), "--seed", str(cfg.seed)]
    if cases is not None:
        argv += ["--cases", cases]
    if cfg.inject:
        argv += ["--inject", cfg.inject]
    if case_file:
        argv += ["--case-file", case_file]
    if cfg.deadline_s != type(cfg).__dataclass_fields__["deadline_s"].default:
        argv += ["--deadline", f"{cfg.deadline_s:g}"]
    if cfg.strict:
        argv += ["--strict"]
    if not cfg.isolation:
        argv += ["--no-isolation"]
    if not cfg.precheck:
        argv += ["--no-precheck"]
    if cfg.ub_link_gbps is not None:
        # the modelled Userbuffers link changes when chunks arrive: part of what reproduces a failure
        argv += ["--ub-link-gbps", repr(cfg.ub_link_gbps)]
    return argv


def repro_command_for(cfg, case, previous=None, failures=()) -> str:
    """The command that reruns this case: alone, or after the case before it when the failure
    depends on what that case left behind (isolation: the previous model's ids; registries that
    case left apart between ranks: :func:`inherited_drift`)."""
    names = case.name
    if previous is not None and any(f.oracle == Oracle.ISOLATION or f.left_by for f in failures):
        names = f"{previous.name},{case.name}"
    return " ".join(shlex.quote(a) for a in repro_argv(cfg, cases=names, case_file=cfg.case_file))


def case_report(cfg, case, shared: GroupOutcome, failures: list, previous=None) -> CaseReport:
    """The verdict of ``case``, with every rank's counters summed (or the largest, per field).

    A passing case that needed id reuse and got none, or whose forced reuse of a module object did
    not land (:func:`~harness.oracles.exercised.not_exercised`), is ``skipped`` with that reason,
    its counters kept: its pass says nothing of the id-reuse path it was forced onto. Under
    ``--strict`` it fails instead (oracle ``exercised``)."""
    res = list(shared.results.values())

    def report(findings: list) -> CaseReport:
        return verdict(
            case.name, findings, reuse_events=sum(r.reuse_events for r in res),
            reuse_misses=sum(r.reuse_misses for r in res),
            shell_misses=[f"rank {rank}: {miss.line()}" for rank, r in sorted(shared.results.items())
                          for miss in r.shell_misses],
            repro=repro_command_for(cfg, case, previous, findings),
            warnings=sorted({w for r in res for w in r.warnings}),
            steps_compared=sum(r.steps_compared for r in res),
            models_built=max([r.models_built for r in res] or [0]),
            digest=group_digest(shared.results), duration_s=max([r.duration_s for r in res] or [0.0]),
            artifacts=shared.artifacts, forced_reuse=case.reuse,
            tensors=table({r: shared.results[r].tensors for r in shared.results}))

    first = report(failures)
    reason = not_exercised(case, cfg.reuse, first.outcome, first.reuse_events, first.reuse_misses,
                           first.shell_misses)
    if reason is None:
        return first
    if cfg.strict:
        return report(failures + [Failure(Oracle.EXERCISED, reason, kind="no id was reused")])
    return dataclasses.replace(first, outcome="skipped", skip_reason=reason)


def skipped_report(cfg, case, reason: str) -> CaseReport:
    """A case this run cannot run (the stack declines it, its ranks are on several hosts, ...)."""
    return skipped(case.name, reason, repro_command_for(cfg, case), forced_reuse=case.reuse)


class Recycle(enum.Enum):
    """What a group needs after a case, before the next one."""

    KEEP = "keep"                  # nothing: what the case left behind is what the next one meets
    REGISTRIES = "registries"      # empty the stack's registries; the process group is sound
    GROUP = "group"                # registries and a fresh process group, in the same processes
    RESPAWN = "respawn"            # a rank died or hung: new processes


def recycle_plan(shared: GroupOutcome, failures: list) -> Recycle:
    """After a failure that leaves communication in doubt (cross-rank, liveness, error) the group
    is recycled. Only prechecked mismatches (no gloo error, no dead or hung rank) leave the
    process group itself sound; anything else reached gloo and needs a fresh one.

    A shared run's buffer-integrity failure failed a Userbuffers operation, which leaves that
    communicator's counters out of step and refusing every later operation; the communicators
    outlive cases, so the next case would error on this one's failure. Emptying the registries
    (the stack's ``reset``) releases them, and the next case creates fresh ones."""
    if shared.broken:
        return Recycle.RESPAWN
    if not any(f.oracle in COMMUNICATION for f in failures):
        ub_failed = any(f.oracle == Oracle.BUFFER_INTEGRITY for r in shared.results.values() for f in r.failures)
        return Recycle.REGISTRIES if ub_failed else Recycle.KEEP
    gloo_touched = bool(shared.failures) or any(
        f.oracle in (Oracle.LIVENESS, Oracle.ERROR)
        or (f.oracle == Oracle.CROSS_RANK and f.rank is not None and "CollectiveMismatch" not in f.detail)
        for f in failures)
    return Recycle.GROUP if gloo_touched else Recycle.REGISTRIES
