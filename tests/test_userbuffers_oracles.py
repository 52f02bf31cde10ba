"""The Userbuffers cases inside the runner: integrity and liveness fail on known-bad input."""

from __future__ import annotations

from harness.case.catalog import userbuffers_cases
from harness.runner.config import RunConfig
from harness.runner.session import run


def _run(sut: str, reuse: str, names: list[str], deadline: float = 3.0, link_gbps: float | None = None):
    cases = [c for c in userbuffers_cases() if c.name in names]
    cfg = RunConfig(sut=sut, launcher="spawn", world_size=2, isolation=False, cases=cases, reuse=reuse,
                    deadline_s=deadline, ub_link_gbps=link_gbps)
    return run(cfg)


def test_mis_scaled_chunk_is_caught_by_buffer_integrity():
    report = _run("tests.stacks.scale_skew:INPUT_SCALE_SKEW", "natural", ["userbuffers/column"])
    case = report.cases[0]
    assert case.outcome == "failed", case.detail
    assert "buffer-integrity" in case.oracles, case.detail
    assert "qkv" in case.detail and "rank" in case.detail, case.detail


def test_a_buffer_integrity_failure_leaves_the_next_case_fresh_communicators():
    # A chunk that fails integrity fails its operation, which leaves the communicator's counters
    # out of step (poisoned). The communicators outlive cases, so unless the group is recycled
    # the next case that uses them errors on the first case's failure instead of being judged.
    names = ["userbuffers/column", "userbuffers/column-bias"]
    report = _run("tests.stacks.scale_skew:INPUT_SCALE_SKEW", "natural", names)
    assert [c.name for c in report.cases] == names
    for case in report.cases:
        assert case.outcome == "failed" and case.oracle == "buffer-integrity", case.detail
        assert "unusable after an earlier failure" not in case.detail, case.detail
        assert "qkv" in case.detail, case.detail


def test_patched_userbuffers_case_passes_bitwise():
    report = _run("emulated-patched", "symmetric", ["userbuffers/column", "userbuffers/row"])
    assert [c.outcome for c in report.cases] == ["passed", "passed"], [c.detail for c in report.cases]
    assert all(c.steps_compared > 0 for c in report.cases)


def test_buggy_stack_with_asymmetric_reuse_leaves_userbuffers_counters_out_of_step():
    report = _run("emulated-buggy", "asymmetric", ["userbuffers/column"])
    case = report.cases[0]
    assert case.outcome == "failed"
    assert case.oracle == "liveness", case.detail
    # The report names the communicator, the operation, the chunk and both ranks.
    assert "userbuffers 'qkv' ring all-gather: rank 1 waiting for chunk 0 from rank 0" in case.detail, case.detail
    assert "hygiene" in case.oracles


def test_a_modelled_link_reaches_every_rank_and_leaves_results_bitwise(monkeypatch):
    """The run's link reaches each rank's communicators with its settings: a slow link (50 kB/s,
    so a chunk of these cases is in flight for milliseconds) changes when chunks arrive, never
    what the consumers compute. The link of the controller's environment does not reach them
    past the configuration: it says no link, so the link is fast, and a bad value there is
    never read."""
    monkeypatch.setenv("HARNESS_UB_LINK_GBPS", "fast")
    report = _run("emulated-patched", "natural", ["userbuffers/column", "userbuffers/row"], deadline=10.0,
                  link_gbps=0.00005)
    assert [c.outcome for c in report.cases] == ["passed", "passed"], [c.detail for c in report.cases]
    report = _run("emulated-patched", "natural", ["userbuffers/column"], deadline=10.0)
    assert report.cases[0].outcome == "passed", report.cases[0].detail
    # A link of one byte a second: no chunk arrives within the deadline, on the ranks themselves.
    report = _run("emulated-patched", "natural", ["userbuffers/column"], deadline=2.0, link_gbps=1e-9)
    assert report.cases[0].oracle == "liveness", report.cases[0].detail


def test_the_reproducer_fails_the_same_way_on_a_modelled_link_and_its_repro_names_the_link():
    report = _run("emulated-buggy", "asymmetric", ["userbuffers/column"], link_gbps=0.001)
    case = report.cases[0]
    assert case.outcome == "failed" and case.oracle == "liveness", case.detail
    assert "userbuffers 'qkv' ring all-gather: rank 1 waiting for chunk 0 from rank 0" in case.detail, case.detail
    assert "--ub-link-gbps 0.001" in case.repro, case.repro


def test_a_consumer_that_reads_a_chunk_before_its_counter_says_so():
    report = _run("tests.planted.skips_ub_wait:STACK", "natural", ["userbuffers/column", "userbuffers/row"])
    for case in report.cases:
        assert case.outcome == "failed" and case.oracle == "buffer-integrity", case.detail
        assert "before its counter reached the expected value (counter " in case.detail, case.detail
        assert "the consumer did not wait for the producer's signal" in case.detail, case.detail
        assert "operation sequences have diverged" not in case.detail, case.detail
