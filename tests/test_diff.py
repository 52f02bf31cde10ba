"""``python -m harness diff A.json B.json``: the diff of two runs' reports.

Known bad inputs, each with what the diff must say: reports with a differing step (the first
model, step, rank and tensor, both tokens, both values and bit patterns where one element), a
case missing from one report, reports of different seeds, of different world sizes, of an
older format, files that are not reports, and a tensor table that does not parse. Reports are
built from the reference's own records (:class:`~harness.oracles.recorded.CaseExpectation`,
what a correct stack records) with one tensor changed where a test says; one test runs two real
runs, one of a stack with a planted bug, and checks the diff's first difference against the
reference oracle's own finding.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
import torch

from harness.case.catalog import builtin_cases
from harness.fp8.digest import flat_bytes, token
from harness.oracles.recorded import CaseExpectation, StepRecorder, reported_records
from harness import cli
from harness.report import diff
from harness.report.bitvalues import value_of, value_of_bits
from harness.report.model import FORMAT_VERSION, CaseReport, RunReport
from harness.report.tensors import entries, table
from harness.runner.config import RunConfig
from harness.runner.session import run

CASES = {c.name: c for c in builtin_cases(world_size=2)}
NAMES = ["repro/cross-rank", "repro/isolation"]     # one case of the run's own, one that forces reuse


def records(case, rank: int, seed: int = 0, change=None) -> dict:
    """What rank ``rank`` reports of ``case`` when its tensors are the reference's, but for
    ``change(model, step, snapshot)``, which may alter a step's snapshot in place."""
    expectation = CaseExpectation(case, seed, 2)
    rec = StepRecorder(keep_bytes=False)
    for m in range(case.models):
        expected = expectation.model(m)[rank]
        for t in range(case.steps):
            snap = {k: dataclasses.replace(v) for k, v in expected.steps[t].items()}
            if change is not None:
                change(m, t, snap)
            rec.step(m, t, snap, expected.step_outputs(t))
        rec.final(m, expected.final)
    return reported_records(rec.to_dict(), expectation.digest(rank)["layout"])


def report(names=NAMES, seed: int = 0, change=None, world_size: int = 2, sut="emulated-patched") -> dict:
    rr = RunReport(sut, "spawn", world_size, seed, "off", complete=True)
    for name in names:
        case = CASES[name]
        rr.cases.append(CaseReport(name, "passed", forced_reuse=case.reuse, repro=f"python -m harness run --sut {sut} "
                                   f"--seed {seed} --cases {name}",
                                   tensors=table({r: records(case, r, seed, change) for r in range(2)})))
    return rr.to_dict()


def write(tmp_path, name: str, data) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def run_diff(capsys, *argv) -> tuple[int, str, str]:
    code = diff.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def double_scale_at(model: int, step: int, key: str):
    def change(m, t, snap):
        if (m, t) == (model, step):
            snap[key] = dataclasses.replace(snap[key], scale=snap[key].scale * 2)
    return change


def test_reports_with_equal_tensors_are_equal_and_exit_0(tmp_path, capsys):
    a = write(tmp_path, "a.json", report())
    b = write(tmp_path, "b.json", report(sut="another-stack"))
    code, out, _ = run_diff(capsys, a, b)
    assert code == 0
    assert "equal      repro/cross-rank" in out and "equal      repro/isolation" in out
    assert out.splitlines()[-1] == "2 cases: 2 equal"


