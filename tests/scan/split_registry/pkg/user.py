"""Stores into state._cache, reached through the module and through a name imported from it."""

from pkg import state
from pkg.state import _cache


def fill(t, v):
    state._cache[id(t)] = v


def fill_held(t, v):
    _cache[id(t)] = (t, v)
