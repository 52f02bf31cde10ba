"""Coordinates of this rank in a device mesh, cached per mesh."""

from __future__ import annotations

import weakref


class Mesh:
    def __init__(self, shape: tuple[int, ...], rank: int):
        self.shape, self.rank = shape, rank

    def coordinates(self) -> tuple[int, ...]:
        out, r = [], self.rank
        for size in reversed(self.shape):
            out.append(r % size)
            r //= size
        return tuple(reversed(out))


class BuggyCoordinateCache:
    """Keyed by ``id(mesh)``: a dead mesh's entry answers for the next mesh at its address."""

    def __init__(self):
        self.by_id: dict[int, tuple[int, ...]] = {}

    def coordinates(self, mesh: Mesh) -> tuple[int, ...]:
        key = id(mesh)  # id-hazard: ok(the buggy form of this reproducer, on purpose)
        if key not in self.by_id:
            self.by_id[key] = mesh.coordinates()
        return self.by_id[key]

    def registries(self) -> dict:
        return {"mesh_cache.by_id": self.by_id}


class FixedCoordinateCache:
    """Keyed by the mesh itself, weakly: the entry dies with the mesh."""

    def __init__(self):
        self.by_mesh: "weakref.WeakKeyDictionary[Mesh, tuple[int, ...]]" = weakref.WeakKeyDictionary()

    def coordinates(self, mesh: Mesh) -> tuple[int, ...]:
        if mesh not in self.by_mesh:
            self.by_mesh[mesh] = mesh.coordinates()
        return self.by_mesh[mesh]

    def registries(self) -> dict:
        return {"mesh_cache.by_mesh": dict(self.by_mesh)}
