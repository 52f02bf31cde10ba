"""The stack protocol's optional half: every optional hook, declared once, with its default.

A stack may define any of the hooks below as an attribute or method of the same name; the harness
reads them in one place, :func:`traits`, into a frozen :class:`Traits` (a field is the stack's own
hook, or None where it has none and the default applies). Nothing else in the harness asks a stack
what it has. The required half (``name`` and the methods the harness calls on every model) is the
:class:`harness.stacks.protocol.Stack` protocol; :data:`REQUIRED` names it, derived from that class.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from harness.reference import expected_model

__harness_hidden__ = True


def _hook(doc: str):
    return dataclasses.field(default=None, metadata={"doc": doc})


@dataclasses.dataclass(frozen=True)
class Traits:
    """What a stack declares beyond the required protocol. Each field's ``metadata["doc"]`` says
    what the hook is and what the harness does without it (the README's list is checked against
    these fields)."""

    capabilities: Optional[Any] = _hook(
        "capabilities = harness.stacks.capabilities.Capabilities(...): the cases the stack runs (formats, "
        "scalings, constructions, shapes, world sizes, ...); a case outside it is reported skipped with the "
        "reason, and stress draws only from it. Default: every case.")
    expected_model: Optional[Callable] = _hook(
        "expected_model(case, run_seed, world_size, rank, model_index) -> harness.reference.ExpectedModel: the "
        "stack's own reference when its scaling is not TE's delayed scaling. Default: harness.reference.")
    builtin_cases: Optional[Callable] = _hook(
        "builtin_cases() -> list[CaseSpec]: the cases `run` selects from for this stack when no --case-file is "
        "given. Default: harness.case.catalog.builtin_cases().")
    all_cases: Optional[Callable] = _hook(
        "all_cases() -> list[CaseSpec]: what a --cases selection chooses from, when it differs from "
        "builtin_cases() (cases a plain run leaves out, like TE's Userbuffers family). Default: builtin_cases().")
    check_world_size: Optional[Callable] = _hook(
        "check_world_size(world_size) -> None: raise harness.errors.SetupError (one line) when this machine "
        "cannot run that many ranks of the stack; called before any rank starts. Default: no check.")
    gpu_count: Optional[Callable] = _hook(
        "gpu_count() -> int: the GPUs its ranks may use; `stress --groups` then gives each group GPUs of its own "
        "(world size >= 2) or spreads the groups over them (1). Default: the stack uses no GPU.")
    preload: Optional[Callable] = _hook(
        "preload() -> None: import what the stack's models need, once per rank, before the rank forks the "
        "zygote its isolated runs start from. It must not initialise CUDA. Default: nothing.")
    warm_child: Optional[Callable] = _hook(
        "warm_child(rank) -> None: in the fresh child an isolated run will use, before its case arrives, what "
        "every case starts with anyway (TE: the rank's GPU and CUDA context); nothing of a case. Default: nothing.")
    check_optimizer_step: Optional[Callable] = _hook(
        "check_optimizer_step(model, step) -> str | None: after each optimizer step, what the stack checks of "
        "its own state (a line is a `reference` failure at that step, None passes). Default: no check.")
    model_objects: Optional[Callable] = _hook(
        "model_objects(model) -> list: objects that must die with the model; the hygiene oracle checks them "
        "with weak references. Default: the model root and every torch.nn.Module reachable from it.")
    needs_one_host: Optional[Callable] = _hook(
        "needs_one_host(case) -> bool: whether the case's ranks must share one host (skipped, with the reason, "
        "when a launch spreads them over several). Default: every Userbuffers case does.")
    renews_group: Optional[bool] = _hook(
        "renews_group = True: the process group the stack receives is one made for it, destroyed at the end "
        "of every case and made anew before the next (harness.runner.rank.group_death); the stack takes each "
        "model's group from its BuildContext. Default: the default group, for the rank's life.")
    retained_on_purpose: Optional[Any] = _hook(
        "retained_on_purpose = {registry name: why}: registries (by their registries() name) that keep dead "
        "models' state on purpose (the emulated amax buffers, modelling TE's); their growth is a retention "
        "note, under --strict too, and any other growth a warning, a failure under --strict. Default: none.")

    # --- the defaults, where a caller wants one value whether or not the stack has the hook ------
    def reference(self) -> Callable:
        """What a model of this stack is compared with: its ``expected_model``, or the
        delayed-scaling reference (every comparison of a run asks here, so a stack's own
        expectation also bounds the long-lived loop's checks)."""
        return self.expected_model or expected_model

    def model_objects_of(self, model) -> list:
        return list(self.model_objects(model)) if self.model_objects is not None else []

    def one_host(self, case) -> bool:
        return bool(self.needs_one_host(case)) if self.needs_one_host is not None else case.model.userbuffers

    def kept_on_purpose(self) -> dict:
        return dict(self.retained_on_purpose or {})

    def check_world(self, world_size: int) -> None:
        if self.check_world_size is not None:
            self.check_world_size(world_size)


OPTIONAL = tuple(f.name for f in dataclasses.fields(Traits))


def traits(stack) -> Traits:
    """The optional hooks ``stack`` has (None for a hook it lacks, and for ``stack=None``).
    The one place the harness looks at what a stack has."""
    if stack is None:
        return Traits()
    return Traits(**{name: getattr(stack, name, None) for name in OPTIONAL})


def stack_name(stack, default: str = "the stack") -> str:
    """The stack's ``name``, or ``default`` for an object without one (a refused ``--sut``)."""
    return str(getattr(stack, "name", default))


def missing_members(obj, required) -> list[str]:
    """The names of ``required`` that ``obj`` lacks."""
    return [name for name in required if not hasattr(obj, name)]


def method_location(stack, method: str) -> str:
    """Where ``stack`` defines ``method``: ``Class.method at file:line`` (what a message about that
    method points the user to), or the class name alone where the source cannot be told."""
    import inspect
    import os

    cls = type(stack)
    func = inspect.unwrap(getattr(cls, method, None) or getattr(stack, method, None))
    code = getattr(func, "__code__", None)
    where = f"{cls.__name__}.{method}"
    if code is None:
        return where
    path = os.path.relpath(code.co_filename)
    return f"{where} at {code.co_filename if path.startswith('..') else path}:{code.co_firstlineno}"
