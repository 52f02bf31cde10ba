"""A failure's signature is its identity fields, set by the oracle that found it; never its words.

Unit checks of :func:`harness.stress.signature.signature` on fields; then the oracles
themselves (hygiene, cross-rank, isolation, a stack's exception) on known-bad input, once as
they are and once with every message they write reworded: the signatures are the same.
"""

from __future__ import annotations

import dataclasses
import weakref

import pytest

from harness.oracles.findings import HOLDS_DEAD_ID, SURVIVOR, Failure
from harness.stress.signature import case_signature, same_failure, signature

CROSS = Failure("cross-rank", "whatever the words", rank=0,
                kind="CollectiveMismatch: registries differ between ranks before a collective",
                site="harness/stacks/emulated/amax_buffers.py reduce_and_update", collective="all_reduce")


def test_signature_is_made_of_fields():
    stale = Failure("hygiene", "x", rank=0, kind=HOLDS_DEAD_ID, registry="id_bookkeeping.AUTOCAST_TO_FP8_PARAMS")
    assert signature(stale) == "hygiene: id_bookkeeping.AUTOCAST_TO_FP8_PARAMS holds a dead id"
    assert signature(CROSS) == ("cross-rank: CollectiveMismatch: registries differ between ranks before a collective "
                                "(all_reduce) @ harness/stacks/emulated/amax_buffers.py reduce_and_update")
    alive = Failure("hygiene", "y", kind=SURVIVOR, holder="mod.LAST_MODEL")
    assert signature(alive) == "hygiene: survivor held by mod.LAST_MODEL"


def test_signature_tells_registries_sites_collectives_and_oracles_apart():
    stale = Failure("hygiene", "x", kind=HOLDS_DEAD_ID, registry="A")
    assert signature(stale) != signature(dataclasses.replace(stale, registry="B"))
    assert signature(CROSS) != signature(dataclasses.replace(CROSS, site="ub.py exchange"))
    assert signature(CROSS) != signature(dataclasses.replace(CROSS, collective="all_gather"))
    assert signature(CROSS) != signature(dataclasses.replace(CROSS, oracle="isolation"))
    # rank, step, model and the words do not enter it
    assert signature(CROSS) == signature(dataclasses.replace(CROSS, rank=1, step=3, model=2, detail="other words"))


def test_a_failure_of_the_run_alone_is_that_failure_and_a_real_isolation_difference_is_not():
    passed = dataclasses.replace(CROSS, oracle="isolation", passed_on="cross-rank", detail="failed by itself: ...")
    assert signature(passed) == signature(CROSS)
    differs = Failure("isolation", "z", kind="collective sequence differs from the isolated run",
                      site=CROSS.site, collective="all_reduce")
    assert signature(differs) != signature(CROSS)
    # the repro's check and the shrinker take the same failure by its signature
    wanted = signature(passed)
    assert same_failure(CROSS, "isolation", wanted) and same_failure(passed, "isolation", wanted)
    assert not same_failure(dataclasses.replace(CROSS, site="ub.py exchange"), "isolation", wanted)
    assert not same_failure(None, "isolation", wanted)
    # a failure without a signature of its own is matched by its oracle
    assert same_failure(Failure("hygiene", "anything"), "hygiene", None)
    assert not same_failure(Failure("error", "anything"), "hygiene", "hygiene")


# --- the oracles, reworded ------------------------------------------------------------------------
def _reword(text: str) -> str:
    return "REWORDED (" + text[::-1].upper() + ") at nowhere.py:1 nothing"


@pytest.fixture
def reworded(monkeypatch):
    """Every failure any oracle makes, from here on, says something else."""
    plain = Failure.__init__

    def init(self, *args, **kwargs):
        plain(self, *args, **kwargs)
        self.detail = _reword(self.detail)

    monkeypatch.setattr(Failure, "__init__", init)


def _stale_and_survivor():
    """Hygiene on a planted registry holding a dead id, and on a model object a global keeps."""
    from harness.oracles.hygiene import EntryOrigins, scan_registries, survivors
    from harness.idreuse.tracker import TrackedObject
    from harness.runner.rank.execute import HOLDS_DEAD_ID as KIND

    class Model:
        pass

    kept = Model()
    globals()["_KEPT_MODEL"] = kept
    try:
        dead_id = 0x7F37B9D3BF20
        scan = scan_registries(object(), {"planted.REGISTRY": {dead_id: "x"}}, {dead_id: "dead w"}, EntryOrigins(),
                               "c", 0)
        tracked = [TrackedObject(ident=id(kept), ref=weakref.ref(kept), kind="model", desc="model (Model)")]
        alive = survivors(tracked, set())
    finally:
        del globals()["_KEPT_MODEL"]
    return ([Failure("hygiene", f.line, model=0, kind=KIND, registry=f.registry) for f in scan.failures]
            + [Failure("hygiene", f.line, model=0, kind=SURVIVOR, holder=f.holder) for f in alive])


