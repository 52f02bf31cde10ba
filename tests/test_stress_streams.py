"""Shards and groups of a stress run: disjoint streams of one seed's batches, the same cases
every time, one failure signature, and the GPUs each group gets.

Pure functions and draws, in this process (no rank group starts); the end-to-end runs are in
``tests/test_stress_groups.py``.
"""

from __future__ import annotations


import pytest

from harness.errors import UsageError
from harness.stress.explore import canonical, draw
from harness.stress.groups import auto_groups, gpu_sets, parse_groups, split_cases, stack_gpus
from harness.stress.batch import batch_cases
from harness.stress.streams import Stream, group_stream, parse_shard
from harness.stacks.capabilities import UNDECLARED

SEED = 20261203


# --- streams -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text,want", [("0/4", (0, 4)), ("3/4", (3, 4)), (" 1 / 2 ", (1, 2)), ("0/1", (0, 1))])
def test_shard_parses(text, want):
    s = parse_shard(text)
    assert (s.index, s.count) == want


@pytest.mark.parametrize("text", ["4/4", "x", "1", "-1/4", "1/0", "0/-2", "1.5/4", "", "0/4/1"])
def test_a_bad_shard_is_one_usage_line(text):
    with pytest.raises(UsageError) as err:
        parse_shard(text)
    assert "\n" not in str(err.value) and "--shard" in str(err.value)


def test_shards_take_every_batch_number_once():
    taken = [Stream(i, 4).batch(j) for i in range(4) for j in range(25)]
    assert sorted(taken) == list(range(100))
    # The known-bad scheme (every shard counting its batches from 0) repeats them.
    naive = [j for i in range(4) for j in range(25)]
    assert len(set(naive)) < len(naive)


def test_shard_with_groups_is_the_shards_of_the_product():
    """--shard I/N --groups G runs what shards I + N*g of N*G run; --groups G alone, --shard g/G."""
    for n, g_count in ((1, 2), (4, 2), (3, 3)):
        for i in range(n):
            for g in range(g_count):
                s = group_stream(Stream(i, n), g_count, g)
                assert s == Stream(i + n * g, n * g_count)
        together = sorted(group_stream(Stream(i, n), g_count, g).batch(j)
                          for i in range(n) for g in range(g_count) for j in range(10))
        assert together == list(range(n * g_count * 10))
    assert Stream().batch(5) == 5          # no shard, one group: batches 0, 1, 2, ... as always


# --- the cases of a stream ----------------------------------------------------------------------
def repeated_pairs(cases) -> list:
    """(spec without its name, data seed) pairs that occur more than once among ``cases``."""
    seen, repeated = set(), []
    for c in cases:
        key = (canonical(c), c.data_seed)
        if key in seen:
            repeated.append(key)
        seen.add(key)
    return repeated


def _stream_cases(streams, batches=3, size=30):
    return [c for s in streams for j in range(batches)
            for c in batch_cases(SEED, s.batch(j), size, UNDECLARED, 2)[1]]


def test_no_case_and_data_seed_repeat_across_4_shards_times_3_batches():
    cases = _stream_cases([Stream(i, 4) for i in range(4)])
    assert len(cases) == 4 * 3 * 30
    assert repeated_pairs(cases) == []
    assert len({c.name for c in cases}) == len(cases)


def test_the_pair_check_finds_shards_that_overlap():
    overlapping = _stream_cases([Stream(0, 4), Stream(0, 4)], batches=1, size=10)
    assert len(repeated_pairs(overlapping)) == 10
    # Without the data seed the session gives, every batch starts with Hypothesis's simplest case.
    firsts = [draw(seed, 1).cases[0] for seed in (1, 2, 3)]
    assert len(repeated_pairs(firsts)) == 2


def test_a_batch_is_the_same_whatever_its_size():
    small = [canonical(c) for c in draw(SEED, 20).cases]
    large = [canonical(c) for c in draw(SEED, 120).cases]
    assert small == large[:20] and len(large) == 120
    a = batch_cases(SEED, 7, 15, UNDECLARED, 2)[1]
    b = batch_cases(SEED, 7, 40, UNDECLARED, 2)[1]
    assert a == b[:15]
    assert a != batch_cases(SEED, 8, 15, UNDECLARED, 2)[1]


