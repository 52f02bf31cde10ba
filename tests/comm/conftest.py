"""Fixtures for the Userbuffers emulation tests.

* ``shm_prefix``: a private /dev/shm prefix per test; afterwards nothing with that prefix
  may be left (a leftover fails the test and is removed so it cannot leak into others),
  and no child process may be alive except the shared rank groups' ranks.
* ``rank_groups``: persistent spawned rank groups, one per world size, shared by the
  session (a rank costs seconds to start); a group broken by a test is replaced.
* ``store_path``: a FileStore path in the test's own temp dir (no rendezvous collisions
  under ``pytest -n``).
"""

from __future__ import annotations

import multiprocessing
import os

import pytest

from harness.comm import destroy_ub, leftover_segments, live_communicators, new_prefix, unlink_prefix
from harness.comm.spawn import RankGroup


class RankGroups:
    def __init__(self):
        self._groups: dict[int, RankGroup] = {}

    def get(self, world_size: int) -> RankGroup:
        group = self._groups.get(world_size)
        if group is None or group.broken is not None:
            group = RankGroup(world_size)
            self._groups[world_size] = group
        return group

    def processes(self) -> list:
        return [p for g in self._groups.values() if g.broken is None for p in g.processes]

    def close(self) -> None:
        for group in self._groups.values():
            group.close()


_GROUPS = RankGroups()


@pytest.fixture(scope="session")
def rank_groups():
    yield _GROUPS
    _GROUPS.close()


@pytest.fixture
def shm_prefix():
    prefix = new_prefix("fp8h-t")
    yield prefix
    destroy_ub([c for c in live_communicators() if c.prefix == prefix])
    left = leftover_segments(prefix)
    unlink_prefix(prefix)
    known = set(_GROUPS.processes())
    strays = [p for p in multiprocessing.active_children() if p not in known]
    assert not left, f"/dev/shm entries left behind by the test: {left}"
    assert not strays, f"child processes still alive after the test: {strays}"


@pytest.fixture
def store_path(tmp_path):
    return os.fspath(tmp_path / "store")