def _cross_rank_and_isolation():
    """A divergent collective between two ranks' ledgers, and the isolation findings of a run
    alone that failed by itself and of one whose collective sequence differs."""
    from harness.oracles.crossrank import divergence_failure
    from harness.oracles.isolation import isolation_failures
    from harness.runner.rank.result import RankResult

    def entry(seq, op, site):
        return {"seq": seq, "op": op, "group": [0, 1], "reduce": "MAX", "shapes": [[2]], "dtypes": ["float32"],
                "sites": [site, "b.py:2 g"]}

    a = [entry(0, "all_reduce", "amax.py:43 reduce"), entry(1, "all_reduce", "amax.py:43 reduce")]
    b = [entry(0, "all_reduce", "amax.py:43 reduce"), entry(1, "all_gather", "ub.py:9 exchange")]
    divergence = divergence_failure({0: a, 1: b})
    alone = RankResult(case="c", rank=0, collectives=a, digest="d" * 32)
    alone.failures = [divergence]
    passed = isolation_failures(RankResult(case="c", rank=0, collectives=a, digest="d" * 32), alone, 0)
    differs = isolation_failures(RankResult(case="c", rank=0, collectives=b, digest="e" * 32),
                                 RankResult(case="c", rank=0, collectives=a, digest="d" * 32), 0)
    return [divergence] + passed + differs


def _exception():
    """A stack's exception and the harness's own precheck error, as the case executor makes them."""
    from harness.collectives.precheck import CollectiveMismatch
    from harness.runner.rank.execute import exception_identity

    out = []
    for exc in (ValueError("bad shape 3"),
                CollectiveMismatch("collective #4 differs").identify("a collective differs between ranks",
                                                                      "amax.py reduce", "all_reduce")):
        try:
            raise exc
        except Exception as caught:
            out.append(Failure("error", f"{type(caught).__name__}: {caught}", rank=0, **exception_identity(caught)))
    return out


ORACLES = (_stale_and_survivor, _cross_rank_and_isolation, _exception)


@pytest.mark.parametrize("make", ORACLES, ids=lambda f: f.__name__.strip("_"))
def test_rewording_every_message_leaves_the_signatures(make, request):
    plain = make()
    assert plain and all(f.kind for f in plain)
    signatures = [signature(f) for f in plain]
    request.getfixturevalue("reworded")
    again = make()
    assert [f.detail for f in again] != [f.detail for f in plain]      # the words did change
    assert [signature(f) for f in again] == signatures


def test_the_oracles_set_what_tells_their_failures_apart():
    stale, alive = _stale_and_survivor()
    assert signature(stale) == "hygiene: planted.REGISTRY holds a dead id"
    assert signature(alive) == f"hygiene: survivor held by {__name__}._KEPT_MODEL"
    divergence, passed, differs = _cross_rank_and_isolation()[:3]
    assert signature(divergence) == "cross-rank: first divergent collective (all_reduce) @ amax.py reduce"
    assert signature(passed) == signature(divergence)
    assert signature(differs) == "isolation: collective sequence differs from the isolated run (all_gather) @ ub.py exchange"
    error, mismatch = _exception()
    assert signature(error).startswith("error: ValueError @ ") and signature(error).endswith(" _exception")
    assert signature(mismatch) == ("error: CollectiveMismatch: a collective differs between ranks (all_reduce) "
                                   "@ amax.py reduce")


def test_a_case_signature_is_its_primary_failures():
    from harness.report.model import verdict

    report = verdict("c", [Failure("hygiene", "h", rank=0, kind=HOLDS_DEAD_ID, registry="R"), CROSS],
                     reuse_events=0, repro="")
    assert report.oracle == "cross-rank" and case_signature(report) == signature(CROSS)
    assert case_signature(verdict("p", [], reuse_events=0, repro="")) is None


def test_a_run_reworded_gives_its_cases_the_same_signatures(request):
    """End to end, in this process: the buggy stack's cases through the case executor, the
    hygiene scan and the verdict, once as they are and once with every message reworded."""
    from harness.case.catalog import builtin_cases
    from harness.runner.config import RunConfig
    from harness.runner.session import run

    # cases the buggy stack fails whatever else a stress draw holds (hygiene, and isolation)
    cases = [c for c in builtin_cases() if c.name.startswith(("repro/", "reuse/copy", "delayed/hybrid-h1-max"))]
    cfg = RunConfig(sut="emulated-buggy", launcher="inproc", world_size=1, reuse="symmetric", cases=cases)

    def signatures():
        report = run(cfg, None)
        return [(c.name, c.oracle, case_signature(c)) for c in report.cases], [c.detail for c in report.cases]

    plain, words = signatures()
    assert any(oracle for _, oracle, _ in plain), "the buggy stack failed no case"
    request.getfixturevalue("reworded")
    again, new_words = signatures()
    assert new_words != words and again == plain
