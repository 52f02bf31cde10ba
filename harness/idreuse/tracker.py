"""Which objects a model consists of, which of them died, and when a dead id comes back.

The harness walks a model's object graph once after it is built and records every object it
can weak-reference: *model objects* (the root, every object with a ``__dict__`` reachable
through attributes and containers, and the stack's reuse targets), *state* tensors (meta
histories, scales, saved casts), and the process groups and optimizers the model holds (a stack
may make them per model and key state on them). After the model is deleted and collected, the
hygiene oracle asks which of them are dead and whether any registry still holds their ids; the
reuse counter asks whether a newly built object took the id of a dead one.
"""

from __future__ import annotations

import dataclasses
import gc
import types
import weakref

import torch

__harness_hidden__ = True

_SKIP_TYPES = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
               weakref.ReferenceType, str, bytes, int, float, bool, type(None), torch.dtype, torch.device)


# What the walk records besides model objects and state tensors, by kind: objects a stack may make
# for one model and key state on, which die with it (a ProcessGroup is weakly referenceable).
_HELD_KINDS = ((torch.distributed.ProcessGroup, "group"),) if torch.distributed.is_available() else ()
_HELD_KINDS += ((torch.optim.Optimizer, "optimizer"),)

# What a tracked object of each kind was, in words (model objects and state are told by their path).
_KIND_WORDS = {"group": "a process group", "optimizer": "an optimizer"}


@dataclasses.dataclass
class TrackedObject:
    ident: int
    ref: weakref.ReferenceType
    kind: str          # "model", "state", "group" or "optimizer"
    desc: str          # type and path from the model root

    def alive(self) -> bool:
        return self.ref() is not None


def _desc(obj, path: str) -> str:
    if isinstance(obj, torch.Tensor):
        return f"{path} (Tensor {str(obj.dtype).replace('torch.', '')}{list(obj.shape)})"
    return f"{path} ({type(obj).__name__})"


def _kind(obj, model_ids: set[int]) -> str | None:
    """The kind a walked object is recorded as, or None for one that is walked through only."""
    if id(obj) in model_ids or isinstance(obj, torch.nn.Module):
        return "model"
    if isinstance(obj, torch.Tensor):
        return "state"
    return next((kind for cls, kind in _HELD_KINDS if isinstance(obj, cls)), None)


def walk_model(root, model_objects=(), reuse_targets=(), limit: int = 20000) -> list[TrackedObject]:
    """The model's objects and state tensors, reachable from ``root`` through attributes and containers.

    *Model objects* are the root, ``torch.nn.Module`` instances, whatever the stack lists in
    ``model_objects`` and the reuse targets; *state* is every other tensor; process groups and
    optimizers are recorded by their own kind (never a survivor or retained state: a group the
    harness hands every model lives on rightly). Other objects (recipes, configs) are walked
    through but not recorded: they are shared with the world outside the model and may rightly
    outlive it.
    """
    target_ids = {id(t) for t in reuse_targets}
    model_ids = {id(root)} | {id(o) for o in model_objects} | target_ids
    seen: set[int] = set()
    out: list[TrackedObject] = []
    stack = [(root, "model")]
    while stack and len(seen) < limit:
        obj, path = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP_TYPES):
            continue
        seen.add(id(obj))
        try:
            ref = weakref.ref(obj)
        except TypeError:
            ref = None
        kind = _kind(obj, model_ids)
        if ref is not None and kind is not None:
            out.append(TrackedObject(id(obj), ref, kind, _desc(obj, path)))
        if isinstance(obj, torch.Tensor):
            continue
        if isinstance(obj, dict):
            for k, v in obj.items():
                stack.append((v, f"{path}[{k!r}]"))
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for i, v in enumerate(obj):
                stack.append((v, f"{path}[{i}]"))
        elif hasattr(obj, "__dict__"):
            for k, v in vars(obj).items():
                stack.append((v, f"{path}.{k}"))
    return out


class Graveyard:
    """Ids of dead tracked objects in this process, with what they were: the reuse counter."""

    def __init__(self):
        self.dead: dict[int, str] = {}

    def bury(self, objects: list[TrackedObject], parked_ids: set[int]) -> dict[int, str]:
        """Record the dead (or parked, i.e. dead to the stack) objects; returns them."""
        newly = {}
        for o in objects:
            if not o.alive() or o.ident in parked_ids:
                newly[o.ident] = o.desc
        self.dead.update(newly)
        return newly

    def reuse_events(self, objects: list[TrackedObject]) -> list[tuple[str, str]]:
        """(new object, dead object) pairs where a new object took a dead object's id."""
        events = []
        for o in objects:
            old = self.dead.pop(o.ident, None)
            if old is not None:
                events.append((o.desc, old))
        return events


def collect() -> None:
    """Run the cyclic collector (objects in reference cycles die only here).

    Runners call :func:`freeze_imports` first, so a full collection walks only objects created
    since (the cases' own), not the hundred thousand objects torch creates at import.
    """
    gc.collect()


def freeze_imports() -> None:
    """Move every object alive now (modules, torch's globals) out of the collector's sight."""
    gc.collect()
    gc.freeze()


def what_it_was(desc: str, kind: str) -> str:
    """What a tracked object was, in words, from its kind and its path in the model: a process
    group, an optimizer, a weight, a master weight, a module, a tensor of the model's state."""
    if kind in _KIND_WORDS:
        return _KIND_WORDS[kind]
    path = desc.split(" (", 1)[0]
    if ".master" in path:
        return "a master weight"
    if ".weight" in path:
        return "a weight"
    if kind == "model":
        return "a model object" if " (Tensor " in desc else "a module"
    return "a tensor of the model's state"


class ActivationLog:
    """The tensors of a model's steps the harness sees (each step's input and output gradient,
    what ``forward_backward`` returned), by id while they live: a key found after the model died
    can then be named as an activation's id. An address two of them had in turn keeps the later."""

    def __init__(self):
        self._refs: dict[int, tuple[weakref.ReferenceType, str]] = {}

    def add(self, step: int, tensors: dict) -> None:
        for name, t in tensors.items():
            self._refs[id(t)] = (weakref.ref(t), _desc(t, f"{name} of step {step}"))

    def dead(self) -> dict[int, str]:
        """The ids of the logged activations that died, each with what it was."""
        return {ident: desc for ident, (ref, desc) in self._refs.items() if ref() is None}


def what_ids_were(tracked: list[TrackedObject], died_early: set[int], activations: dict[int, str]) -> dict[int, str]:
    """For each dead id, what it was the id of, in words (for hygiene's lines). An activation's id
    says so; an id of a model object that lived as long as its model is that object's (nothing
    else had its address meanwhile); one whose object died before its model did is not known
    (another object, an activation the harness did not see, may have been born there since)."""
    out = {}
    for o in tracked:
        if o.ident in activations:
            continue
        if o.ident in died_early:
            out[o.ident] = (f"what it was the id of is not known: {o.desc} died before its model did, and "
                            f"other objects may have had its address since")
        else:
            out[o.ident] = f"the id of {what_it_was(o.desc, o.kind)}"
    for ident, desc in activations.items():
        out[ident] = "the id of an activation"
    return out
