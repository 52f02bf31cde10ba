"""What a run is asked to do, validated once, shared by the CLI, pytest and the stress runner."""

from __future__ import annotations

import dataclasses
import json
import os

from harness.case.catalog import all_cases, builtin_cases, select_cases
from harness.case.spec import CaseSpec
from harness.errors import UsageError
from harness.idreuse.morgue import ReusePolicy
from harness.runner.case_exec import RunOptions

LAUNCHERS = ("inproc", "spawn", "torchrun", "mpirun")


@dataclasses.dataclass
class RunConfig:
    sut: str = "emulated-patched"
    sut_options: dict = dataclasses.field(default_factory=dict)
    launcher: str = "spawn"
    world_size: int = 2
    options: RunOptions = dataclasses.field(default_factory=RunOptions)
    cases: list = dataclasses.field(default_factory=list)
    case_expr: str | None = None
    isolation: bool = True
    case_file: str | None = None
    json_path: str | None = None
    junit_path: str | None = None
    artifacts_dir: str | None = None

    def validate(self) -> "RunConfig":
        if self.launcher not in LAUNCHERS:
            raise UsageError(f"unknown launcher {self.launcher!r}: use one of {', '.join(LAUNCHERS)}")
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise UsageError(f"--world-size must be an integer >= 1, got {self.world_size!r}")
        if self.launcher == "inproc" and self.world_size != 1:
            raise UsageError(f"--launcher inproc runs in this process: world size must be 1, got {self.world_size}")
        if not (0 < self.options.deadline_s < float("inf")):   # NaN and inf cannot be waited on
            raise UsageError(f"--deadline must be > 0 seconds and finite, got {self.options.deadline_s!r}")
        for path, flag in ((self.json_path, "--json"), (self.junit_path, "--junit")):
            if path:
                check_writable(path, flag)
        if self.options.reuse.mode == "asymmetric" and any(r >= self.world_size for r in self.options.reuse.ranks):
            raise UsageError(f"--reuse {self.options.reuse.text()}: ranks must be < world size {self.world_size}")
        return self


def check_writable(path: str, flag: str) -> None:
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a directory; give a file path")
    if not os.path.isdir(folder):
        raise UsageError(f"{flag} {path!r}: folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{flag} {path!r}: folder {folder!r} is not writable")


def load_case_file(path: str) -> list[CaseSpec]:
    """Case specs from a JSON file: one object or a list of them."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except OSError as exc:
        raise UsageError(f"--case-file {path!r}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--case-file {path!r} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    items = data if isinstance(data, list) else [data]
    return [CaseSpec.from_dict(item) for item in items]


def resolve_cases(case_expr: str | None, case_file: str | None = None, stack=None,
                  world_size: int | None = None) -> list[CaseSpec]:
    if case_file:
        cases = load_case_file(case_file)
    elif stack is not None and hasattr(stack, "builtin_cases"):
        cases = stack.builtin_cases()
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
