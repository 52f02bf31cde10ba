"""A per-recipe state cache whose key is built from the ids of the quantizers in use."""

from __future__ import annotations


class Quantizer:
    def __init__(self, scale: float):
        self.scale = scale


class BuggyRecipeStateCache:
    """Key = tuple of ``id(q)``: replacing the quantizers frees them, and new quantizers at the
    same addresses reuse state computed for the old ones (a stale scale)."""

    def __init__(self):
        self.states: dict[tuple, tuple[float, ...]] = {}

    def state(self, quantizers: list[Quantizer]) -> tuple[float, ...]:
        key = tuple(id(q) for q in quantizers)  # id-hazard: ok(buggy form, on purpose)
        if key not in self.states:
            self.states[key] = tuple(q.scale for q in quantizers)
        return self.states[key]

    def registries(self) -> dict:
        return {"quantizer_key.states": self.states}


class FixedRecipeStateCache:
    """Key = the quantizers' values (what the state depends on), and the cache holds them."""

    def __init__(self):
        self.states: dict[tuple, tuple[float, ...]] = {}

    def state(self, quantizers: list[Quantizer]) -> tuple[float, ...]:
        key = tuple(q.scale for q in quantizers)
        if key not in self.states:
            self.states[key] = tuple(q.scale for q in quantizers)
        return self.states[key]

    def registries(self) -> dict:
        return {"quantizer_key.states": self.states}
