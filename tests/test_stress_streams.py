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
from harness.stress.session import batch_cases
from harness.stress.signature import same_failure, signature
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


# --- the failure signature ----------------------------------------------------------------------
HYGIENE = ("[hygiene] rank 0, model 0: id_bookkeeping.AUTOCAST_TO_FP8_PARAMS[((('fp8_format', 'E4M3'), ('margin', 2)), "
           "(0, 1))] element holds id 0x7f37b9d3bf20 of dead model.layers[0].weight._data (Tensor uint8[64, 24])\n"
           "[hygiene] rank 1, model 0: id_bookkeeping.FP8_PARAM_TO_AUTOCAST key holds id 0x7f37b9d3b110 of dead x")
CROSS = ("[cross-rank] rank 0: CollectiveMismatch: registries differ between ranks before collective #42 (they agreed "
         "at collective #41 at harness/stacks/emulated/amax_buffers.py:43 reduce_and_update <- x.py:3 f):\n"
         "  id_bookkeeping.AUTOCAST_TO_FP8_PARAMS: rank 0: 4 keys, 8 entries (shape digest 1b0d78cae554); rank 1: 4 keys\n"
         "  rank 0: all_reduce MAX float32[6] at harness/stacks/emulated/amax_buffers.py:43 reduce_and_update <- a.py:1 g\n"
         "  rank 1: all_reduce MAX float32[6] at harness/stacks/emulated/amax_buffers.py:43 reduce_and_update <- a.py:1 g")


def test_signature_blanks_addresses_ids_sizes_and_names():
    moved = HYGIENE.replace("0x7f37b9d3bf20", "0x55aa00112233").replace("[64, 24]", "[8, 8]").replace("E4M3", "E5M2")
    assert signature("hygiene", moved) == signature("hygiene", HYGIENE)
    assert signature("hygiene", HYGIENE) == "hygiene: id_bookkeeping.AUTOCAST_TO_FP8_PARAMS holds a dead id"
    other = CROSS.replace("#42", "#7").replace("#41", "#6").replace("float32[6]", "float32[2]").replace(
        "1b0d78cae554", "a07bb2557b38").replace(":43", ":44")
    assert signature("cross-rank", other) == signature("cross-rank", CROSS)
    assert "amax_buffers.py reduce_and_update" in signature("cross-rank", CROSS)
    named = "[error] rank 1: ValueError: case stress/b004/c017 broke at step 3"
    assert signature("error", named) == signature("error", named.replace("b004/c017", "b100/c002").replace("3", "5"))
    mine = "[error] rank 1: ValueError: case my/own-case broke"
    assert signature("error", mine, ["my/own-case"]) == signature("error", mine.replace("my/own", "x/y"), ["x/y-case"])


def test_signature_tells_registries_call_sites_and_oracles_apart():
    assert signature("hygiene", HYGIENE) != signature("hygiene", HYGIENE.replace("AUTOCAST_TO_FP8_PARAMS", "OTHER", 1))
    elsewhere = CROSS.replace("amax_buffers.py:43 reduce_and_update <- a.py", "ub.py:9 exchange <- a.py")
    assert signature("cross-rank", elsewhere) != signature("cross-rank", CROSS)
    assert signature("isolation", CROSS) != signature("cross-rank", CROSS)
    alive = "[hygiene] rank 0: Model is still alive (held by mod.LAST_MODEL -> Model)"
    assert signature("hygiene", alive) != signature("hygiene", HYGIENE)
    assert signature("hygiene", alive) == signature("hygiene", alive.replace("rank 0", "rank 1"))


