"""Stacks whose protocol methods go wrong, for the tests of what a case then says
(tests/stacks/test_stack_errors.py): one whose ``snapshot`` raises from a function of this file,
one whose ``registries`` returns None. Otherwise the emulated patched stack."""

from __future__ import annotations

from harness.stacks.emulated.stack import EmulatedStack


def _read_state(model):
    raise ValueError("the state of this model cannot be read")


class SnapshotRaises(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "snapshot-raises"

    def snapshot(self, model):
        return _read_state(model)


class RegistriesNone(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "registries-none"

    def registries(self):
        return None


SNAPSHOT_RAISES = SnapshotRaises()
REGISTRIES_NONE = RegistriesNone()
