"""Pinning a natural-reuse failure to forced reuse (``harness/stress/shrink.py``, step 2).

The shrink group here is a fake: it judges a sequence by the reuse its cases run with. Under
natural reuse its outcome follows a script (what the allocator happened to do); under forced
reuse it is fixed: ``symmetric`` fails hygiene, ``asymmetric`` fails cross-rank.
"""

from __future__ import annotations

import time

import pytest

from harness.oracles.findings import Failure
from harness.report.model import CaseReport
from harness.report.stress_failure import Check, FailureRecord
from harness.runner.config import RunConfig
from harness.stress.explore import draw_batch
from harness.stress.shrink import Budget, FailureContext, Shrink, Shrinker

SEED = 5


class _Group:
    def __init__(self, natural, forced=None):
        self.natural = list(natural)        # outcomes of the natural-reuse sequences, in turn
        self.forced = forced if forced is not None else {"symmetric": "hygiene", "asymmetric": "cross-rank"}
        self.start_s = 0.0
        self.runs: list[list] = []

    def run(self, cases):
        self.runs.append(list(cases))
        last = cases[-1]
        modes = {c.reuse or "natural" for c in cases}
        if modes == {"natural"}:
            oracle = self.natural.pop(0) if self.natural else None
        elif callable(self.forced):
            oracle = self.forced(cases)
        else:
            oracle = self.forced.get((last.reuse or "natural"))
        outcome = "failed" if oracle else "passed"
        return [CaseReport(last.name, outcome, oracle, [oracle] if oracle else [], [0] if oracle else [], 0,
                           f"{oracle} detail" if oracle else "",
                           failures=[Failure(oracle, f"{oracle} detail", rank=0)] if oracle else [])]

    def close(self):
        pass


WORLD = 1       # the shrinker's (below): the batch is drawn for it, as stress draws for its run


def _batch() -> list:
    return [c.with_(name=f"stress/b000/c{i:03d}") for i, c in enumerate(draw_batch(SEED, 60, world_size=WORLD))]


def _natural(case) -> bool:
    return case.reuse in ("", "natural")     # the run's --reuse is natural here


def _index(batch, wanted, before=lambda c: True) -> int:
    """The first case that is ``wanted`` and follows a case that is ``before``."""
    return next(i for i, c in enumerate(batch) if i and wanted(c) and before(batch[i - 1]))


def _shrinker(group) -> Shrinker:
    cfg = RunConfig(sut="emulated-buggy", launcher="inproc", world_size=WORLD)
    return Shrinker(cfg, Budget(60, 30), lambda _cfg: group, note=lambda _msg: None)


def _context(batch, index, oracle, prefix_len=0) -> FailureContext:
    # a failure without a signature of its own (its signature is its oracle): matched by its oracle
    failure = FailureRecord(n=1, oracle=oracle, signature=oracle, first_case=batch[index].name, found_s=0.0,
                            detail="", original=None)
    return FailureContext(failure, batch, SEED, 60, index, index - prefix_len)


def _shrink_at(group, batch, index, oracle, prefix_len=0):
    """The shrink's minimal case, the preceding cases kept, and what it says (as plain data)."""
    ctx = _context(batch, index, oracle, prefix_len)
    minimal, kept, info, pin = Shrink(_shrinker(group), ctx, time.monotonic() + 30).run()
    said = {k: v for k, v in info.to_dict().items() if v is not None}
    if pin is not None:
        said["reuse_pinned"] = pin
    return minimal, kept, said


def _shrink(group, oracle, prefix_len=0):
    """A case of two models or more, it and the ``prefix_len`` cases before it on natural reuse."""
    batch = _batch()
    index = next(i for i, c in enumerate(batch) if c.models >= 2 and i >= prefix_len
                 and all(_natural(b) for b in batch[i - prefix_len:i + 1]))
    return (batch[index],) + _shrink_at(group, batch, index, oracle, prefix_len)