def test_a_failure_of_the_run_alone_is_that_failure_and_a_real_isolation_difference_is_not():
    # The buggy stack's cross-rank failure at its amax reduction, fired inside the isolated run:
    # the same bug as when it fires in the shared run, so the same failure.
    alone = ("[isolation] rank 0: the isolated run of this case failed by itself, so it cannot be compared: "
             + CROSS.replace("#42", "#25").replace("#41", "#24"))
    assert signature("isolation", alone) == signature("cross-rank", CROSS)
    assert signature("isolation", alone).startswith("cross-rank: CollectiveMismatch: registries differ")
    elsewhere = alone.replace("amax_buffers.py:43 reduce_and_update <- a.py", "ub.py:9 exchange <- a.py")
    assert signature("isolation", elsewhere) != signature("cross-rank", CROSS)
    differs = ("[isolation] rank 0: collective sequence differs from the isolated run at reduction point 2 "
               "(36 points after other cases, 42 alone)")
    assert signature("isolation", differs).startswith("isolation: collective sequence differs")
    # the repro's check and the shrinker take the same failure by its signature
    wanted = signature("isolation", alone)
    assert same_failure("cross-rank", CROSS, "my/case", "isolation", wanted)
    assert same_failure("isolation", alone, "my/case", "isolation", wanted)
    assert not same_failure("cross-rank", CROSS.replace("amax_buffers.py:43 reduce_and_update <- a.py",
                                                        "ub.py:9 exchange <- a.py"), "my/case", "isolation", wanted)
    assert not same_failure("hygiene", HYGIENE, "my/case", "isolation", wanted)
    assert not same_failure(None, "", "my/case", "isolation", wanted)
    # a failure without a signature of its own is matched by its oracle
    assert same_failure("hygiene", "anything", "my/case", "hygiene", None)
    assert not same_failure("error", "anything", "my/case", "hygiene", "hygiene")


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
    from harness.stress.groups import combined_totals, read_header
    from harness.stress.record import StressRecord

    record = StressRecord({"sut": "emulated-buggy", "capabilities": {}}, str(tmp_path))
    path = tmp_path / "stress.json"
    path.write_text(record.json_text())
    header = read_header(str(path))
    assert header["totals"]["cases"] == 0 and "cases" not in header
    a = {"totals": {"cases": 5, "failing_cases": 2, "reuse_events": 7},
         "failures": [{"oracle": "hygiene", "signature": "hygiene: R holds a dead id"}]}
    b = {"totals": {"cases": 4, "failing_cases": 1, "reuse_events": 1},
         "failures": [{"oracle": "hygiene", "signature": "hygiene: R holds a dead id"},
                      {"oracle": "cross-rank", "signature": "cross-rank: X @ f.py g"}]}
    assert combined_totals([a, b]) == {"cases": 9, "failing_cases": 3, "failures": 2, "reuse_events": 8}
    assert read_header(str(tmp_path / "missing.json")) is None


# A cross-rank failure as a rank reports it: where the ranks last agreed (a gradient sum), what
# differs, the collective each rank then issued (the amax reduction: where it failed), its traceback.
AGREED_AT_SUM = (
    "CollectiveMismatch: registries differ between ranks before collective #16 (they agreed at collective #15 at "
    "harness/stacks/data_parallel.py:22 sum_in_rank_order <- harness/stacks/emulated/model.py:45 sync_gradients <- "
    "harness/stacks/emulated/model.py:53 sgd_step <- harness/stacks/emulated/stack.py:84 optimizer_step):\n"
    "  id_bookkeeping.AUTOCAST_TO_FP8_PARAMS: rank 0: 1 keys, 12 entries (shape digest c1fe5a85eea7); rank 1: 1 keys, "
    "11 entries (shape digest 9c17165444ab)\n"
    "  id_bookkeeping.FP8_PARAM_TO_AUTOCAST: rank 0: 12 keys, 24 entries (shape digest 56d47c9805be); rank 1: 11 keys, "
    "22 entries (shape digest 3b5738ac8f29)\n"
    + "".join(f"  rank {r}: all_reduce MAX float32[24] at harness/stacks/emulated/amax_buffers.py:43 reduce_and_update "
              f"<- harness/stacks/emulated/autocast.py:38 fp8_autocast <- harness/stacks/emulated/model.py:29 "
              f"forward_backward\n" for r in (0, 1))
    + '  File "harness/stacks/emulated/amax_buffers.py", line 43, in reduce_and_update\n'
      "    dist.all_reduce(contiguous_amax, op=dist.ReduceOp.MAX, group=group)")


def test_a_cross_rank_failure_passed_on_by_isolation_keeps_where_it_failed():
    # The isolation oracle passes on the run alone's failure; the finding, read as a stress
    # failure, is the failure that fires in a shared run: the collective the ranks issued
    # (reduce_and_update), not where they last agreed (sum_in_rank_order). Cut at 600
    # characters, it lost those lines and read as another failure.
    from harness.oracles.findings import Failure
    from harness.oracles.isolation import compare_runs
    from harness.runner.rank.result import RankResult

    shared = RankResult(case="c", rank=0)
    alone = RankResult(case="c", rank=0)
    alone.failures = [Failure("cross-rank", AGREED_AT_SUM, rank=0)]
    (line,) = compare_runs(shared, alone)
    assert "Traceback" not in line and 'File "' not in line
    finding = "[isolation] rank 0: " + line
    in_shared_run = "[cross-rank] rank 0: " + AGREED_AT_SUM
    assert signature("isolation", finding) == signature("cross-rank", in_shared_run)
    assert signature("isolation", finding).endswith("@ harness/stacks/emulated/amax_buffers.py reduce_and_update")
