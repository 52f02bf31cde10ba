"""The built-in fault catalogue: each fault case followed by a normal case that must pass.

``python -m harness run --faults`` runs it (with any launcher: spawn, torchrun, mpirun), and
``cases/test_faults.py`` runs it under pytest. A fault case *fails* in the report, as it
should: the run is judged by :func:`check_fault_run`, which asks, for every fault, that the
case failed with the expected oracle on the faulty rank, with the cause and (for a hang) the
stuck rank's Python stack in the report, and that the normal case after it passed (the group
was recycled and still works).

The faulty rank is the last rank of the group, never rank 0 (rank 0 is the one that differs
in every real job: it prints, logs and writes reports).
"""

from __future__ import annotations

import dataclasses

from harness.case.spec import CaseSpec
from harness.errors import UsageError
from harness.fp8.recipe import DelayedScalingRecipe
from harness.oracles.findings import Failure
from harness.case.model import ModelSpec

PREFIX = "faults/"


@dataclasses.dataclass(frozen=True)
class FaultExpectation:
    kind: str
    oracles: tuple          # a finding of one of these oracles names the faulty rank
    cause: tuple            # ... and holds one of these substrings
    frames: tuple           # the faulty rank's Python stack (dump or traceback) shows one of these
    all_stacks: bool        # a hang: every live rank's stack dump must be in the report


# What each kind must look like in the report. Causes that a launcher other than spawn cannot
# know (torchrun and mpirun own the processes, so an exit status may not reach the controller)
# are accepted as "connection closed"; the rank is always named.
EXPECT = {
    "raise": FaultExpectation("raise", ("error",), ("InjectedFault",), ("trigger",), False),
    "exit": FaultExpectation("exit", ("liveness",), ("exited with code 3", "its connection closed"), (), False),
    "kill": FaultExpectation("kill", ("liveness",), ("killed by signal SIGKILL", "its connection closed"), (), False),
    # gloo's own timeout (the group's deadline) may end the receive first: then the rank reports
    # the timeout itself, with the traceback of the hang; otherwise the controller finds it hung.
    "hang-collective": FaultExpectation("hang-collective", ("liveness",), ("Timed out", "timed out", "hung"),
                                        ("_block_in_gloo_recv",), False),
    "hang-buffer": FaultExpectation("hang-buffer", ("liveness",), ("hung",), ("wait_forever_on_flag",), True),
    "spin": FaultExpectation("spin", ("liveness",), ("hung",), ("in trigger",), True),
    "segfault": FaultExpectation("segfault", ("liveness",), ("SIGSEGV", "Segmentation fault"), ("string_at",), False),
    "thread": FaultExpectation("thread", ("liveness",), ("non-daemon thread",), ("leftover-non-daemon",), False),
}


def _small_case(name: str, fault: str = "none", steps: int = 3) -> CaseSpec:
    recipe = DelayedScalingRecipe(amax_history_len=16)
    return CaseSpec(name=name, model=ModelSpec(dims=(16, 16), recipe=recipe), steps=steps, models=1, fault=fault)


def fault_case(kind: str, rank: int) -> CaseSpec:
    """The case that injects ``kind`` on ``rank`` (at model 0, step 1)."""
    if kind not in EXPECT:
        raise UsageError(f"unknown fault kind {kind!r}: use one of {', '.join(EXPECT)}")
    return _small_case(f"{PREFIX}{kind}", f"{kind}@{rank}")


def normal_case(kind: str) -> CaseSpec:
    """The normal case that runs right after fault ``kind`` and must pass."""
    return _small_case(f"{PREFIX}{kind}/next", steps=2)


def fault_catalogue(world_size: int, kinds=None) -> list[CaseSpec]:
    """Every fault case, each followed by its normal case; the last rank is the faulty one."""
    if world_size < 2:
        raise UsageError(f"--faults needs a world size >= 2 (a fault is seen by a peer), got {world_size}")
    out = []
    for kind in (kinds or EXPECT):
        out += [fault_case(kind, world_size - 1), normal_case(kind)]
    return out


def kind_of(case_name: str) -> str | None:
    if not case_name.startswith(PREFIX) or case_name.endswith("/next"):
        return None
    return case_name[len(PREFIX):]


def _stack_of(stacks: dict, rank: int) -> str:
    return stacks.get(rank) or stacks.get(str(rank)) or ""


def check_fault_case(report, kind: str, rank: int, world_size: int) -> list[str]:
    """Problems with one fault case's report (empty when it was reported as it must be)."""
    exp = EXPECT[kind]
    if report.outcome == "passed":
        return [f"{report.name}: passed, but rank {rank} had a {kind} fault"]
    problems = []
    failures = [Failure.from_dict(f) if isinstance(f, dict) else f for f in report.failures]
    mine = [f for f in failures if f.rank == rank and f.oracle in exp.oracles]
    if not mine:
        problems.append(f"{report.name}: no {'/'.join(exp.oracles)} finding names rank {rank} "
                        f"(findings: {', '.join(f'{f.oracle}@{f.rank}' for f in failures)})")
    elif not any(c in f.detail for f in mine for c in exp.cause):
        problems.append(f"{report.name}: the finding on rank {rank} does not give the cause "
                        f"(one of {', '.join(map(repr, exp.cause))}): {mine[0].detail[:200]!r}")
    stacks = (report.artifacts or {}).get("stacks", {})
    evidence = _stack_of(stacks, rank) + "\n".join(f.detail for f in failures if f.rank == rank)
    if exp.frames and not any(frame in evidence for frame in exp.frames):
        problems.append(f"{report.name}: rank {rank}'s Python stack is not in the report (looked for "
                        f"{', '.join(map(repr, exp.frames))})")
    if exp.all_stacks or (kind == "hang-collective" and stacks):
        for r in range(world_size):
            if not _stack_of(stacks, r):
                problems.append(f"{report.name}: no Python stack of rank {r} in the report")
    return problems


def check_fault_run(run_report) -> list[str]:
    """Problems with a run of the fault catalogue: each fault reported, each follow-up passed."""
    problems = []
    cases = run_report.cases
    for i, case in enumerate(cases):
        kind = kind_of(case.name)
        if kind is None:
            if case.name.endswith("/next") and case.outcome != "passed":
                problems.append(f"{case.name}: the normal case after a fault did not pass "
                                f"({case.outcome}, {case.oracle}): {case.detail[:300]}")
            continue
        rank = run_report.world_size - 1
        problems += check_fault_case(case, kind, rank, run_report.world_size)
        if i + 1 >= len(cases) or cases[i + 1].name != f"{case.name}/next":
            problems.append(f"{case.name}: no normal case ran after it")
    return problems