@pytest.mark.parametrize("oracle, mode", [("hygiene", "symmetric"), ("cross-rank", "asymmetric")])
def test_a_natural_reuse_failure_is_pinned_to_the_forced_mode_that_fails_the_same_way(oracle, mode):
    # natural reuse: the failure came back once in the shrink group, then never again
    group = _Group([oracle])
    target, minimal, kept, info = _shrink(group, oracle)
    assert info["reuse_pinned"] == mode and info["reproducible"]
    assert minimal.reuse == mode and minimal.name == target.name and minimal.data_seed == target.data_seed
    # every candidate after the pin ran pinned; the shrink reached the simplest case
    after_pin = group.runs[2 if mode == "asymmetric" else 1:]
    assert after_pin and all(c.reuse in ("symmetric", "asymmetric") for seq in after_pin for c in seq)
    assert (minimal.models, minimal.steps, minimal.model.dims) == (1, 1, (8, 8))


def test_a_failure_that_never_came_back_is_pinned_after_the_cases_before_it():
    # alone and after its two preceding cases, natural reuse passes; pinned, it fails alone
    group = _Group([None, None])
    target, minimal, kept, info = _shrink(group, "hygiene", prefix_len=2)
    assert info["reuse_pinned"] == "symmetric" and kept == [] and "note" not in info
    assert [len(seq) for seq in group.runs[:3]] == [1, 3, 1]


def test_a_failure_that_needs_another_case_is_pinned_after_the_one_before_it():
    # like an isolation finding: forced reuse fails it only where a case before it parked ids
    group = _Group([None, None], forced=lambda cases: "isolation" if len(cases) >= 2 else None)
    target, minimal, kept, info = _shrink(group, "isolation", prefix_len=3)
    assert info["reuse_pinned"] == "symmetric" and len(kept) == 1 and kept[0].name == "stress/b000/c%03d" % (
        int(target.name[-3:]) - 1)
    assert kept[0].reuse == "symmetric"
    # natural alone, natural after all three, then pinned: alone, after the one before it
    assert [len(seq) for seq in group.runs[:4]] == [1, 4, 1, 2]


def test_no_pin_where_forced_reuse_does_not_fail_the_same_way():
    group = _Group([None], forced={"symmetric": "isolation", "asymmetric": None})
    target, minimal, kept, info = _shrink(group, "hygiene")
    assert "reuse_pinned" not in info and not info["reproducible"] and minimal == target
    assert info["note"] == "did not fail again from a fresh state: not shrunk"
    assert [c.reuse for seq in group.runs for c in seq] == [target.reuse, "symmetric", "asymmetric"]


def test_a_forced_failure_after_natural_cases_is_not_pinned():
    # the case forces reuse and fails alone; the natural case before it is not needed
    group = _Group([], forced={"symmetric": "hygiene", "asymmetric": "hygiene"})
    batch = _batch()
    index = _index(batch, lambda c: c.reuse == "asymmetric", _natural)
    minimal, kept, info = _shrink_at(group, batch, index, "hygiene", prefix_len=1)
    assert "reuse_pinned" not in info and kept == [] and info["reproducible"]


def test_pinning_pins_the_natural_case_before_a_forced_one_and_runs_nothing_twice():
    # the case forces reuse, but fails only after the case before it parks ids (which it does
    # with natural reuse only where the allocator happens to)
    group = _Group([], forced=lambda cases: "isolation" if len(cases) >= 2 and cases[0].reuse == "symmetric" else None)
    batch = _batch()
    index = _index(batch, lambda c: c.reuse == "asymmetric", _natural)
    minimal, kept, info = _shrink_at(group, batch, index, "isolation", prefix_len=1)
    assert info["reuse_pinned"] == minimal.reuse and [c.reuse for c in kept] == ["symmetric"]
    # alone, after the case before it, then pinned after it; the target alone is not run again
    assert [[c.reuse for c in seq] for seq in group.runs[:3]] == [["asymmetric"], [batch[index - 1].reuse, "asymmetric"],
                                                                   ["symmetric", "asymmetric"]]


