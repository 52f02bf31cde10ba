"""What a stack runs: its declared case space, and why it declines a case outside it.

A stack says what it runs with a ``capabilities`` attribute (a :class:`Capabilities`); a stack
without one runs every case the harness can describe (:data:`UNDECLARED`, the emulated stacks'
space, any scaling name accepted). Who reads it, and when:

* the runners, once per case and before the case goes to any rank: a case
  :func:`declined_reason` refuses is reported ``skipped`` with that reason, never run;
* the stress strategies (:mod:`harness.stress.strategies`), which draw only from the declared
  space, and the shrinker, which never runs a declined candidate;
* a stack's own build, where it refuses a model (``--sut te``: :mod:`harness.stacks.te.cases`),
  so the declaration is the one place that says what the stack runs.

Plain data and pure functions: nothing here imports a stack, torch or the runner (loading a
stack by name imports this module, and a run refuses bad input before torch is imported).
"""

from __future__ import annotations

import dataclasses
import enum
import types
from typing import Callable, Mapping, Optional

from harness.errors import UsageError
from harness.stacks.hooks import stack_name, traits


class Construction(enum.Enum):
    """How FP8 weights get their first value (``ModelSpec.construction``)."""

    COPY = "copy"
    INIT_CAST = "init_cast"


DELAYED = "delayed"
# The recipe formats by name (harness.fp8.recipe.Format's values; that module imports torch).
FORMATS = ("HYBRID", "E4M3", "E5M2")
# The keys a declaration may explain (``why``): one per check of declined_reason.
WHY_KEYS = ("world_size", "userbuffers", "scaling", "format", "recipe", "reduce_amax", "construction",
            "fp8_params", "data_parallel", "bias", "dims", "batch")
