"""Confidence, fifth round: each low-confidence hazard beside one of high confidence that
differs from it in the one respect the rule looks at (tests/scan/test_handed_once.py)."""

import builtins

import walks


class Walk:
    def __init__(self, fn, root):
        self.fn = fn
        self.root = root

    def run(self):
        return self.fn(self.root)


def install_visitor(fn):
    walks.VISITORS.append(fn)


# A nested function handed to a walk whose result the call drops or keeps in a local: the map
# lives for one call (low); the same function handed to a call whose name says it keeps it
# (high), or whose result the call returns (high).

def paths_by_id(config):
    found = {}

    def visit(value):
        if id(value) in found:
            return found[id(value)]
        found[id(value)] = value.path
        return None

    walks.walk_all(visit, config)
    return len(found)


def parents_by_id(config):
    parents = {}

    def visit(value):
        return parents.get(id(value))

    for child in config.children:
        parents[id(child)] = config
    walk = Walk(visit, config)
    walk.run()
    return len(parents)


def paths_installed(config):
    installed = {}

    def visit(value):
        if id(value) in installed:
            return installed[id(value)]
        installed[id(value)] = value.path
        return None

    install_visitor(visit)
    return len(installed)


def paths_returned(config):
    returned = {}

    def visit(value):
        if id(value) in returned:
            return returned[id(value)]
        returned[id(value)] = value.path
        return None

    return walks.walk_all(visit, config)


# Ids taken in the module body of objects the module's globals or an imported module hold (low);
# ids of what a call makes there, which can die at once (high).

_TYPES = (int, float, complex)
_BUILTIN_IDS = frozenset(id(v) for v in builtins.__dict__.values())
_TYPE_IDS = [id(t) for t in _TYPES]
_MADE_IDS = frozenset(id(m) for m in walks.make_values())


def is_builtin(fn):
    return id(fn) in _BUILTIN_IDS


def is_number_type(cls):
    return id(cls) in _TYPE_IDS


def is_made(value):
    return id(value) in _MADE_IDS
