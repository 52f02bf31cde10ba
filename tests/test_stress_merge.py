"""``stress merge``: one report from the folders of shards or groups, and what it refuses.

The shard folders here are written by the test (small, exact stress reports), so every check of
the merge is seen both passing and failing; the end-to-end merge of real shard runs is in
``tests/test_stress_groups.py``.
"""

from __future__ import annotations

import copy
import json
import os

import pytest

from harness.case.spec import CaseSpec, ModelSpec
from harness.cli import main as harness_main
from harness.fp8.recipe import DelayedScalingRecipe

DETAIL = ("[hygiene] rank 0, model 0: id_bookkeeping.AUTOCAST_TO_FP8_PARAMS[(0, 1)] element holds id {addr} of dead "
          "model.layers[0].weight._data (Tensor uint8[{n}, 8])")
SIGNATURE = "hygiene: id_bookkeeping.AUTOCAST_TO_FP8_PARAMS holds a dead id"


def _case(name, oracle=None, failure=None, addr="0x7f0000001000", n=16):
    detail = DETAIL.format(addr=addr, n=n) if oracle else ""
    return {"name": name, "batch": 0, "index": 0, "outcome": "failed" if oracle else "passed", "oracle": oracle,
            "oracles": [oracle] if oracle else [], "ranks": [0] if oracle else [], "failure": failure,
            "signature": SIGNATURE if oracle else None, "reuse_events": 2, "models_built": 1,
            "steps_compared": 3, "duration_s": 0.01, "wall_s": 0.02, "started_s": 1.0, "finished_s": 1.02,
            "retention_warnings": 0, "describe": "hybrid", "skip_reason": "", "detail": detail,
            "spec": CaseSpec(name=name, model=ModelSpec(dims=(8, 8), recipe=DelayedScalingRecipe())).to_dict()}


def _report(index, count, *, seed=7, sut="emulated-buggy", addr="0x7f0000001000", repro_cases=1, verified=True,
            complete=True, started="2026-12-03T01:00:00+00:00", fail=True):
    cases = [_case(f"stress/b{index:03d}/c000"), _case(f"stress/b{index:03d}/c001", "hygiene" if fail else None,
                                                           1 if fail else None, addr=addr, n=16 + index)]
    failures = []
    if fail:
        failures.append({"n": 1, "oracle": "hygiene", "signature": cases[1]["signature"], "first_case": cases[1]["name"],
                         "cases": [cases[1]["name"]], "count": 1, "found_s": 1.0, "detail": cases[1]["detail"],
                         "status": "reproduced" if verified else "not reproduced", "replay": None,
                         "original": {"spec": cases[1]["spec"], "describe": "hybrid", "steps": 1, "models": 1,
                                      "layers": 1, "recipe": "hybrid", "preceding_cases": 0},
                         "repro": {"file": "repro-1.json", "kind": "minimal", "cases": repro_cases, "steps": 1,
                                   "models": 1, "layers": 1, "verified": verified,
                                   "command": f"python -m harness run --sut {sut} --case-file repro-1.json"}})
    return {"format": "harness-stress/2", "seed": seed, "started_at": started, "finished_at": started,
            "complete": complete, "interrupted": None, "error": None,
            "config": {"sut": sut, "sut_options": {}, "launcher": "spawn", "world_size": 2, "seed": seed, "reuse": "natural",
                       "minutes": 1.0,
                       "stream": {"index": index, "count": count}, "shard": f"{index}/{count}",
                       "capabilities": {"formats": ["HYBRID"], "scalings": ["delayed"], "constructions": ["copy"]}},
            "totals": {"cases": 2, "cases_per_s": 1.5, "cases_per_s_running": 2.0, "elapsed_s": 10.0 + index,
                       "draws": 2, "declined_draws": 0, "declined_reasons": {}, "running_s": 9.0, "shrink_s": 1.0,
                       "verify_s": 1.0, "group_start_s": 0.5},
            "failures": failures, "batches": [{"index": index, "seed": 1, "size": 2, "cases_run": 2, "started_s": 0.0, "duration_s": 2.0,
                                     "startup_s": 0.5, "ended": "all cases run", "file": None}], "cases": cases}


def _write(folder, report, repro=True):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "stress.json"), "w") as fh:
        json.dump(report, fh)
    if repro:
        with open(os.path.join(folder, "repro-1.json"), "w") as fh:
            json.dump([report["cases"][-1]["spec"]], fh)
    return str(folder)


