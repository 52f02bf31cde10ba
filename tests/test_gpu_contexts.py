"""The fresh-context figure's parts (``harness.bench.gpu_contexts``): a row's rates from child
times, its ratio to K times one process, and the process structure itself run without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.bench.gpu_contexts import markdown, row, with_scaling

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_row_counts_failed_children_apart_and_takes_medians_of_the_rest():
    r = row("context", 2, [[0.3, 0, 0.01, 0.2, 0.09], [0.5, 0, 0.02, 0.3, 0.18], [0.4, 0, 0.03, 0.25, 0.12],
                           [9.0, 1, 0.5, 8.0, 0.5]], elapsed_s=2.0)
    assert (r["children"], r["failed"], r["children_per_s"]) == (4, 1, 1.5)
    assert (r["child_s_median"], r["child_s_p90"]) == (0.4, 0.5)
    assert (r["fork_s_median"], r["work_s_median"], r["exit_s_median"]) == (0.02, 0.25, 0.12)
    empty = row("context", 1, [], elapsed_s=1.0)
    assert (empty["children_per_s"], empty["child_s_median"]) == (0.0, None)


def test_scaling_is_against_k_times_the_same_works_one_process_figure():
    rows = with_scaling([row("context", 1, [[0.1, 0]] * 10, 1.0), row("context", 8, [[0.1, 0]] * 20, 1.0),
                         row("te", 4, [[0.1, 0]] * 20, 1.0)])
    assert [r["scaling"] for r in rows] == [1.0, 0.25, None]      # te has no one-process figure
    text = markdown(rows, {"command": "c", "host": "h", "ncores": 16, "gpus": None})
    assert "| context | fork | 8 | 20 | 0 | 20.0 | 0.25 |" in text
    # spawned workers are scaled against spawned workers' one-process figure only
    spawned = with_scaling(rows + [row("context", 2, [[0.1, 0]] * 10, 1.0, workers="spawn")])
    assert spawned[-1]["scaling"] is None


def test_dry_run_forks_the_workers_and_children_and_leaves_none(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness.bench.gpu_contexts", "--out", str(tmp_path), "--work", "cpu",
                           "--procs", "1,2", "--seconds", "0.5", "--sample-s", "0.2", "--workers", "fork",
                           "--workers", "spawn"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "gpu-contexts.json").read_text())
    rows = report["rows"]
    # the children create their contexts as --sut te's do, with one connection, and the report says so
    assert report["meta"]["cuda_device_max_connections"] == "1"
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in (tmp_path / "gpu-contexts.md").read_text()
    assert [(r["work"], r["workers"], r["procs"]) for r in rows] == [("cpu", "fork", 1), ("cpu", "fork", 2),
                                                                      ("cpu", "spawn", 1), ("cpu", "spawn", 2)]
    assert all(r["children"] > 0 and r["failed"] == 0 for r in rows)
    # each part of a child's time is measured
    assert all(0 <= r["fork_s_median"] and 0 <= r["work_s_median"] and 0 <= r["exit_s_median"] for r in rows)
    assert (tmp_path / "gpu-contexts.md").read_text().startswith("# fresh CUDA contexts")


@pytest.mark.parametrize("args, says", [(["--procs", "0"], "--procs"), (["--procs", "x"], "--procs"),
                                        (["--seconds", "0", "--work", "cpu"], "--seconds"),
                                        (["--max-connections", "-1", "--work", "cpu"], "--max-connections")])
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(tmp_path, args, says):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "harness.bench.gpu_contexts", "--out", str(out), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_asking_for_contexts_where_no_gpu_is_visible_is_refused_in_one_line(tmp_path):
    from harness.stacks.te_common import gpus

    if gpus.visible_gpus():
        pytest.skip("a GPU is visible here")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "harness.bench.gpu_contexts", "--out", str(out), "--work", "context"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no GPU visible" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not out.exists()