def test_a_differing_step_is_named_with_both_values_and_bit_patterns(tmp_path, capsys):
    case = CASES["repro/cross-rank"]
    a = write(tmp_path, "a.json", report())
    b = write(tmp_path, "b.json", report(change=double_scale_at(1, 2, "layer0.weight")))
    out_json = tmp_path / "d.json"
    code, out, _ = run_diff(capsys, a, b, "--json", str(out_json))
    assert code == 1
    expected = CaseExpectation(case, 0, 2).model(1)[0].steps[2]["layer0.weight"].scale
    doubled = expected * 2
    bits = [format(int(t.view(torch.int32)), "08x") for t in (expected, doubled)]
    line = next(x for x in out.splitlines() if x.startswith("different  repro/cross-rank"))
    assert (f"first: model 1 step 2 rank 0 layer0.weight scale (compared): A {expected.item()!r} (0x{bits[0]}) "
            f"float32[], B {doubled.item()!r} (0x{bits[1]}) float32[]") in line
    # rank 1's changed scale too: one tensor per rank
    assert ": 2 of " in line
    assert "equal      repro/isolation" in out        # the other case is untouched
    lines = out.splitlines()
    assert lines[lines.index(line) + 1] == "  rerun it: python -m harness run --sut emulated-patched --seed 0 --cases repro/cross-rank"
    assert lines[-2:] == [f"JSON diff: {out_json}", f"reproduce: python -m harness diff {a} {b} --json {out_json}"]
    got = json.loads(out_json.read_text())
    assert got["equal"] is False and got["summary"]["different"] == 1
    first = next(c for c in got["cases"] if c["name"] == "repro/cross-rank")["first_difference"]
    assert (first["model"], first["step"], first["rank"], first["tensor"], first["field"]) == \
        (1, 2, 0, "layer0.weight", "scale")
    assert first["a"]["bits"] == "0x" + bits[0] and first["b"]["value"] == repr(doubled.item())


def test_a_tensor_compared_in_one_report_only_is_still_equal(tmp_path, capsys):
    # One run's reference compared a tensor the other's did not (a narrower reference, as TE's):
    # the bits are the same, so the case is equal; a changed bit next to it is still found.
    def one_case(change=None, compared=True):
        rr = RunReport("emulated-patched", "spawn", 2, 0, "off", complete=True)
        recs = {r: records(CASES["repro/cross-rank"], r, 0, change) for r in range(2)}
        if not compared:
            for rec in recs.values():
                rec["compared"] = [False] * len(rec["compared"])
        rr.cases.append(CaseReport("repro/cross-rank", "passed", tensors=table(recs)))
        return rr.to_dict()

    a = write(tmp_path, "a.json", one_case())
    b = write(tmp_path, "b.json", one_case(compared=False))
    assert all(e.compared for e in entries(json.loads(open(a).read())["cases"][0]["tensors"], "a").values())
    assert not any(e.compared for e in entries(json.loads(open(b).read())["cases"][0]["tensors"], "b").values())
    code, out, _ = run_diff(capsys, a, b)
    assert code == 0 and out.splitlines()[-1] == "1 cases: 1 equal"
    c = write(tmp_path, "c.json", one_case(change=double_scale_at(1, 2, "layer0.weight"), compared=False))
    code, out, _ = run_diff(capsys, a, c)
    assert code == 1 and "first: model 1 step 2 rank 0 layer0.weight scale (compared)" in out


def test_a_differing_tensor_of_many_elements_is_named_with_both_digests(tmp_path, capsys):
    def change(m, t, snap):
        if (m, t) == (0, 1):
            h = snap["layer0.input"].amax_history.clone()
            h[-1] = h[-1] + 1
            snap["layer0.input"] = dataclasses.replace(snap["layer0.input"], amax_history=h)

    a = write(tmp_path, "a.json", report(["repro/cross-rank"]))
    b = write(tmp_path, "b.json", report(["repro/cross-rank"], change=change))
    code, out, _ = run_diff(capsys, a, b)
    assert code == 1
    assert "first: model 0 step 1 rank 0 layer0.input amax_history (compared): A digest " in out
    line = next(x for x in out.splitlines() if x.startswith("different"))
    a_digest, b_digest = [part.split("digest ")[1].split()[0] for part in line.split("A ", 1)[1].split(", B ")]
    assert a_digest != b_digest and len(a_digest) == len(b_digest) == 12


def test_a_case_in_one_report_only_is_a_difference(tmp_path, capsys):
    a = write(tmp_path, "a.json", report())
    b = write(tmp_path, "b.json", report(["repro/cross-rank"]))
    code, out, _ = run_diff(capsys, a, b)
    assert code == 1
    assert "only in A  repro/isolation" in out
    code, out, _ = run_diff(capsys, b, a)
    assert code == 1 and "only in B  repro/isolation" in out


def test_cases_that_force_their_own_reuse_are_listed_apart(tmp_path, capsys):
    a = write(tmp_path, "a.json", report())
    b = write(tmp_path, "b.json", report(change=double_scale_at(0, 0, "layer0.input")))
    code, out, _ = run_diff(capsys, a, b)
    lines = out.splitlines()
    apart = next(i for i, x in enumerate(lines) if x.startswith("cases that force id reuse of their own"))
    assert code == 1
    assert any(x.startswith("different  repro/cross-rank") for x in lines[:apart])
    at = next(i for i, x in enumerate(lines) if x.startswith("  different  repro/isolation (reuse symmetric): "))
    assert at > apart and lines[at + 1].startswith("    rerun it: python -m harness run ")


