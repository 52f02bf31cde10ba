"""Smoke tests of ``python -m harness bench``: the CLI, the JSON shape and the figure arithmetic.

Timings themselves are not asserted (the machine is shared and noisy); only that every figure
carries the fields the JSON promises and that verdicts follow targets.
"""

from __future__ import annotations

import dataclasses
import json
import types

import pytest

from harness import cli as harness_cli
from harness.bench import cli as bench_cli
from harness.bench import overlap as bench_overlap
from harness.bench.figures import check, figure, slope_mb_per_100, table
from harness.bench.oracle_cost import oracle_cost_figure

FIELDS = {"name", "value", "unit", "target", "ok", "median", "spread", "detail"}


def _figures(path):
    with open(path) as fh:
        data = json.load(fh)
    assert set(data) >= {"figures", "meta"}
    for fig in data["figures"]:
        assert set(fig) == FIELDS, fig
    return {f["name"]: f for f in data["figures"]}


def test_a_failed_overlap_benchmark_is_reported_missing_and_the_bench_goes_on(tmp_path, monkeypatch, capsys):
    import harness.comm.bench as comm_bench

    def broken(**kwargs):
        raise RuntimeError("rank 1 exited with code -9")

    monkeypatch.setattr(comm_bench, "measure_overlap", broken)
    out = tmp_path / "bench.json"
    assert bench_cli.main(["--only", "overlap", "--json", str(out)]) == 0
    figs = _figures(out)
    for name in ("overlap", "overlap_unmodelled_link"):
        assert figs[name]["value"] is None and figs[name]["ok"] is None
        assert "rank 1 exited with code -9" in figs[name]["detail"]["missing"]
    assert figs["overlap"]["target"] == "< 0.85"
    assert "missing" in capsys.readouterr().out


def test_bench_command_writes_every_field(tmp_path, capsys):
    """``python -m harness bench`` dispatch, with the real overlap benchmark at a tiny shape:
    the modelled-link figure with its target, the unmodelled one reported beside it."""
    out = tmp_path / "bench.json"
    assert harness_cli.main(["bench", "--only", "overlap", "--overlap-shape", "64,256,8", "--repeats", "2",
                             "--json", str(out)]) == 0
    figs = _figures(out)
    fig = figs["overlap"]
    assert fig["value"] > 0 and fig["median"] > 0 and fig["spread"]["n"] == 2
    assert fig["ok"] in (True, False) and fig["target"] == "< 0.85"
    assert fig["detail"]["link_gbps"] == bench_overlap.LINK_GBPS and "GB/s" in fig["detail"]["link"]
    plain = figs["overlap_unmodelled_link"]
    assert plain["value"] > 0 and plain["ok"] is None and plain["detail"]["link_gbps"] is None
    printed = capsys.readouterr().out
    assert "overlap" in printed and "target" in printed


@pytest.mark.parametrize("argv", [["--only", "nonsense"], ["--cases", "0"], ["--overlap-shape", "1,2"]])
def test_bad_arguments_exit_2(argv, capsys):
    assert bench_cli.main(argv) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_figure_median_spread_and_verdict():
    fig = figure("overhead", [1.1, 1.4, 1.2, 1.3], "x", "<= 1.25")
    assert fig.value == fig.median == pytest.approx(1.25)
    assert fig.ok is True and fig.spread["min"] == 1.1 and fig.spread["max"] == 1.4 and fig.spread["n"] == 4
    assert check(15.2, ">= 15") and not check(0.9, "< 0.85") and check(None, "< 1") is None
    assert "overhead" in table([fig]) and "ok" in table([fig])


def test_rss_slope_is_mb_per_100_cycles():
    points = [(c, 1000 + 10.24 * c) for c in range(0, 500, 10)]    # 10.24 kB per cycle = 1 MB / 100 cycles
    assert slope_mb_per_100(points) == pytest.approx(1.0)


def test_oracle_cost_shares_from_phase_timings():
    phases = {"reference": 0.1, "hygiene": 0.05, "ledger": 0.05, "stack": 0.7}
    results = [{r: types.SimpleNamespace(duration_s=1.0, phase_s=phases) for r in (0, 1)}]
    fig = oracle_cost_figure(results)
    assert fig.value == pytest.approx(20.0) and fig.ok is True
    assert fig.detail["share_median_percent"]["unattributed"] == pytest.approx(10.0)


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--cases", "huge"], ["--dims", "16,32"], ["--dims", "16,x,16"],
                                  ["--dims", "0,32,16"], ["--batch", "0"], ["--cases", "cycles", "--batch", "4"]])
def test_decompose_bad_arguments_exit_2_with_one_line(argv, capsys):
    from harness.bench import decompose

    assert decompose.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err


def test_decompose_varies_only_the_reference_and_the_precheck():
    from harness.bench.decompose import variants

    configs = variants()
    assert [(c.check_reference, c.precheck) for c in configs.values()] == [
        (True, True), (False, True), (True, False), (False, False)]
    base = configs["default"]
    for cfg in configs.values():
        assert dataclasses.replace(cfg, check_reference=True, precheck=True) == base
