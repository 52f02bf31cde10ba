"""The run options, declared once, and the three front ends that offer them.

Each :class:`Option` names the :class:`~harness.runner.config.RunConfig` field it sets, its
flag, how its text is parsed, its help, and which front ends offer it: ``run`` (``python -m
harness run``), ``pytest`` (the plugin's options) and ``stress`` (``python -m harness
stress``). Defaults are not declared here: an option left out leaves the field at its
``RunConfig`` default, except where an option names a front end's own default (the stress
run's seed is today's date, so every night differs). :func:`config_from_values` is the one way
a front end turns parsed options into a configuration.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import os
from typing import Any, Callable, Mapping

from harness.errors import UsageError
from harness.idreuse.morgue import ReusePolicy
from harness.runner.config import Launcher, RunConfig, field_default

__harness_hidden__ = True


class Front(str, enum.Enum):
    RUN = "run"
    PYTEST = "pytest"
    STRESS = "stress"


class Kind(enum.Enum):
    VALUE = "value"            # --flag VALUE
    SET = "set"                # --flag sets the field to True
    CLEAR = "clear"            # --no-flag sets the field to False


ALL = frozenset(Front)


@dataclasses.dataclass(frozen=True)
class Option:
    flag: str
    field: str
    help: str
    kind: Kind = Kind.VALUE
    parse: Callable[[str], Any] | None = None
    fronts: frozenset = ALL
    pytest_flag: str | None = None                          # where pytest already owns the name
    front_defaults: Mapping[Front, Callable[[], Any]] = dataclasses.field(default_factory=dict)

    def flag_for(self, front: Front) -> str:
        return self.pytest_flag if front is Front.PYTEST and self.pytest_flag else self.flag

    def help_for(self, front: Front) -> str:
        if front in self.front_defaults or self.kind is not Kind.VALUE or "(default" in self.help:
            return self.help
        default = field_default(self.field)
        return f"{self.help} (default {default.text() if isinstance(default, ReusePolicy) else default})"


def today_seed() -> int:
    return int(datetime.date.today().strftime("%Y%m%d"))


OPTIONS = (
    Option("--sut", "sut", "stack under test: emulated-patched, emulated-buggy, te, te-buggy, torchao, "
                           "or package.module:attr"),
    Option("--inject", "inject", "inject a bug into a real stack (torchao, te: id-hook)"),
    Option("--launcher", "launcher", "spawn, torchrun, mpirun, or inproc (this process, world size 1)",
           parse=Launcher.parse),
    Option("--world-size", "world_size", "ranks per group (default 2; 1 for inproc; under torchrun or mpirun: "
                                         "the ranks they started)", parse=int),
    Option("--reuse", "reuse", "id reuse: off | natural | symmetric | asymmetric[:RANKS]", parse=ReusePolicy.parse),
    Option("--seed", "seed", "run seed: changes every case's data (stress: default today's date, YYYYMMDD)",
           parse=int, front_defaults={Front.STRESS: today_seed}),
    Option("--deadline", "deadline_s", "seconds per collective or buffer wait",
           parse=float),
    Option("--strict", "strict", "retention findings fail the case", Kind.SET, pytest_flag="--harness-strict"),
    Option("--no-isolation", "isolation", "skip the isolated re-run of each case (stress: more cases a second "
                                          "where fresh processes are what limits them, no isolation oracle)",
           Kind.CLEAR, fronts=frozenset({Front.RUN, Front.PYTEST, Front.STRESS})),
    Option("--no-precheck", "precheck", "issue collectives without comparing their shapes across ranks first "
                                        "(a mismatch then reaches the backend: a crash or a hang, reported as such)",
           Kind.CLEAR),
    Option("--reset-between-cases", "reset_between_cases", "call the stack's reset() before each case", Kind.SET,
           fronts=frozenset({Front.RUN})),
    Option("--ub-link-gbps", "ub_link_gbps", "model the Userbuffers link at this many GB/s: a chunk reaches its "
                                             "peer no earlier than a link of that bandwidth would deliver it "
                                             "(default: $HARNESS_UB_LINK_GBPS, else as fast as the copy)",
           parse=float, fronts=frozenset({Front.RUN, Front.PYTEST})),
    Option("--oversubscribe", "oversubscribe", "start the ranks even when this machine cannot hold them "
                                               "(memory, or more than 8 ranks per core)", Kind.SET),
    Option("--cases", "case_expr", "select cases: a name, substring, glob or keyword expression",
           fronts=frozenset({Front.RUN})),
    Option("--case-file", "case_file", "JSON file with case specs instead of the built-in cases",
           fronts=frozenset({Front.RUN})),
    Option("--faults", "faults", "run the built-in fault catalogue (harness/faults/cases.py): each injected fault "
                                 "must be reported and the normal case after it must pass", Kind.SET,
           fronts=frozenset({Front.RUN})),
    Option("--json", "json_path", "write the JSON report here", fronts=frozenset({Front.RUN})),
    Option("--junit", "junit_path", "write JUnit XML here", fronts=frozenset({Front.RUN})),
)


def options_for(front: Front) -> tuple[Option, ...]:
    return tuple(o for o in OPTIONS if front in o.fronts)


def add_to_argparse(parser, front: Front) -> None:
    """Every option of ``front`` on an argparse parser; unset options stay None."""
    for o in options_for(front):
        if o.kind is Kind.VALUE:
            parser.add_argument(o.flag_for(front), dest=o.field, default=None, type=_argparse_type(o),
                                help=o.help_for(front))
        else:
            parser.add_argument(o.flag_for(front), dest=o.field, default=None, action="store_const",
                                const=o.kind is Kind.SET, help=o.help_for(front))


def add_to_pytest(group) -> None:
    """Every pytest option on the plugin's option group (``parser.getgroup("harness")``)."""
    for o in options_for(Front.PYTEST):
        if o.kind is Kind.VALUE:
            group.addoption(o.flag_for(Front.PYTEST), dest=f"harness_{o.field}", default=None,
                            type=_argparse_type(o), help=o.help_for(Front.PYTEST))
        else:
            group.addoption(o.flag_for(Front.PYTEST), dest=f"harness_{o.field}", default=None,
                            action="store_const", const=o.kind is Kind.SET, help=o.help_for(Front.PYTEST))