def test_a_case_before_it_that_forces_another_mode_is_aligned_with_the_pin():
    # an isolation finding that needs the case before it to have parked ids on every rank; that
    # case forces asymmetric reuse (the other rank quarantines what it parked)
    def rule(cases):
        return "isolation" if len(cases) >= 2 and [c.reuse for c in cases[-2:]] == ["symmetric"] * 2 else None

    group = _Group([None, None], forced=rule)
    batch = _batch()
    index = _index(batch, _natural, lambda c: c.reuse == "asymmetric")
    minimal, kept, info = _shrink_at(group, batch, index, "isolation", prefix_len=1)
    assert info["reuse_pinned"] == "symmetric" and [c.reuse for c in kept] == ["symmetric"]
    # pinned alone; after the case before it as it was; then with it aligned
    assert [[c.reuse for c in seq] for seq in group.runs[2:5]] == [["symmetric"], ["asymmetric", "symmetric"],
                                                                   ["symmetric", "symmetric"]]


def test_a_forced_failure_is_not_pinned():
    group = _Group([], forced={"symmetric": "hygiene", "asymmetric": "hygiene"})
    batch = _batch()
    index = _index(batch, lambda c: c.reuse == "asymmetric")
    minimal, kept, info = _shrink_at(group, batch, index, "hygiene")
    assert "reuse_pinned" not in info and minimal.reuse in ("symmetric", "asymmetric")


def test_the_repro_check_falls_back_from_the_pinned_form_to_the_one_found(tmp_path, monkeypatch):
    from harness.stress import shrink

    batch = _batch()
    index = _index(batch, lambda c: c.models >= 2 and _natural(c))
    target = batch[index]
    shrinker = _shrinker(_Group(["hygiene"]))
    checked = []

    def verify(argv, case_name, oracle, timeout_s, wanted=None):
        import json

        with open(argv[argv.index("--case-file") + 1]) as fh:
            reuse = json.load(fh)[-1]["reuse"]
        checked.append(reuse)
        ok = reuse == target.reuse     # the pinned form does not reproduce, the one found does
        return Check(reproduced=ok, exit_code=1 if ok else 0, oracle=oracle if ok else None, seconds=0.1)

    monkeypatch.setattr(shrink, "verify", verify)
    result = shrinker.reproduce(_context(batch, index, "hygiene"), str(tmp_path / "repro-1.json"))
    # the pinned form forces reuse: one run; the form found relies on natural reuse: three
    assert checked == ["symmetric"] + [target.reuse] * 3
    assert [a.reuse_pinned for a in result.attempts] == ["symmetric", None]
    assert [(a.runs, a.reproduced_runs) for a in result.attempts] == [(1, 0), (3, 3)]
    assert result.verified and result.reuse_pinned is None and result.kind == "unshrunk"
    assert result.spec.reuse == target.reuse


def test_a_natural_reuse_repro_that_fails_only_now_and_then_does_not_count_as_reproduced(tmp_path, monkeypatch):
    from harness.stress import shrink

    shrinker = _shrinker(_Group([None], forced={"symmetric": None, "asymmetric": None}))    # cannot be pinned
    batch = _batch()
    index = _index(batch, lambda c: c.models >= 2 and _natural(c))
    outcomes = [True, False]       # the allocator's mood in fresh processes; then no luck at all

    def verify(argv, case_name, oracle, timeout_s, wanted=None):
        ok = outcomes.pop(0) if outcomes else False
        return Check(reproduced=ok, exit_code=1, oracle=oracle if ok else "cross-rank", seconds=0.1)

    monkeypatch.setattr(shrink, "verify", verify)
    result = shrinker.reproduce(_context(batch, index, "hygiene"), str(tmp_path / "repro-1.json"))
    assert result.verified is False and result.reuse_pinned is None
    # the case as found: its second run missed, which ended the check; then the batch replay
    assert [(a.kind, a.runs, a.reproduced_runs) for a in result.attempts] == [
        ("unshrunk", 2, 1), ("batch replay", 1, 0)]