# --- groups and GPUs ----------------------------------------------------------------------------
def test_groups_parse():
    assert parse_groups("auto") == "auto" and parse_groups("3") == 3
    for bad in ("0", "-1", "x", "1.5", ""):
        with pytest.raises(UsageError, match="--groups"):
            parse_groups(bad)


def test_groups_of_world_size_two_get_gpus_of_their_own():
    assert gpu_sets(2, 2, ["0", "1", "2", "3"]) == ["0,1", "2,3"]
    assert gpu_sets(4, 2, [str(i) for i in range(8)]) == ["0,1", "2,3", "4,5", "6,7"]
    assert gpu_sets(1, 3, ["0", "1", "2"]) == ["0,1,2"]
    with pytest.raises(UsageError) as err:
        gpu_sets(3, 2, ["0", "1", "2", "3"], "te")
    assert "needs 6 GPUs" in str(err.value) and "4 are visible" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UsageError):
        gpu_sets(2, 2, [], "te")


def test_groups_of_world_size_one_share_the_gpus():
    assert gpu_sets(8, 1, ["0"]) == ["0"] * 8
    assert gpu_sets(5, 1, ["0", "1"]) == ["0", "1", "0", "1", "0"]
    assert gpu_sets(3, 1, None) == [None, None, None]      # not on GPUs: nothing set


def test_gpu_names_follow_the_visible_devices():
    class Fake:
        def gpu_count(self):
            return 3

    assert stack_gpus(Fake(), {}) == ["0", "1", "2"]
    assert stack_gpus(Fake(), {"CUDA_VISIBLE_DEVICES": "5,6,7"}) == ["5", "6", "7"]
    assert gpu_sets(1, 2, stack_gpus(Fake(), {"CUDA_VISIBLE_DEVICES": "5,6,7"})) == ["5,6"]
    assert stack_gpus(object(), {}) is None


def test_auto_groups_and_case_split():
    assert auto_groups(1, 16, 1) == 8              # 16 cores // (1 + 1), one GPU shared
    assert auto_groups(2, 16, 8) == 4              # min(8 GPUs // 2, 16 // 3)
    assert auto_groups(2, 64, 4) == 2
    assert auto_groups(1, 2, None) == 1
    assert auto_groups(3, 2, None) == 1
    assert split_cases(10, 3) == [4, 3, 3] and split_cases(None, 2) == [None, None]
    assert sum(split_cases(7, 4)) == 7


def test_the_progress_line_counts_every_group_and_each_failure_once(tmp_path):
    from harness.report.stress_failure import FailureRecord
    from harness.report.stress_model import StressConfig, StressReport, Totals
    from harness.stress.groups import combined_totals, read_totals
    from harness.stress.record import StressRecord

    record = StressRecord(StressConfig("emulated-buggy", "inproc", 1, 1, "natural"), str(tmp_path))
    record.write_json()
    assert read_totals(str(tmp_path / "stress.json")).totals.cases == 0
    assert read_totals(str(tmp_path / "missing.json")) is None

    def part(cases, failing, reuse, signatures):
        failures = tuple(FailureRecord(n=i + 1, oracle=s.split(":")[0], signature=s, first_case="c", found_s=0.0,
                                       detail="", original=None) for i, s in enumerate(signatures))
        return StressReport(config=record.config, started_at="", failures=failures,
                            totals=Totals(cases=cases, failing_cases=failing, reuse_events=reuse))

    a = part(5, 2, 7, ["hygiene: R holds a dead id"])
    b = part(4, 1, 1, ["hygiene: R holds a dead id", "cross-rank: X @ f.py g"])
    t = combined_totals([a, b])
    assert (t.cases, t.failing_cases, t.failures, t.reuse_events) == (9, 3, 2, 8)
