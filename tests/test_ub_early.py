"""Userbuffers writes that land after their counter, or reads that come before it, on spawned ranks.

Known bad: ``tests/planted/early_ub_counter.py`` (a producer raises a chunk's counter, then copies
the chunk) and ``tests/planted/ub_waits_one_short.py`` (a consumer waits for one count too few).
Both read the right bytes nearly every time when nothing separates payload and counter; the
producer's counter store checks that its payload has landed, and the emulated stacks' counters
are staggered (``harness/comm/stagger.py``), so both are caught every run, and the report says
what happened: the counter came before the payload, the read before the write, with the rank,
the communicator, the chunk and the counts.
"""

from __future__ import annotations

import re
import shlex

from harness.case.catalog import userbuffers_cases
from harness.runner.config import RunConfig
from harness.runner.session import run
from tests.planted.runs import run_repro


def _run(sut: str, names: list[str]):
    cases = [c for c in userbuffers_cases() if c.name in names]
    return run(RunConfig(sut=sut, launcher="spawn", world_size=2, isolation=False, cases=cases, reuse="natural",
                         deadline_s=5.0))


def test_a_counter_raised_before_its_payload_fails_at_the_producer_every_time():
    report = _run("tests.planted.early_ub_counter:STACK", ["userbuffers/column", "userbuffers/row"])
    for case in report.cases:
        assert case.outcome == "failed" and case.oracle == "buffer-integrity", case.detail
        # the ring of each case: qkv (column forward) or fc1 (row backward), on both ranks
        comm = "'qkv' ring all-gather" if case.name == "userbuffers/column" else "'fc1' ring all-gather"
        for rank, peer in ((0, 1), (1, 0)):
            assert (f"userbuffers {comm}: rank {rank} raised counter data[{rank}][{rank}] in rank {peer}'s flags "
                    f"to 1 (its write #1 of chunk {rank}, operation #0) before the payload landed there: "
                    in case.detail), case.detail
        assert "the producer signalled before its write" in case.detail, case.detail
        assert "operation sequences have diverged" not in case.detail, case.detail
        assert "no chunk header: the producer never wrote this slot" not in case.detail, case.detail


def _one_short_case(report):
    [case] = report.cases
    assert case.outcome == "failed" and case.oracle == "buffer-integrity", case.detail
    assert "read before the producer's write landed" in case.detail, case.detail
    return case


def test_a_consumer_that_waits_one_count_too_few_reads_before_the_write_landed(tmp_path):
    report = _run("tests.planted.ub_waits_one_short:STACK", ["userbuffers/row"])
    case = _one_short_case(report)
    # rank, communicator, chunk and counts: the row layout's reduce-scatter on fc2 (forward) and
    # ring on fc1 (backward); in each operation one producer holds its counters (the stagger), so a
    # peer that waits one count short reads before that producer's write landed
    found = re.findall(r"userbuffers '(fc2|fc1)' (pipelined reduce-scatter|ring all-gather): read before the "
                       r"producer's write landed: rank (\d) read chunk (\d) from rank (\d) while counter "
                       r"data\[(\d)\]\[(\d)\] was (\d+), expected (\d+) \(the wait before the read ended "
                       r"(\d+) count\(s\) short\)", case.detail)
    assert found, case.detail
    for comm, op, reader, chunk, src, counter_src, slot, seen, expected, short in found:
        assert reader != src and counter_src == src and int(expected) - int(seen) == int(short) == 1, found
        assert chunk == (reader if comm == "fc2" else slot), found      # a reduce-scatter reads its own chunk
    assert "operation sequences have diverged" not in case.detail, case.detail
    assert "no chunk header" not in case.detail, case.detail
    # the printed command, run as printed, fails the same way
    assert shlex.split(case.repro)[shlex.split(case.repro).index("--cases") + 1] == "userbuffers/row"
    again, ran = run_repro(case.repro, tmp_path / "repro.json", timeout_s=180)
    assert again.returncode == 1, again.stdout + again.stderr
    assert ran["oracle"] == "buffer-integrity", ran
    assert "read before the producer's write landed" in again.stdout, again.stdout