@pytest.mark.parametrize("field,a_value,b_value,message", [
    ("seed", 0, 1, "different seeds (A 0, B 1)"),
    ("world_size", 2, 4, "different world sizes (A 2, B 4)"),
])
def test_reports_of_different_seeds_or_world_sizes_are_bad_input(tmp_path, capsys, field, a_value, b_value, message):
    base = report(["repro/cross-rank"])
    a = write(tmp_path, "a.json", dict(base, **{field: a_value}))
    b = write(tmp_path, "b.json", dict(base, **{field: b_value}))
    code, out, err = run_cli(a, b, capsys=capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err


def test_a_report_of_an_older_format_is_bad_input(tmp_path, capsys):
    older = report(["repro/cross-rank"])
    del older["format_version"]                 # what every report before format 2 was
    for c in older["cases"]:
        del c["tensors"], c["forced_reuse"]
    a = write(tmp_path, "a.json", report(["repro/cross-rank"]))
    b = write(tmp_path, "b.json", older)
    code, out, err = run_cli(a, b, capsys=capsys)
    assert code == 2 and out == ""
    assert err == f"error: B {b} is a report of format 1; diff reads format {FORMAT_VERSION} (run it again with this harness)\n"


@pytest.mark.parametrize("content,message", [
    (None, "No such file or directory"),
    ("{not json", "is not valid JSON"),
    (json.dumps({"stress": 1}), "is not a run report"),
    # What `harness stress` writes: named as such, never as a run report of an older format.
    (json.dumps({"format": "harness-stress/1", "seed": 7, "failures": [], "batches": []}),
     "is a stress report (python -m harness stress); diff compares two run reports"),
    (json.dumps([1, 2]), "is not a run report"),
])
def test_a_file_that_is_not_a_report_is_bad_input(tmp_path, capsys, content, message):
    a = write(tmp_path, "a.json", report(["repro/cross-rank"]))
    b = str(tmp_path / "missing.json") if content is None else write(tmp_path, "b.json", content)
    code, out, err = run_cli(a, b, capsys=capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err


def test_a_tensor_table_that_does_not_parse_is_bad_input(tmp_path, capsys):
    broken = report(["repro/cross-rank"])
    rows = broken["cases"][0]["tensors"]["rows"]
    first = next(iter(rows))
    rows[first] = "999:abcdef012345"               # an index past the names
    a = write(tmp_path, "a.json", report(["repro/cross-rank"]))
    b = write(tmp_path, "b.json", broken)
    code, out, err = run_cli(a, b, capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and "tensor table does not parse" in err


def test_usage_errors_are_one_line_and_exit_2(tmp_path, capsys):
    a = write(tmp_path, "a.json", report(["repro/cross-rank"]))
    code, _, err = run_cli(a)                      # python -m harness diff, in a process of its own
    assert code == 2 and err.count("\n") == 1 and "required: B.json" in err
    code, out, err = run_cli(a, a, "--json", str(tmp_path / "no-such-folder" / "d.json"), capsys=capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "does not exist" in err


def run_cli(*argv, capsys=None) -> tuple[int, str, str]:
    """``python -m harness diff ARGV``: through :func:`harness.cli.main` in this process (what
    ``python -m harness`` calls; importing torch in a fresh process takes seconds), or, without
    ``capsys``, in a process of its own, as a user runs it."""
    if capsys is not None:
        code = cli.main(["diff", *argv])
        out, err = capsys.readouterr()
        return code, out, err
    proc = subprocess.run([sys.executable, "-m", "harness", "diff", *argv], capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def test_tokens_are_exact_bits_for_one_element_and_start_of_sha1_otherwise():
    for value, dtype in ((448.0, torch.float32), (0.1, torch.bfloat16), (3.5, torch.float8_e4m3fn)):
        t = torch.tensor(value, dtype=torch.float32).to(dtype)
        tok = token(t, flat_bytes(t), b"\x00" * 20)
        assert tok == "=" + format(int(t.view(torch.uint8 if t.dtype.itemsize == 1 else torch.int16 if
                                                t.dtype.itemsize == 2 else torch.int32)) & 0xffffffff,
                                   f"0{t.dtype.itemsize * 2}x")
        assert value_of(tok, str(dtype)) == repr(t.float().item())
    # sign bits count: -0.0 and 0.0 are different tokens
    assert token(torch.tensor(-0.0), flat_bytes(torch.tensor(-0.0)), b"") != \
        token(torch.tensor(0.0), flat_bytes(torch.tensor(0.0)), b"")
    many = token(torch.zeros(3), flat_bytes(torch.zeros(3)), bytes(range(20)))
    assert many == bytes(range(20)).hex()[:12] and value_of(many, "float32") is None


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.float16,
                                   torch.uint8, torch.int8])
def test_every_bit_pattern_of_a_narrow_dtype_reads_as_torch_reads_it(dtype):
    width = dtype.itemsize * 8
    patterns = torch.arange(1 << width, dtype=torch.int64)
    as_int = {8: torch.uint8, 16: torch.int16}[width]
    values = patterns.to(torch.int32).to(as_int).view(dtype)
    if dtype.is_floating_point:
        values = values.float() if width == 8 else values
    for bits, v in zip(patterns.tolist(), values.tolist()):
        assert repr(value_of_bits(bits, str(dtype))) == repr(v), (hex(bits), dtype)


def test_wide_dtypes_read_as_torch_reads_them():
    g = torch.Generator().manual_seed(0)
    for dtype, as_int in ((torch.float32, torch.int32), (torch.float64, torch.int64), (torch.int32, torch.int32),
                          (torch.int64, torch.int64)):
        width = dtype.itemsize * 8
        raw = torch.randint(-(1 << 62), 1 << 62, (2000,), generator=g, dtype=torch.int64)
        raw = torch.cat([raw, torch.tensor([0, 1, -1, 0x7f800000, 0x7f800001, 0x00000001, -(1 << 31)])])
        bits = raw.to(as_int)
        for b, v in zip(bits.tolist(), bits.view(dtype).tolist()):
            assert repr(value_of_bits(b & ((1 << width) - 1), str(dtype))) == repr(v), (hex(b), dtype)
    assert value_of("=1ff", "uint8") is None and value_of("=zz", "float32") is None


def test_the_table_round_trips_every_token_with_its_place_and_mark():
    case = CASES["repro/cross-rank"]
    by_rank = {r: records(case, r) for r in range(2)}
    got = entries(table(by_rank), "case")
    n = sum(len(rec["layout"]) for rec in by_rank.values())
    assert len(got) == n
    for r, rec in by_rank.items():
        for (model, step, _kind, name, dtype, shape), tok, seen in zip(rec["layout"], rec["tokens"], rec["compared"]):
            e = got[(model, None if step < 0 else step, r, name)]
            assert (e.token, e.compared, e.dtype) == (tok, seen, dtype.replace("torch.", ""))
    # everything the emulated stack records is compared with the reference
    assert all(e.compared for e in got.values())


def test_the_judge_marks_only_what_the_reference_holds_as_compared():
    case = CASES["repro/cross-rank"]
    expectation = CaseExpectation(case, 0, 2)
    full = expectation.records(0, keep_bytes=False)
    narrower = [row for row in full["layout"] if not row[3].endswith("|scale_inv")]
    marks = reported_records(full, narrower)["compared"]
    assert [m for m, row in zip(marks, full["layout"]) if row[3].endswith("|scale_inv")] == \
        [False] * sum(row[3].endswith("|scale_inv") for row in full["layout"])
    assert all(m for m, row in zip(marks, full["layout"]) if not row[3].endswith("|scale_inv"))
    assert not any(reported_records(full, None)["compared"])


def test_a_planted_bug_is_found_by_the_diff_where_the_reference_oracle_finds_it(tmp_path, capsys):
    # Two real runs, one rank in this process: the patched stack and one whose GEMMs read a stale
    # scale_inv (its FP8 state is right; what the steps return is not).
    cases = [c for c in builtin_cases(world_size=1) if c.name == "delayed/wide"]
    paths = []
    for sut in ("emulated-patched", "tests.planted.stale_scale_inv:STACK"):
        rep = run(RunConfig(sut=sut, launcher="inproc", world_size=1, isolation=False, cases=cases, reuse="off"))
        paths.append(write(tmp_path, f"{len(paths)}.json", rep.to_dict()))
    [planted] = rep.cases
    [finding] = [f for f in planted.failures if f.oracle == "reference"]
    code, out, _ = run_diff(capsys, *paths, "--json", str(tmp_path / "d.json"))
    assert code == 1
    first = json.loads((tmp_path / "d.json").read_text())["cases"][0]["first_difference"]
    # the reference oracle's first finding: the same model, step and tensor
    assert (first["model"], first["step"], first["rank"]) == (finding.model, finding.step, 0)
    assert first["field"] == "returned" and finding.detail.startswith(first["tensor"] + "[")
    assert first["a"]["compared"] and first["b"]["compared"]
    # and the same run twice is equal
    code, out, _ = run_diff(capsys, paths[0], paths[0])
    assert code == 0 and out.splitlines()[3].startswith("equal      delayed/wide")


def test_a_stack_with_a_narrower_reference_marks_only_what_it_compared():
    # The rank compares its own state (the stack brings expected_model): it marks what that
    # reference held at each step, here TE's (harness/stacks/te_common/compared.py).
    cases = [c for c in builtin_cases(world_size=1) if c.name == "delayed/deep-narrow"]
    rep = run(RunConfig(sut="tests.stacks.narrow_reference:STACK", launcher="inproc", world_size=1,
                        isolation=False, cases=cases, reuse="off"))
    [case] = rep.cases
    assert case.outcome == "passed", case.detail
    got = entries(case.tensors, case.name)
    last = len(cases[0].model.dims) - 2
    assert last >= 1
    marks = {(e.step, e.name): e.compared for e in got.values() if e.model == 1}
    for t in range(cases[0].steps):
        assert marks[(t, "layer0.input|amax_history")] and marks[(t, f"layer{last}.grad_output|scale")]
        assert not marks[(t, "layer1.input|scale")] and not marks[(t, "output")]      # after a GEMM
        assert marks[(t, "layer0.weight|scale")] == (t == 0)
    assert not any(c for (step, _), c in marks.items() if step is None)      # the final weights
    # with the full reference (the stack's own) everything is compared
    full = run(RunConfig(sut="emulated-patched", launcher="inproc", world_size=1, isolation=False, cases=cases,
                         reuse="off"))
    assert all(e.compared for e in entries(full.cases[0].tensors, "full").values())
    # and without the reference nothing is
    off = run(RunConfig(sut="emulated-patched", launcher="inproc", world_size=1, isolation=False, cases=cases,
                        reuse="off", check_reference=False))
    assert not any(e.compared for e in entries(off.cases[0].tensors, "off").values())
    assert entries(off.cases[0].tensors, "off").keys() == entries(full.cases[0].tensors, "full").keys()


def test_a_case_skipped_in_one_run_only_is_a_difference_and_in_both_is_not_run(tmp_path, capsys):
    ran = report(["repro/cross-rank"])
    declined = report([])
    declined["cases"] = [CaseReport("repro/cross-rank", "skipped", skip_reason="the stack declines it: why").to_dict()]
    a, b = write(tmp_path, "a.json", ran), write(tmp_path, "b.json", declined)
    code, out, _ = run_diff(capsys, a, b)
    assert code == 1
    assert "first: model 0 step 0 rank 0 " in out and ", B absent [A passed, B skipped]" in out
    code, out, _ = run_diff(capsys, b, b)
    assert code == 0 and "not run    repro/cross-rank [the stack declines it: why]" in out


def test_a_stress_run_keeps_no_tensor_tables_in_memory(tmp_path):
    from harness.case.spec import CaseSpec, ModelSpec
    from harness.fp8.recipe import DelayedScalingRecipe
    from harness.report.stress_model import StressConfig
    from harness.stress.record import StressRecord

    config = StressConfig("s", "inproc", 1, 1, "natural", minutes=1,
                          capabilities={"formats": ["HYBRID"], "scalings": ["delayed"], "constructions": ["copy"]})
    record = StressRecord(config, str(tmp_path))
    spec = CaseSpec(name="c0", model=ModelSpec(dims=(8, 8), recipe=DelayedScalingRecipe()))
    full = CaseReport("c0", "passed", tensors=report(["repro/cross-rank"])["cases"][0]["tensors"])
    record.add_case(0, 0, spec, full, 0.0, None)
    assert full.tensors and record.case_reports[0].tensors == {}
    assert record.case_reports[0].name == "c0" and record.case_reports[0].outcome == "passed"
