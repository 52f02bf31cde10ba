"""A case: one model configuration, trained for some steps, built and destroyed some times.

A case is plain data (it crosses process boundaries as a dict). ``models`` models are built
and destroyed in turn inside the case, the way TE's distributed tests build many models per
launch; each model trains ``steps`` steps on its own seeded data.

Scenarios:

* ``sequence``: model k is destroyed before model k+1 is built.

``cycles`` more models follow in a light loop (a long-lived process in one case: a communicator
through hundreds of operations, hundreds of builds and deaths; :mod:`harness.runner.rank.cycles`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from harness.errors import UsageError
from harness.fp8.recipe import DelayedScalingRecipe
from harness.case.model import ModelSpec

SPECIALS = ("none", "zero", "inf", "nan", "tiny", "huge")
SCENARIOS = ("sequence",)
CONSTRUCTIONS = ("init_cast", "copy")


@dataclasses.dataclass(frozen=True)
class CaseSpec:
    name: str
    model: ModelSpec
    batch: int = 8
    steps: int = 3
    models: int = 2
    scenario: str = "sequence"
    special: str = "none"       # special values injected into step 1's inputs, on every rank alike
    data_seed: int = 0
    fault: str = "none"         # fault injection (see harness.faults); "none" for regular cases
    reuse: str = ""             # id-reuse policy for this case; "" takes the run's --reuse
    cycles: int = 0             # models more after ``models``, in a light loop (harness.runner.rank.cycles)

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise UsageError("case name must be a non-empty string")
        for field, value, low in (("batch", self.batch, 1), ("steps", self.steps, 1), ("models", self.models, 1),
                                  ("cycles", self.cycles, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise UsageError(f"case {self.name!r}: {field} must be an integer >= {low}, got {value!r}")
        if self.scenario not in SCENARIOS:
            raise UsageError(f"case {self.name!r}: scenario {self.scenario!r} is not one of {', '.join(SCENARIOS)}")
        if self.special not in SPECIALS:
            raise UsageError(f"case {self.name!r}: special {self.special!r} is not one of {', '.join(SPECIALS)}")
        m = self.model
        if len(m.dims) < 2 or any((not isinstance(d, int)) or d < 1 for d in m.dims):
            raise UsageError(f"case {self.name!r}: model dims must be >= 2 positive integers, got {m.dims!r}")
        if m.construction not in CONSTRUCTIONS:
            raise UsageError(f"case {self.name!r}: construction {m.construction!r} is not one of {', '.join(CONSTRUCTIONS)}")
        # From JSON anything can come: a string lr fails deep inside a run, a string flag is truthy.
        for flag in ("fp8_params", "data_parallel", "userbuffers", "bias"):
            if not isinstance(getattr(m, flag), bool):
                raise UsageError(f"case {self.name!r}: model {flag} must be true or false, got {getattr(m, flag)!r}")
        if isinstance(m.lr, bool) or not isinstance(m.lr, (int, float)) or not math.isfinite(m.lr):
            raise UsageError(f"case {self.name!r}: model lr must be a finite number, got {m.lr!r}")

    @property
    def reruns_isolated(self) -> bool:
        """Whether the case gets an isolated re-run (where the run has isolation on): not a
        long-lived process (``cycles``). It starts from an empty stack, its communicators count
        from 0, and its repro is the case alone in a fresh process; a re-run alone would double the
        dearest case of the run (its models are most of the default run's) to compare a run that
        is already nearly one alone."""
        return not self.cycles

    # --- plain-data round trip -------------------------------------------------------------
    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["model"] = dict(dataclasses.asdict(self.model))
        d["model"]["dims"] = list(self.model.dims)
        d["model"]["recipe"] = self.model.recipe.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: Any) -> "CaseSpec":
        if not isinstance(data, dict):
            raise UsageError(f"a case spec must be a JSON object, got {type(data).__name__}")
        data = dict(data)
        _reject_unknown("case", data, {f.name for f in dataclasses.fields(cls)})
        if "name" not in data or "model" not in data:
            raise UsageError("a case spec needs at least 'name' and 'model'")
        model = data.pop("model")
        if not isinstance(model, dict):
            raise UsageError("case 'model' must be a JSON object")
        model = dict(model)
        _reject_unknown("model", model, {f.name for f in dataclasses.fields(ModelSpec)})
        recipe = model.pop("recipe", {})
        if not isinstance(recipe, dict):
            raise UsageError("model 'recipe' must be a JSON object")
        if "dims" not in model or not isinstance(model["dims"], (list, tuple)):
            raise UsageError("model 'dims' must be a list of integers")
        model["dims"] = tuple(model["dims"])
        try:
            spec = ModelSpec(recipe=DelayedScalingRecipe.from_dict(recipe), **model)
            return cls(model=spec, **data)
        except TypeError as exc:
            raise UsageError(f"malformed case spec: {exc}") from None

    def with_(self, **changes) -> "CaseSpec":
        return dataclasses.replace(self, **changes)


def _reject_unknown(what: str, data: dict, known: set) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise UsageError(f"unknown {what} field {unknown[0]!r}; known fields: {', '.join(sorted(known))}")