def pytest_values(pytest_config) -> dict:
    return {o.field: pytest_config.getoption(f"harness_{o.field}") for o in options_for(Front.PYTEST)}


def _argparse_type(o: Option):
    if o.parse in (None, int, float):
        return o.parse          # argparse's own message: "invalid int value: 'two'"
    import argparse

    def parse(text):
        try:
            return o.parse(text)
        except UsageError as exc:      # argparse shows its own one-line usage error
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = o.flag.lstrip("-")
    return parse


def config_from_values(values: Mapping[str, Any], front: Front, **fixed) -> RunConfig:
    """A validated configuration from parsed option values (None: not given) and ``fixed`` fields.

    The Userbuffers link falls back to ``$HARNESS_UB_LINK_GBPS``, so that the configuration
    (and the repro commands built from it) always says which link a run modelled.
    """
    chosen = {k: v for k, v in values.items() if v is not None}
    for o in options_for(front):
        if o.field not in chosen and front in o.front_defaults:
            chosen[o.field] = o.front_defaults[front]()
    if chosen.get("ub_link_gbps") is None:
        from harness.comm.link import ENV_LINK_GBPS, LinkModel

        if LinkModel.from_env().modelled:        # a bad $HARNESS_UB_LINK_GBPS is refused here
            chosen["ub_link_gbps"] = float(os.environ[ENV_LINK_GBPS])
    chosen.update(fixed)
    return RunConfig(**chosen)
