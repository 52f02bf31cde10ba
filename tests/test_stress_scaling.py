"""The scaling figure's parts (``harness.bench.scaling``): CPU and GPU utilisation read from their
sources' text, and the summary's ratio to N times one group, which must also say when it is missed."""

from __future__ import annotations

import pytest

from harness.bench.scaling import (case_times, cpu_busy, cpu_times, gpu_utilisation, markdown, rate_after_startup,
                                   summarise)

STAT_A = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\nintr 1\n"
STAT_B = "cpu  250 0 100 900 50 0 0 0 0 0\ncpu0 1 1 1 1 1 0 0 0 0 0\n"


def test_cpu_busy_share_between_two_samples():
    a, b = cpu_times(STAT_A), cpu_times(STAT_B)
    assert a == (150, 1000) and b == (350, 1300)
    assert cpu_busy(a, b) == pytest.approx(200 / 300)
    assert cpu_busy(a, a) is None
    with pytest.raises(ValueError):
        cpu_times("intr 1\n")


def test_gpu_utilisation_skips_what_is_not_a_number():
    assert gpu_utilisation("87\n 12 \n[N/A]\n\n") == [87.0, 12.0]
    assert gpu_utilisation("") == []


def test_summary_scales_against_n_times_one_group_and_says_when_it_misses():
    runs = [{"groups": 1, "cases_per_s": 3.0, "cpu_mean": 0.1, "gpu_samples": [[40.0], [60.0]], "exit_code": 0},
            {"groups": 2, "cases_per_s": 5.4, "cpu_mean": 0.2, "gpu_samples": [[80.0]], "exit_code": 0},
            {"groups": 4, "cases_per_s": 6.0, "cpu_mean": 0.5, "gpu_samples": [[99.0, 97.0]], "exit_code": 0},
            {"groups": 8, "note": "not begun"}]
    rows = summarise(runs, ncores=16)
    assert [r["scaling"] for r in rows] == [1.0, 0.9, 0.5, None]
    assert [r["meets_target"] for r in rows] == [True, True, False, None]
    assert rows[0]["gpu_util_mean_pct"] == 50.0 and rows[0]["gpu_util_peak_pct"] == 60.0
    assert rows[2]["cpu_cores_busy"] == 8.0 and rows[2]["gpu_util_mean_pct"] == 98.0
    text = markdown(rows, {"command": "stress", "host": "h", "ncores": 16, "gpus": None, "load_start": 1.0})
    assert "| 4 | 0 | - | 6.0 | 0.5 |" in text and "not begun" in text
    # No one-group figure: no ratio is made up.
    assert all(r["scaling"] is None for r in summarise(runs[1:], ncores=16))
    # ... unless an earlier invocation's is given.
    assert [r["scaling"] for r in summarise(runs[1:], ncores=16, base_rate=3.0)] == [0.9, 0.5, None]


def test_rate_after_startup_counts_each_group_from_its_ranks_start_on():
    batches = [{"index": 0, "cases_run": 100, "duration_s": 45.0, "startup_s": 15.0},   # group 0: 100 in 30 s
               {"index": 1, "cases_run": 100, "duration_s": 40.0, "startup_s": 10.0},   # group 1: 100 in 30 s
               {"index": 2, "cases_run": 50, "duration_s": 25.0, "startup_s": 5.0},     # group 0 again: 50 in 20 s
               {"index": 3, "cases_run": 0, "duration_s": 9.0, "startup_s": 9.0}]       # started, ran nothing
    assert rate_after_startup(batches, groups=2) == pytest.approx(150 / 50 + 100 / 30, abs=1e-3)
    # Batches of one group run one after the other: their rates are not added up.
    assert rate_after_startup(batches[:1] + batches[2:3], groups=1) == pytest.approx(3.0)
    assert rate_after_startup(batches[3:], groups=2) is None


def test_summary_scales_the_rate_after_startup_apart_from_the_whole_runs():
    # One group finished its batch early (its whole-run rate counts the start-up), eight ran out
    # of budget: the two ratios differ, and each is against its own one-group figure.
    runs = [{"groups": 1, "cases_per_s": 2.0, "cases_per_s_after_startup": 3.5},
            {"groups": 8, "cases_per_s": 8.0, "cases_per_s_after_startup": 10.0}]
    rows = summarise(runs, ncores=16)
    assert [r["scaling"] for r in rows] == [1.0, 0.5]
    assert [r["scaling_after_startup"] for r in rows] == [1.0, round(10.0 / 28.0, 3)]
    assert summarise(runs[1:], ncores=16, base_after_startup=3.5)[0]["scaling_after_startup"] == round(10.0 / 28.0, 3)
    assert summarise(runs[1:], ncores=16)[0]["scaling_after_startup"] is None
    assert "| 8 | - | - | 8.0 | 0.5 | 10.0 | 0.357 |" in markdown(rows, {"command": "stress", "host": "h", "ncores": 16,
                                                                    "gpus": None, "load_start": 1.0})


def test_case_times_are_medians_of_the_cases_run_and_reach_the_table():
    cases = [{"outcome": "passed", "duration_s": 0.2, "wall_s": 0.3},
             {"outcome": "failed", "duration_s": 0.4, "wall_s": 1.9},
             {"outcome": "passed", "duration_s": 0.3, "wall_s": 0.9},
             {"outcome": "skipped", "duration_s": 0.0, "wall_s": 0.01}]   # not run: left out
    assert case_times(cases) == {"case_s_median": 0.3, "case_wall_s_median": 0.9}
    assert case_times([]) == {"case_s_median": None, "case_wall_s_median": None}
    rows = summarise([{"groups": 8, "cases_per_s": 8.0, **case_times(cases)}], ncores=16)
    assert (rows[0]["case_s_median"], rows[0]["case_wall_s_median"]) == (0.3, 0.9)
    text = markdown(rows, {"command": "stress", "host": "h", "ncores": 16, "gpus": None, "load_start": 1.0})
    assert "| 0.3 | 0.9 |" in text
