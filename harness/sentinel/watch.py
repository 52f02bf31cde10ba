"""The per-test check: what the registries held before the test, the ids it took, and, after its
fixtures are torn down, which new entries outlived their objects (an error in teardown)."""

from __future__ import annotations

import gc
from typing import Callable, Optional

import pytest

from harness.sentinel.id_hook import IdWatch
from harness.sentinel.registries import Registries, describe_alive, tie_to_heap
from harness.sentinel.report import failure_message
from harness.sentinel.witness import Stale


class Watch:
    """Registered where tests run (the session itself, or each xdist worker).

    ``scanned``: names of registries the scan chose; one that cannot be looked up when
    collection ends is dropped with a note (``note``), while one named by hand is a usage error.
    ``late``: called once at the end with the entries whose objects died after their last test.
    """

    def __init__(self, registries: Registries, hook_id: bool, scanned: set[str],
                 note: Callable[[str], None], late: Callable[[list[Stale]], None]):
        self.registries = registries
        self.hook_id = hook_id
        self.scanned = scanned
        self.note = note
        self.late = late
        self.baseline: set[tuple[str, int]] = set()
        # What the registries held when the last test's teardown ended: the next test's baseline
        # (only reporting hooks run between the two), which saves a walk per test.
        self.after: Optional[set[tuple[str, int]]] = None
        self.ids = IdWatch(self._new_holders)
        self.watched: list[Stale] = []  # entries whose object was alive at teardown
        self.found: list[str] = []      # this test's findings, one line each, for its report

    def _new_holders(self, address: int) -> list[tuple[str, str]]:
        return [(name, where) for name, held, where in self.registries.ints()
                if held == address and (name, held) not in self.baseline]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        by_hand, kept = [], []
        for spec in self.registries.specs:
            problem = Registries([spec]).unresolved()
            if not problem:
                kept.append(spec)
            elif spec.name in self.scanned:
                self.note(f"not watched: {spec.name}: {problem[0]}")
            else:
                by_hand.extend(problem)
        if by_hand:
            raise pytest.UsageError("\n".join(by_hand))
        self.registries.specs = kept

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.ids.reset(item.nodeid)
        self.found = []
        self.baseline = self.after if self.after is not None else self.registries.present()
        self.after = None
        if self.hook_id:
            self.ids.start()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        # After the body (passed or not) and before fixture teardown: objects held by
        # fixtures are still alive and can be found in the heap.
        yield
        new = {address for name, address, _ in self.registries.ints() if (name, address) not in self.baseline}
        if new:
            tie_to_heap({a for a in new if a not in self.ids.witnesses}, self.ids.witnesses, self.ids.test)
            describe_alive([w for w in map(self.ids.witness, new) if w is not None])

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        # trylast: runs after pytest's own teardown has finalized the fixtures.
        self.ids.stop()
        if isinstance(getattr(item, "funcargs", None), dict):
            # pytest drops the fixture values right after the teardown hooks; dropping them
            # now lets finalized function-scoped fixture objects die before the check.
            item.funcargs = {}
        # One walk of the registries per phase: with thousands of ints in them, each costs ~1 ms.
        entries = list(self.registries.ints())
        if self._alive_newcomers(entries):
            # Only then: a full collection costs ~0.1 s with a big heap, and an entry whose
            # object is already dead, or one under watch, is judged by its weak reference.
            gc.collect()
            entries = list(self.registries.ints())
        present = {(name, address) for name, address, _ in entries}
        # A reuse counts if the stale entry is still there: code that checks and prunes
        # dead entries on lookup has handled it.
        reuses = [r for r in self.ids.reuses if (r.registry, r.address) in present]
        stale = reuses + self._judge_new_entries(entries) + self._judge_watched(present)
        self.ids.reset("")
        self.after = present
        if stale:
            self.found = [entry.headline(item.nodeid) for entry in stale]
            pytest.fail(failure_message(stale), pytrace=False)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        if call.when == "teardown" and self.found:
            # Travels with the report (to the xdist controller too): the session summary lists it.
            outcome.get_result().sentinel_findings = self.found
            self.found = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item):
        try:
            yield
        finally:
            self.ids.stop()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.ids.stop()
        if self.watched:
            gc.collect()
            self.late(self._judge_watched(self.registries.present()))

    def pytest_unconfigure(self) -> None:
        self.ids.stop()

    def _alive_newcomers(self, entries: list[tuple[str, int, str]]) -> bool:
        """Whether a new registry entry's object is still alive (it may be cyclic garbage)."""
        for name, address, _ in entries:
            if (name, address) not in self.baseline:
                witness = self.ids.witness(address)
                if witness is not None and witness.ref is not None and not witness.dead:
                    return True
        return False

    def _judge_new_entries(self, entries: list[tuple[str, int, str]]) -> list[Stale]:
        stale = []
        reused = {r.address for r in self.ids.reuses}
        for name, address, where in entries:
            if (name, address) in self.baseline or address in reused:
                continue
            witness = self.ids.witness(address)
            if witness is None or witness.ref is None:
                continue  # never tied to an object, or not weakly referenceable: ignored
            entry = Stale(name, address, where, witness)
            if witness.dead:
                stale.append(entry)
            else:
                self.watched.append(entry)
        return stale

    def _judge_watched(self, present: set[tuple[str, int]]) -> list[Stale]:
        if not self.watched:
            return []
        stale, still_alive = [], []
        for entry in self.watched:
            if (entry.registry, entry.address) not in present:
                continue  # pruned
            (stale if entry.witness.dead else still_alive).append(entry)
        self.watched = still_alive
        return stale
