"""What a run is asked to do: one frozen, validated configuration, and every default of a run.

:class:`RunConfig` is built by the front ends (``python -m harness run``, the pytest plugin,
``python -m harness stress``) from the options declared once in :mod:`harness.runner.options`,
and by library callers directly. Its field defaults are the run's defaults; nothing else
defines one. Cross-field checks run in ``__post_init__`` (so ``dataclasses.replace`` checks
again); checks against this machine (memory, cores, launchers on PATH, writable report paths)
are :func:`harness.runner.machine.check_machine`, run by the front ends before any rank starts.

What a rank needs of it travels once, as :class:`~harness.runner.rank.settings.RankSettings`.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import TYPE_CHECKING

from harness.errors import UsageError
from harness.idreuse.morgue import ReusePolicy
from harness.runner.rank.settings import RankSettings

__harness_hidden__ = True

if TYPE_CHECKING:
    from harness.case.spec import CaseSpec


class Launcher(str, enum.Enum):
    """How the ranks of a group start."""

    INPROC = "inproc"        # this process, world size 1
    SPAWN = "spawn"          # the controller starts each rank itself (gloo on CPU)
    TORCHRUN = "torchrun"
    MPIRUN = "mpirun"

    __str__ = str.__str__
    __format__ = str.__format__

    @classmethod
    def parse(cls, text) -> "Launcher":
        try:
            return cls(text)
        except ValueError:
            raise UsageError(f"unknown launcher {text!r}: use one of {', '.join(m.value for m in cls)}") from None


DEFAULT_WORLD_SIZE = 2


@dataclasses.dataclass(frozen=True)
class RunConfig:
    sut: str = "emulated-patched"
    inject: str | None = None               # a bug to inject into a real stack ("id-hook")
    launcher: Launcher = Launcher.SPAWN
    world_size: int | None = None           # None: 1 for inproc, else DEFAULT_WORLD_SIZE
    seed: int = 0                           # changes every case's data
    reuse: ReusePolicy = ReusePolicy()
    strict: bool = False                    # retention findings fail the case
    deadline_s: float = 10.0                # every collective, buffer wait and precheck wait
    isolation: bool = True                  # re-run each case alone in a fresh process
    reset_between_cases: bool = False
    check_reference: bool = True
    precheck: bool = True                   # compare each collective's shape before issuing it
    ub_link_gbps: float | None = None       # the modelled Userbuffers link (None: as fast as the copy)
    oversubscribe: bool = False             # start more ranks than this machine can hold
    cases: tuple[CaseSpec, ...] = ()
    case_expr: str | None = None            # how the cases were chosen (repro commands repeat it)
    case_file: str | None = None
    faults: bool = False                    # the cases are the fault catalogue
    json_path: str | None = None
    junit_path: str | None = None

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)   # noqa: E731 (frozen)
        set_("launcher", Launcher.parse(self.launcher))
        if isinstance(self.reuse, str):
            set_("reuse", ReusePolicy.parse(self.reuse))
        if self.case_expr is not None and not self.case_expr.strip():
            raise UsageError(f"--cases {self.case_expr!r} selects nothing: leave --cases out to run every case")
        if self.world_size is None:
            set_("world_size", 1 if self.launcher is Launcher.INPROC else DEFAULT_WORLD_SIZE)
        set_("cases", tuple(self.cases))
        if not isinstance(self.world_size, int) or isinstance(self.world_size, bool) or self.world_size < 1:
            raise UsageError(f"--world-size must be an integer >= 1, got {self.world_size!r}")
        if self.launcher is Launcher.INPROC and self.world_size != 1:
            raise UsageError(f"--launcher inproc runs in this process: world size must be 1, got {self.world_size}")
        if isinstance(self.deadline_s, bool) or not isinstance(self.deadline_s, (int, float)) \
                or not (0 < self.deadline_s < math.inf):       # NaN and inf cannot be waited on
            raise UsageError(f"--deadline must be > 0 seconds and finite, got {self.deadline_s!r}")
        if self.reuse.mode == "asymmetric" and any(r >= self.world_size for r in self.reuse.ranks):
            raise UsageError(f"--reuse {self.reuse.text()}: ranks must be < world size {self.world_size}")
        if self.ub_link_gbps is not None:
            from harness.comm.link import positive_gbps

            positive_gbps(self.ub_link_gbps, f"--ub-link-gbps {self.ub_link_gbps}")
        if self.faults and self.case_file:
            raise UsageError("--faults and --case-file both choose the cases: give one of them")

    def replace(self, **changes) -> "RunConfig":
        return dataclasses.replace(self, **changes)

    def sut_options(self) -> dict | None:
        return {"inject": self.inject} if self.inject else None

    def rank_settings(self, reference_by_judge: bool = False) -> RankSettings:
        """What every rank of this run needs to know, sent to it once. ``reference_by_judge``: a
        controller on the ranks' host checks the reference (:mod:`harness.oracles.recorded`)."""
        return RankSettings(sut=self.sut, inject=self.inject, world_size=self.world_size, seed=self.seed,
                            reuse=self.reuse, strict=self.strict, deadline_s=float(self.deadline_s),
                            reset_between_cases=self.reset_between_cases, check_reference=self.check_reference,
                            precheck=self.precheck, ub_link_gbps=self.ub_link_gbps,
                            reference_by_judge=reference_by_judge,
                            isolate_alongside=self.isolation and self.world_size == 1)

    def session_key(self) -> tuple:
        """What makes two configurations share one persistent group (the pytest plugin's key)."""
        return (self.sut, self.inject, self.launcher, self.world_size, self.reuse.text(), self.seed,
                self.deadline_s, self.strict, self.isolation, self.precheck, self.ub_link_gbps,
                self.reset_between_cases, self.check_reference)


def field_default(name: str):
    """A field's default, for front ends that show it (help texts)."""
    field = RunConfig.__dataclass_fields__[name]
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory()   # pragma: no cover (no field has a factory)