_BOTH = (False, True)


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """A stack's declared case space. Tuples are in the order stress prefers (first = simplest).

    ``formats`` are format names (``"HYBRID"``, ``"E4M3"``, ``"E5M2"``; ``Format`` members are
    accepted and stored by name).
    ``scalings=None`` accepts every scaling name (a stack that declares nothing) and stress draws
    ``"delayed"`` only. ``delayed_recipe=False``: the stack ignores the delayed recipe's margin,
    history length and compute algorithm (it scales from each tensor's own amax), so a case
    must leave them at :class:`DelayedScalingRecipe`'s defaults. ``dim_multiple`` and
    ``batch_multiple``: every layer width, and the batch, a multiple of it. ``why`` explains a
    refusal, by check (see :data:`WHY_KEYS`); the reason then carries it. ``declines(case,
    world_size) -> str | None`` says what the fields cannot (a combination of fields, a shape
    rule of one kind of model); it is asked after the fields, ``world_size`` None when unknown.
    """

    formats: tuple = FORMATS
    scalings: Optional[tuple] = None
    constructions: tuple = (Construction.COPY, Construction.INIT_CAST)
    fp8_params: tuple = (True, False)
    data_parallel: tuple = _BOTH
    bias: tuple = _BOTH
    userbuffers: tuple = _BOTH
    reduce_amax: tuple = (True, False)
    delayed_recipe: bool = True
    dim_multiple: int = 1
    batch_multiple: int = 1
    min_world_size: int = 1
    max_world_size: Optional[int] = None
    why: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False, hash=False)
    declines: Optional[Callable] = None

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)   # noqa: E731 (frozen)
        set_("formats", _format_names(self.formats))
        set_("constructions", _members(Construction, self.constructions, "constructions"))
        if self.scalings is not None:
            scalings = _tuple(self.scalings, "scalings")
            bad = [s for s in scalings if not isinstance(s, str) or not s.strip()]
            if bad:
                raise UsageError(f"stack capabilities: scalings must be non-empty names, got {bad[0]!r}")
            set_("scalings", scalings)
        for name in ("fp8_params", "data_parallel", "bias", "userbuffers", "reduce_amax"):
            values = _tuple(getattr(self, name), name)
            if any(not isinstance(v, bool) for v in values):
                raise UsageError(f"stack capabilities: {name} must hold true/false values, got {values!r}")
            set_(name, values)
        if not isinstance(self.delayed_recipe, bool):
            raise UsageError(f"stack capabilities: delayed_recipe must be true or false, got {self.delayed_recipe!r}")
        for name in ("dim_multiple", "batch_multiple", "min_world_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError(f"stack capabilities: {name} must be an integer >= 1, got {value!r}")
        top = self.max_world_size
        if top is not None and (not isinstance(top, int) or isinstance(top, bool) or top < self.min_world_size):
            raise UsageError(f"stack capabilities: max_world_size must be an integer >= min_world_size "
                             f"({self.min_world_size}) or None, got {top!r}")
        if not isinstance(self.why, Mapping):
            raise UsageError(f"stack capabilities: why must map check names to text, got {type(self.why).__name__}")
        unknown = sorted(set(self.why) - set(WHY_KEYS))
        if unknown:
            raise UsageError(f"stack capabilities: why has no check {unknown[0]!r}; checks: {', '.join(WHY_KEYS)}")
        if any(not isinstance(text, str) for text in self.why.values()):
            raise UsageError("stack capabilities: every why entry must be text")
        set_("why", types.MappingProxyType(dict(self.why)))
        if self.declines is not None and not callable(self.declines):
            raise UsageError(f"stack capabilities: declines must be a function (case, world_size) -> reason or None, "
                             f"got {type(self.declines).__name__}")

    # --- what stress draws from ------------------------------------------------------------
    def drawn_scalings(self) -> tuple:
        """The scalings stress draws: the declared ones, or delayed scaling for an undeclared stack."""
        return self.scalings if self.scalings is not None else (DELAYED,)

    def to_dict(self) -> dict:
        """Plain data for reports (``stress.json``'s config)."""
        return {"formats": list(self.formats), "scalings": list(self.drawn_scalings()),
                "any_scaling": self.scalings is None,
                "constructions": [c.value for c in self.constructions], "fp8_params": list(self.fp8_params),
                "data_parallel": list(self.data_parallel), "bias": list(self.bias),
                "userbuffers": list(self.userbuffers), "reduce_amax": list(self.reduce_amax),
                "delayed_recipe": self.delayed_recipe, "dim_multiple": self.dim_multiple,
                "batch_multiple": self.batch_multiple, "min_world_size": self.min_world_size,
                "max_world_size": self.max_world_size,
                "declines": getattr(self.declines, "__qualname__", None) if self.declines else None}


def capabilities_of(stack) -> Capabilities:
    """The stack's declaration, or :data:`UNDECLARED` for a stack that has none.

    Called by :func:`harness.stacks.load_stack` (a malformed declaration is refused there, exit 2)
    and by whoever decides on cases: the runners, stress.
    """
    caps = traits(stack).capabilities
    if caps is None:
        return UNDECLARED
    if not isinstance(caps, Capabilities):
        raise UsageError(f"stack {stack_name(stack)!r}: capabilities must be a "
                         f"harness.stacks.capabilities.Capabilities, got {type(caps).__name__}")
    return caps


# --- the decision --------------------------------------------------------------------------------
def world_declined_reason(caps: Capabilities, world_size: int) -> str | None:
    """Why the stack runs nothing at this world size, or None."""
    top = caps.max_world_size
    if world_size < caps.min_world_size or (top is not None and world_size > top):
        span = f"{caps.min_world_size} to {top}" if top is not None else f"{caps.min_world_size} or more"
        return _reason(caps, "world_size", f"world size {world_size} (it runs {span} ranks)")
    return None


def model_declined_reason(caps: Capabilities, model) -> str | None:
    """Why the stack does not build this ``ModelSpec`` (its shapes aside), or None."""
    if model.userbuffers not in caps.userbuffers:
        runs = "does not run" if model.userbuffers else "runs only"
        return _reason(caps, "userbuffers", f"userbuffers={_flag(model.userbuffers)} (it {runs} Userbuffers-style "
                                            f"tensor parallelism)")
    if caps.scalings is not None and model.scaling not in caps.scalings:
        return _reason(caps, "scaling", f"scaling={model.scaling!r} (it runs {', '.join(caps.scalings)})")
    recipe = model.recipe
    if recipe.fp8_format.value not in caps.formats:
        return _reason(caps, "format", f"fp8_format={recipe.fp8_format.value} (it runs {', '.join(caps.formats)})")
    if not caps.delayed_recipe:
        default = type(recipe)().to_dict()
        changed = [f"{name}={value}" for name, value in recipe.to_dict().items()
                   if name in ("margin", "amax_history_len", "amax_compute_algo") and value != default[name]]
        if changed:
            return _reason(caps, "recipe", f"recipe {', '.join(changed)} (it has no amax history, margin or compute "
                                           f"algorithm: leave them at their defaults)")
    if recipe.reduce_amax not in caps.reduce_amax:
        return _reason(caps, "reduce_amax", f"reduce_amax={_flag(recipe.reduce_amax)} (it runs "
                                            f"{_flags(caps.reduce_amax)} only)")
    construction = _member(Construction, model.construction)
    if construction not in caps.constructions:
        return _reason(caps, "construction", f"construction={model.construction!r} (it runs "
                                             f"{', '.join(c.value for c in caps.constructions)})")
    for name in ("fp8_params", "data_parallel", "bias"):
        value = getattr(model, name)
        if value not in getattr(caps, name):
            return _reason(caps, name, f"{name}={_flag(value)} (it runs {_flags(getattr(caps, name))} only)")
    return None


def shape_declined_reason(caps: Capabilities, dims, batch: int | None = None) -> str | None:
    """Why the stack refuses these layer widths (or this batch), or None."""
    m = caps.dim_multiple
    if any(d % m for d in dims):
        return _reason(caps, "dims", f"dims {list(dims)} (every width a multiple of {m})")
    b = caps.batch_multiple
    if batch is not None and batch % b:
        return _reason(caps, "batch", f"batch {batch} (a multiple of {b})")
    return None


def declined_reason(caps: Capabilities, case, world_size: int | None = None) -> str | None:
    """Why a stack with declaration ``caps`` does not run ``case`` (at ``world_size``), or None.

    The one decision the runners take before a case goes to any rank: a reason makes the case
    ``skipped`` with it. Userbuffers-style cases also need two ranks, whatever the stack.
    """
    if world_size is not None:
        reason = world_declined_reason(caps, world_size)
        if reason is not None:
            return reason
        if case.model.userbuffers and world_size < 2:
            return (f"userbuffers=true at world size {world_size}: Userbuffers-style tensor parallelism needs "
                    f"at least 2 ranks")
    reason = model_declined_reason(caps, case.model) or shape_declined_reason(caps, case.model.dims, case.batch)
    if reason is None and caps.declines is not None:
        reason = caps.declines(case, world_size)
    return reason


def declined_by(stack, case, world_size: int) -> str | None:
    """The skip reason the runners report when ``stack`` declines ``case``, or None to run it.

    Called once per case by :meth:`harness.runner.pipeline.CasePipeline.run` (every session: in
    process, controller, SPMD) before the case goes to any rank.
    """
    reason = declined_reason(capabilities_of(stack), case, world_size)
    return f"{stack_name(stack)} declines this case: {reason}" if reason else None


# --- helpers -------------------------------------------------------------------------------------
def _reason(caps: Capabilities, check: str, what: str) -> str:
    why = caps.why.get(check)
    return f"{what}: {why}" if why else what


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _flags(values) -> str:
    return " or ".join(_flag(v) for v in values)


def _tuple(values, name: str) -> tuple:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise UsageError(f"stack capabilities: {name} must be a list of values, got {values!r}")
    values = tuple(values)
    if not values:
        raise UsageError(f"stack capabilities: {name} is empty (a stack must run something)")
    if len(set(values)) != len(values):
        raise UsageError(f"stack capabilities: {name} lists a value twice: {values!r}")
    return values


def _member(kind, value):
    if isinstance(value, kind):
        return value
    for member in kind:
        if str(value).lower() in (member.value.lower(), member.name.lower()):
            return member
    return None


def _format_names(values) -> tuple:
    """Format names from names (any case) or ``Format`` members, checked."""
    values = _tuple(values, "formats")
    names = tuple(getattr(v, "value", v) for v in values)
    names = tuple(n.upper() if isinstance(n, str) else n for n in names)
    bad = [v for v, n in zip(values, names) if n not in FORMATS]
    if bad:
        raise UsageError(f"stack capabilities: formats entry {bad[0]!r} is not one of {', '.join(FORMATS)}")
    if len(set(names)) != len(names):
        raise UsageError(f"stack capabilities: formats lists a value twice: {values!r}")
    return names


def _members(kind, values, name: str) -> tuple:
    values = _tuple(values, name)
    members = tuple(_member(kind, v) for v in values)
    if None in members:
        bad = values[members.index(None)]
        raise UsageError(f"stack capabilities: {name} entry {bad!r} is not one of "
                         f"{', '.join(m.value for m in kind)}")
    if len(set(members)) != len(members):
        raise UsageError(f"stack capabilities: {name} lists a value twice: {values!r}")
    return members


# A stack that declares nothing runs every case the harness describes (any scaling name).
UNDECLARED = Capabilities()