def _merge(capsys, out, *folders):
    code = harness_main(["stress", "merge", str(out), *map(str, folders)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _load(out):
    with open(os.path.join(out, "stress.json")) as fh:
        return json.load(fh)


def test_failures_differing_only_in_addresses_merge_into_one(tmp_path, capsys):
    folders = [_write(tmp_path / f"s{i}", _report(i, 4, addr=f"0x7f00000{i}1000", repro_cases=3 - (i == 2)))
               for i in range(4)]
    code, out, err = _merge(capsys, tmp_path / "merged", *folders)
    assert code == 1, err
    data = _load(tmp_path / "merged")
    assert data["format"] == "harness-stress/2" and data["complete"] is True and data["warnings"] == []
    assert data["missing_parts"] == []
    assert data["totals"]["cases"] == 8 and data["totals"]["failing_cases"] == 4
    assert data["totals"]["cases_per_s"] == pytest.approx(6.0)       # side by side: the rates add up
    assert data["totals"]["elapsed_s"] == pytest.approx(13.0)        # the longest part
    [failure] = data["failures"]
    assert failure["count"] == 4 and [p["part"] for p in failure["parts"]] == ["0/4", "1/4", "2/4", "3/4"]
    # The shortest verified repro (part 2's, 2 cases), copied next to the merged report.
    assert failure["repro_from"] == "2/4" and failure["repro"]["cases"] == 2
    copied = os.path.join(tmp_path / "merged", "repro-1.json")
    assert os.path.isfile(copied) and failure["repro"]["command"].endswith(failure["repro"]["file"])
    assert os.path.exists(failure["repro"]["file"]) or os.path.isabs(failure["repro"]["file"]) is False
    assert {c["part"] for c in data["cases"]} == {"0/4", "1/4", "2/4", "3/4"}
    assert all(c["failure"] == 1 for c in data["cases"] if c["oracle"])
    assert os.path.isfile(tmp_path / "merged" / "junit.xml") and os.path.isfile(tmp_path / "merged" / "index.html")
    assert "appeared in parts 0/4, 1/4, 2/4, 3/4" in out


def test_different_signatures_stay_apart(tmp_path, capsys):
    a = _report(0, 2)
    b = _report(1, 2)
    b["failures"][0]["signature"] = "hygiene: other.REGISTRY holds a dead id"
    code, _, err = _merge(capsys, tmp_path / "m", _write(tmp_path / "a", a), _write(tmp_path / "b", b))
    assert code == 1, err
    assert len(_load(tmp_path / "m")["failures"]) == 2


def test_a_verified_repro_beats_a_shorter_unverified_one(tmp_path, capsys):
    a = _write(tmp_path / "a", _report(0, 2, repro_cases=1, verified=False))
    b = _write(tmp_path / "b", _report(1, 2, repro_cases=4, verified=True))
    _merge(capsys, tmp_path / "m", a, b)
    [failure] = _load(tmp_path / "m")["failures"]
    assert failure["repro_from"] == "1/2" and failure["repro"]["verified"] is True


def test_a_retried_shard_missing_shards_and_a_killed_one_are_said_and_merged(tmp_path, capsys):
    first = _write(tmp_path / "a", _report(0, 4, complete=False, started="2026-12-03T01:00:00+00:00"))
    retry = _write(tmp_path / "b", _report(0, 4, complete=True, started="2026-12-03T02:00:00+00:00"))
    killed = _write(tmp_path / "c", _report(1, 4, complete=False))
    code, _, err = _merge(capsys, tmp_path / "m", first, retry, killed)
    assert code == 1
    assert "part 0/4 given twice" in err and f"merging {retry}" in err
    assert "parts 2/4, 3/4 missing" in err
    assert "part 1/4" in err and "did not finish" in err
    data = _load(tmp_path / "m")
    assert data["complete"] is False and len(data["warnings"]) == 3 and data["missing_parts"] == ["2/4", "3/4"]
    assert data["totals"]["cases"] == 4                       # the retry and the killed shard, not the first try


@pytest.mark.parametrize("change,words", [
    (lambda r: r.update(seed=8) or r["config"].update(seed=8), "seed"),
    (lambda r: r["config"].update(sut="emulated-patched"), "stack"),
    (lambda r: r["config"].update(world_size=4), "world size"),
    (lambda r: r["config"].update(stream={"index": 1, "count": 3}), "different counts"),
])
def test_parts_of_different_runs_are_refused_and_nothing_is_written(tmp_path, capsys, change, words):
    a = _write(tmp_path / "a", _report(0, 2))
    other = _report(1, 2)
    change(other)
    b = _write(tmp_path / "b", other)
    out = tmp_path / "m"
    out.mkdir()
    (out / "stress.json").write_text("earlier merge\n")
    code, stdout, err = _merge(capsys, out, a, b)
    assert code == 2 and words in err and err.count("\n") == 1 and err.startswith("error: stress merge:")
    assert (out / "stress.json").read_text() == "earlier merge\n" and sorted(os.listdir(out)) == ["stress.json"]


def test_an_empty_folder_or_one_without_a_stress_report_is_one_line_exit_2(tmp_path, capsys):
    good = _write(tmp_path / "good", _report(0, 2))
    empty = tmp_path / "empty"
    empty.mkdir()
    other = tmp_path / "other"
    other.mkdir()
    (other / "stress.json").write_text(json.dumps({"format": "harness-run/1", "cases": []}))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "stress.json").write_text("{not json")
    out = tmp_path / "m"
    for bad, words in ((empty, "holds no stress report"), (other, "is not a stress report"),
                       (broken, "is not a stress report"), (tmp_path / "nowhere", "is not a folder")):
        code, _, err = _merge(capsys, out, good, bad)
        assert code == 2 and words in err and err.count("\n") == 1, err
        assert not out.exists()
    code, _, err = _merge(capsys, out)
    assert code == 2 and "no folders" in err and not out.exists()
    code, _, err = _merge(capsys, good, good)
    assert code == 2 and "also one of the folders" in err


def test_the_merged_report_is_a_night_of_the_trend(tmp_path, capsys):
    folders = [_write(tmp_path / f"s{i}", _report(i, 2)) for i in range(2)]
    _merge(capsys, tmp_path / "m", *folders)
    code = harness_main(["report", str(tmp_path / "m")])
    out = capsys.readouterr().out
    assert code == 0 and "emulated-buggy" in out and "hygiene:2" in out


def test_a_merge_of_merges_keeps_one_failure(tmp_path, capsys):
    """Two nights' --groups runs are merged reports themselves; a merge of them still holds."""
    a = copy.deepcopy(_report(0, 2))
    b = copy.deepcopy(_report(1, 2, addr="0x7fffdeadbeef"))
    _merge(capsys, tmp_path / "m1", _write(tmp_path / "a", a))
    _merge(capsys, tmp_path / "m2", _write(tmp_path / "b", b))
    code, _, err = _merge(capsys, tmp_path / "all", tmp_path / "m1", tmp_path / "m2")
    assert code == 1, err
    [failure] = _load(tmp_path / "all")["failures"]
    assert failure["count"] == 2 and os.path.isfile(tmp_path / "all" / "repro-1.json")


def test_complete_parts_in_a_folder_named_missing_merge_complete(tmp_path, capsys):
    """Completeness comes from the parts missing, not from words in the warnings: a path that
    says "missing" changes nothing."""
    for where in ("ok-runs", "missing-runs"):
        # every part there and complete, one given twice (a retried job): a warning naming folders
        folders = [_write(tmp_path / where / f"s{i}", _report(i, 2)) for i in range(2)]
        again = _write(tmp_path / where / "s0-again", _report(0, 2, started="2026-12-03T02:00:00+00:00"))
        code, _, err = _merge(capsys, tmp_path / where / "merged", *folders, again)
        assert "given twice" in err
        assert code == 1, err
        data = _load(tmp_path / where / "merged")
        assert data["complete"] is True and data["missing_parts"] == [], where
    # a warning that does name a missing part still makes it incomplete
    one = _write(tmp_path / "missing-runs" / "only", _report(0, 2))
    _merge(capsys, tmp_path / "missing-runs" / "partial", one)
    assert _load(tmp_path / "missing-runs" / "partial")["complete"] is False


def test_a_report_of_the_format_that_read_signatures_from_text_is_refused_in_one_line(tmp_path, capsys):
    old = _report(1, 2)
    old["format"] = "harness-stress/1"
    a, b = _write(tmp_path / "a", _report(0, 2)), _write(tmp_path / "b", old)
    code, _, err = _merge(capsys, tmp_path / "m", a, b)
    assert code == 2 and err.count("\n") == 1 and "format harness-stress/1" in err and "read from message text" in err
    assert not (tmp_path / "m").exists()
    # the trend still reads it as a night
    assert harness_main(["report", b]) == 0
