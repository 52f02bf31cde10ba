"""Which cases a run runs: the built-in catalogue, a stack's own, a case file, or the faults.

:func:`choose_cases` is the one place a run's selection (``--cases``, ``--case-file``,
``--faults``) becomes case specs; every front end calls it before any rank starts, so a
selection that matches nothing is one line and exit 2.
"""

from __future__ import annotations


from harness.case.catalog import all_cases, builtin_cases, select_cases
from harness.case.spec import CaseSpec
from harness.errors import UsageError
from harness.report.jsonfile import read_json
from harness.stacks.hooks import traits

__harness_hidden__ = True


def load_case_file(path: str) -> list[CaseSpec]:
    """Case specs from a JSON file: one object or a list of them."""
    data = read_json(path, "--case-file")
    items = data if isinstance(data, list) else [data]
    return [CaseSpec.from_dict(item) for item in items]


def resolve_cases(case_expr: str | None, case_file: str | None = None, stack=None,
                  world_size: int | None = None) -> list[CaseSpec]:
    """The cases a selection names, from a case file, the stack's catalogue or the built-in one
    (without a selection: the built-in cases a group of ``world_size`` ranks can run)."""
    if case_file:
        cases = load_case_file(case_file)
    elif case_expr and traits(stack).all_cases is not None:
        cases = traits(stack).all_cases()     # a selection may name cases a plain run leaves out
    elif traits(stack).builtin_cases is not None:
        cases = traits(stack).builtin_cases()
    elif case_expr:
        cases = all_cases()      # a selection may name recipes/no-reduce-amax too
    else:
        cases = builtin_cases(world_size)
    if not cases:
        raise UsageError(f"--case-file {case_file!r} holds no case" if case_file else "no case to run")
    if case_expr and any(c.name == case_expr for c in cases):
        return [c for c in cases if c.name == case_expr]
    names = [n.strip() for n in (case_expr or "").split(",") if n.strip()]
    if len(names) > 1 and all(any(c.name == n for c in cases) for n in names):
        # A list of exact names, run in the order given (how repro commands replay a sequence).
        by_name = {c.name: c for c in cases}
        return [by_name[n] for n in names]
    chosen = select_cases(cases, case_expr)
    if not chosen:
        raise UsageError(f"--cases {case_expr!r} matches no case; `python -m harness run --list` shows them all")
    return chosen


def fault_cases(world_size: int, case_expr: str | None) -> list[CaseSpec]:
    """The fault catalogue (``--faults``); a selected fault case brings its normal case along."""
    from harness.faults.cases import fault_catalogue

    cases = fault_catalogue(world_size)
    if case_expr:
        chosen = {c.name for c in select_cases(cases, case_expr)}
        cases = [c for c in cases if c.name in chosen or c.name.rsplit("/", 1)[0] in chosen]
        if not cases:
            raise UsageError(f"--cases {case_expr!r} matches no fault case; `python -m harness run --faults "
                             f"--list` shows them all")
    return cases


def choose_cases(cfg, stack) -> tuple[CaseSpec, ...]:
    """The cases ``cfg`` selects, every fault spec among them checked."""
    from harness.faults.inject import parse as parse_fault

    cases = fault_cases(cfg.world_size, cfg.case_expr) if cfg.faults else \
        resolve_cases(cfg.case_expr, cfg.case_file, stack, cfg.world_size)
    for case in cases:
        if case.fault not in ("none", ""):
            parse_fault(case.fault)
    return tuple(cases)
