"""A cache of expensive results per input object (an artifact, a tensor, a config)."""

from __future__ import annotations

import weakref


class Artifact:
    def __init__(self, payload: str):
        self.payload = payload

    def digest(self) -> str:
        return f"digest({self.payload})"


class BuggyResultCache:
    """``id(obj) -> result``: after the object is collected, a new one at the same address hits."""

    def __init__(self):
        self.results: dict[int, str] = {}

    def digest(self, artifact: Artifact) -> str:
        return self.results.setdefault(id(artifact), artifact.digest())  # id-hazard: ok(buggy form, on purpose)

    def registries(self) -> dict:
        return {"result_cache.results": self.results}


class FixedResultCache:
    """Same id key, but the entry is pruned by a finalizer when the object dies."""

    def __init__(self):
        self.results: dict[int, str] = {}

    def digest(self, artifact: Artifact) -> str:
        key = id(artifact)
        if key not in self.results:
            self.results[key] = artifact.digest()
            weakref.finalize(artifact, self.results.pop, key, None)
        return self.results[key]

    def registries(self) -> dict:
        return {"result_cache.results": self.results}
