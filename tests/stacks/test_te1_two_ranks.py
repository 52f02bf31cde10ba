"""The TE 1.x stack at world size 2, on the CPU, over the stand-in TE 1.x (tests/stacks/fake_te1):
each rank a process of its own (spawn), TE's amax reductions over gloo as where ranks share a
GPU. What these show: the weight-update check takes the amax the ranks' reduction returned (and
fails when it is given each rank's own instead), 1.12's map-keyed hook is a hygiene failure on
both ranks, and under ``--reuse asymmetric`` the hook reduction one rank runs and the other does
not is named before any rank blocks: rank, TE's call site, the model and step."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FAKE = pathlib.Path(__file__).parent / "fake_te1"
SUT = "tests.stacks.fake_te1_cpu:load"

pytestmark = pytest.mark.slow


def run(release: str, tmp_path, *args, **env) -> tuple[int, str, dict]:
    paths = [str(FAKE / "pkg"), str(FAKE / ("v" + release.replace(".", "_"))), str(ROOT)]
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **env)
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--sut", SUT, "--world-size", "2",
                           "--deadline", "30", "--json", str(report), *args],
                          cwd=ROOT, env=environ, capture_output=True, text=True, timeout=240)
    return proc.returncode, proc.stdout + proc.stderr, json.loads(report.read_text())


def failures(report: dict, oracle: str, rank: int | None = None) -> list[str]:
    return [f["detail"] for c in report["cases"] for f in c.get("failures") or []
            if f.get("oracle") == oracle and (rank is None or f.get("rank") == rank)]


def test_the_weight_check_takes_the_reduced_amax_at_world_size_2(tmp_path):
    # local-grads: no gradient sync, so the ranks' weights (and their amaxes) differ, and the
    # reduced amax is the larger one on both ranks
    rc, out, report = run("1.13", tmp_path, "--cases", "delayed/local-grads")
    assert rc == 0, out
    assert report["summary"]["passed"] == 1


def test_the_weight_check_fails_when_it_takes_each_ranks_own_amax(tmp_path):
    rc, out, report = run("1.13", tmp_path, "--cases", "delayed/local-grads", FAKE_TE1_LOCAL_AMAX="1")
    assert rc == 1, out
    found = " ".join(failures(report, "reference"))
    assert "layer0.weight" in found and "not the delayed-scaling update" in found, found


def test_1_12_at_world_size_2_keeps_dead_ids_on_both_ranks(tmp_path):
    rc, out, report = run("1.12", tmp_path, "--cases", "repro/hygiene")
    assert rc == 1, out
    for rank in (0, 1):
        mine = " ".join(failures(report, "hygiene", rank))
        assert "autocast_to_fp8_params" in mine and "fp8_param_to_autocast" in mine, (rank, mine)


def test_1_12_asymmetric_reuse_names_the_hook_reduction_one_rank_runs(tmp_path):
    rc, out, report = run("1.12", tmp_path, "--reuse", "asymmetric", "--cases", "repro/cross-rank")
    assert rc == 1, out
    found = " ".join(failures(report, "cross-rank"))
    assert "post_optimizer_step_fwd_amax_reduction" in found, found
    assert "(during te.reduce_and_update_fp8_tensors(forward=True, fp8_weights=True)" in found, found
    assert "model 1" in found and "fp8_autocast_exit" in found, found


def test_1_13_asymmetric_reuse_passes(tmp_path):
    rc, out, report = run("1.13", tmp_path, "--reuse", "asymmetric", "--cases", "repro/cross-rank or reuse/copy")
    assert rc == 0, out
