"""Phase marks (harness/phases.py) and their breakdown (harness/bench/phases.py)."""

from __future__ import annotations

from harness import phases
from harness.bench.phases import FIRST_FAIL, breakdown, main, run_with_phases


def test_marks_are_written_only_when_asked_for(tmp_path, monkeypatch):
    path = tmp_path / "p.txt"
    monkeypatch.delenv(phases.ENV, raising=False)
    phases.mark("nothing")
    assert not path.exists()
    monkeypatch.setenv(phases.ENV, str(path))
    phases.mark("rank 0: stack loaded")
    when, pid, phase = path.read_text().rstrip("\n").split(" ", 2)
    assert float(when) > 0 and int(pid) > 0 and phase == "rank 0: stack loaded"


def test_the_breakdown_keeps_each_phases_first_mark_with_its_gap():
    marks = [(10.5, 1, "a"), (12.0, 2, "b"), (12.5, 1, "a"), (13.0, 1, FIRST_FAIL)]
    rows = breakdown(10.0, marks)
    assert [(r["phase"], r["at_s"], r["gap_s"]) for r in rows] == [("a", 0.5, 0.5), ("b", 2.0, 1.5), (FIRST_FAIL, 3.0, 1.0)]


def test_a_run_marks_every_phase_up_to_the_first_fail(tmp_path):
    rc, start, marks = run_with_phases(["run", "--sut", "emulated-buggy", "--world-size", "1", "--cases",
                                        "repro/hygiene", "--no-isolation"], 300)
    assert rc == 1
    names = [m[2] for m in marks]
    for phase in ("controller: stack loaded", "rank 0: process started", "rank 0: zygote forked",
                  "controller: every rank ready", "rank 0: case repro/hygiene ran", FIRST_FAIL):
        assert phase in names, names
    assert names.index("rank 0: process started") < names.index(FIRST_FAIL)


def test_no_command_is_bad_input(capsys):
    assert main([]) == 2
    assert "give the harness command after --" in capsys.readouterr().err
