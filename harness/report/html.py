"""HTML pages for stress runs: one run (``index.html``) and the trend over several nights.

Plots are drawn with matplotlib's Agg canvas (no display, no pyplot global state) and embedded
as base64 PNG, so a page is one self-contained file; :func:`write_stress_html` also writes the
PNGs to a folder. Everything here reads the plain-data record (``stress.json``'s content).
"""

from __future__ import annotations

import base64
import html
import io
import math
import os

from harness.files import write_atomic
from harness.report.model import PRECEDENCE
from harness.report.stress_model import StressReport

# One colour per oracle, the same on every plot and page.
ORACLE_COLOURS = {
    "cross-rank": "#d62728", "liveness": "#9467bd", "buffer-integrity": "#8c564b", "reference": "#ff7f0e",
    "isolation": "#1f77b4", "hygiene": "#2ca02c", "retention": "#bcbd22", "error": "#7f7f7f",
}
_FIGSIZE = (6.4, 3.0)
_DPI = 100


def _figure(left: float = 0.1, bottom: float = 0.17):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=_FIGSIZE, dpi=_DPI)
    FigureCanvasAgg(fig)
    # Fixed margins: a constrained layout costs as much as drawing the plot.
    fig.subplots_adjust(left=left, right=0.88, bottom=bottom, top=0.9)
    return fig, fig.add_subplot(1, 1, 1)


def _integer_ticks(axis) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _shade_pauses(ax, data: StressReport) -> None:
    """Shade the time between batches (shrinking failures, checking repros, drawing reports)."""
    batches = data.batches
    end = data.totals.elapsed_s
    labelled = False
    for i, b in enumerate(batches):
        stop = b.started_s + (b.duration_s or 0.0)
        nxt = batches[i + 1].started_s if i + 1 < len(batches) else end
        if nxt - stop > 1.0:
            ax.axvspan(stop / 60.0, nxt / 60.0, color="#ff7f0e", alpha=0.12, linewidth=0,
                       label=None if labelled else "between batches: shrinking, checking repros")
            labelled = True
    if labelled:
        ax.legend(loc="upper right", fontsize="small")


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _oracle_order(names) -> list[str]:
    return sorted(names, key=lambda o: PRECEDENCE.index(o) if o in PRECEDENCE else len(PRECEDENCE))


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#555555")
    ax.set_xticks([])
    ax.set_yticks([])


# --- one run's plots --------------------------------------------------------------------------
def _bin_width(elapsed_s: float) -> float:
    return max(5.0, elapsed_s / 60.0)


def plot_rate(data: StressReport) -> bytes:
    """Cases per second over the run, in bins; dotted lines where a batch (fresh group) started."""
    cases = data.cases
    fig, ax = _figure()
    if not cases:
        _empty(ax, "no case finished")
        return _png(fig)
    end = max(data.totals.elapsed_s, max(c.finished_s for c in cases))
    width = _bin_width(end)
    nbins = max(1, math.ceil(end / width))
    counts = [0] * nbins
    for c in cases:
        counts[min(nbins - 1, int(c.finished_s // width))] += 1
    xs = [(i * width) / 60.0 for i in range(nbins + 1)]
    ax.stairs([n / width for n in counts], xs, fill=True, color="#1f77b4", alpha=0.35)
    ax.stairs([n / width for n in counts], xs, color="#1f77b4")
    _shade_pauses(ax, data)
    for b in data.batches:
        ax.axvline(b.started_s / 60.0, color="#555555", linestyle=":", linewidth=0.8)
    for f in data.failures:
        ax.axvline(f.found_s / 60.0, color=ORACLE_COLOURS.get(f.oracle, "#000000"), linewidth=1.2)
    ax.set_xlabel("minutes since start (dotted: a new rank group; solid: a new kind of failure)")
    ax.set_ylabel(f"cases/s ({width:.0f} s bins)")
    ax.set_xlim(0, max(xs[-1], 1e-3))
    ax.set_title("Cases per second over time")
    return _png(fig)


def plot_reuse(data: StressReport) -> bytes:
    """Reuse events (a new object took a dead object's id) over the run: per bin and in total."""
    cases = data.cases
    fig, ax = _figure()
    if not cases:
        _empty(ax, "no case finished")
        return _png(fig)
    end = max(data.totals.elapsed_s, max(c.finished_s for c in cases))
    width = _bin_width(end)
    nbins = max(1, math.ceil(end / width))
    per_bin = [0] * nbins
    for c in cases:
        per_bin[min(nbins - 1, int(c.finished_s // width))] += c.reuse_events
    xs = [(i * width) / 60.0 for i in range(nbins + 1)]
    ax.stairs(per_bin, xs, fill=True, color="#2ca02c", alpha=0.35, label=f"per {width:.0f} s")
    ax.set_ylabel(f"reuse events per {width:.0f} s")
    ax.set_xlabel("minutes since start")
    total = ax.twinx()
    ordered = sorted(cases, key=lambda c: c.finished_s)
    running, ts, ys = 0, [0.0], [0]
    for c in ordered:
        running += c.reuse_events
        ts.append(c.finished_s / 60.0)
        ys.append(running)
    total.step(ts, ys, where="post", color="#2ca02c", linewidth=1.5)
    total.set_ylabel("reuse events in total")
    ax.set_ylim(bottom=0)
    total.set_ylim(bottom=0)
    _integer_ticks(ax.yaxis)
    _integer_ticks(total.yaxis)
    ax.set_xlim(0, max(xs[-1], 1e-3))
    ax.set_title(f"Id reuse events over time ({running} in total)")
    return _png(fig)


def plot_failures(data: StressReport) -> bytes:
    """Failing cases by their primary oracle."""
    by_oracle = data.totals.failures_by_oracle
    fig, ax = _figure(left=0.22)
    if not by_oracle:
        _empty(ax, f"no failure in {data.totals.cases} cases")
        ax.set_title("Failing cases by oracle")
        return _png(fig)
    names = _oracle_order(by_oracle)
    counts = [by_oracle[o] for o in names]
    bars = ax.barh(names, counts, color=[ORACLE_COLOURS.get(o, "#000000") for o in names])
    ax.bar_label(bars, padding=3)
    ax.invert_yaxis()
    ax.set_xlabel("failing cases")
    ax.set_xlim(0, max(counts) * 1.15 + 1)
    _integer_ticks(ax.xaxis)
    ax.set_title("Failing cases by oracle")
    return _png(fig)


def plot_durations(data: StressReport) -> bytes:
    """How long cases took on their ranks (log scale), passing and failing ones stacked."""
    cases = data.cases
    fig, ax = _figure()
    durations = [max(c.duration_s, 1e-3) for c in cases]
    if not durations:
        _empty(ax, "no case finished")
        return _png(fig)
    lo, hi = math.log10(min(durations)), math.log10(max(durations))
    if hi - lo < 0.5:
        lo, hi = lo - 0.25, hi + 0.25
    edges = [10 ** (lo + (hi - lo) * i / 30) for i in range(31)]
    passed = [max(c.duration_s, 1e-3) for c in cases if not c.oracle]
    failed = [max(c.duration_s, 1e-3) for c in cases if c.oracle]
    ax.hist([passed, failed], bins=edges, stacked=True, color=["#1f77b4", "#d62728"],
            label=[f"passed ({len(passed)})", f"failed ({len(failed)})"])
    ax.set_xscale("log")
    _integer_ticks(ax.yaxis)
    ax.set_xlabel("case duration on its ranks (s, log scale)")
    ax.set_ylabel("cases")
    ax.legend(loc="upper right", fontsize="small")
    med = sorted(durations)[len(durations) // 2]
    ax.set_title(f"Case durations (median {med:.2f} s)")
    return _png(fig)


STRESS_PLOTS = (("cases_per_s", plot_rate), ("reuse_events", plot_reuse), ("failures_by_oracle", plot_failures),
                ("case_durations", plot_durations))


# --- pages -----------------------------------------------------------------------------------
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 72em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.92em; }
td, th { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; }
code, pre { font-family: ui-monospace, monospace; font-size: 0.88em; }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; white-space: pre-wrap; }
.ok { color: #2a7a2a; font-weight: bold; } .bad { color: #b22222; font-weight: bold; }
.plots img { width: calc(50% - 1em); min-width: 400px; border: 1px solid #ddd; margin: 0.3em; }
.plots { display: flex; flex-wrap: wrap; }
"""


def _e(value) -> str:
    return html.escape(str(value))


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _table(headers, rows, numeric=()) -> str:
    """A table; ``headers`` None for a two-column list of names and values."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers) if headers else ""
    body = []
    for row in rows:
        cells = []
        for i, value in enumerate(row):
            cls = ' class="num"' if i in numeric else ""
            cells.append(f"<td{cls}>{value}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table>{f'<tr>{head}</tr>' if head else ''}{''.join(body)}</table>"


def _failure_rows(f) -> list:
    """A failure's table: its signature, the case as found, its repro, the shrink, the check, the parts."""
    repro = f.repro
    checked = {True: "<span class='ok'>reproduces in a fresh process</span>",
               False: "<span class='bad'>did not reproduce in a fresh process</span>",
               None: "not checked"}[repro.verified if repro is not None else None]
    orig = f.original
    rows = [("found as", _e(f"{orig.describe} (after {orig.preceding_cases} other cases in its group)"))]
    if repro is not None:
        shrink = repro.shrink
        rows += [("repro", _e(f"{repro.kind}: {repro.describe} ({repro.preceding_cases} preceding case(s))"
                              + (f", id reuse pinned to {repro.reuse_pinned}" if repro.reuse_pinned else "")
                              + f"; {repro.file}")),
                 ("shrinking", _e(f"{shrink.candidates_run} candidates, {shrink.shrink_s} s"
                                  + (f"; {shrink.note}" if shrink.note else "")))]
    else:
        rows += [("repro", "?: (0 preceding case(s)); "), ("shrinking", "0 candidates, 0 s")]
    rows.append(("check", checked))
    if f.signature:
        rows.insert(0, ("signature", _e(f.signature)))
    if f.parts:     # a merged report: the shards or groups it appeared in
        rows.append(("found in", _e(", ".join(f"part {p.part} ({p.count} case{'s' * (p.count != 1)})"
                                              for p in f.parts) + f"; repro from part {f.repro_from}")))
    elif f.shrunk_by_group is not None:
        rows.append(("shrunk by", _e(f"group {f.shrunk_by_group}, which found it first")))
    attempts = repro.attempts if repro is not None else ()
    if len(attempts) > 1:
        rows.append(("attempts", _e("; ".join(
            f"{a.kind} ({a.cases} case{'s' * (a.cases != 1)}): "
            + ("reproduced" if a.reproduced else f"not reproduced (exit {a.exit_code}, {a.oracle})")
            + (f", {a.reproduced_runs} of {a.runs} runs" if a.runs > 1 else "")
            for a in attempts))))
    return rows


def render_stress_html(data: StressReport, plots: dict[str, bytes]) -> str:
    cfg, t = data.config, data.totals
    verdict = ("<span class=\"ok\">no failure</span>" if not t.failing_cases else
               f'<span class="bad">{t.failing_cases} failing cases, {t.failures} distinct failures</span>')
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>stress {_e(cfg.sut)} "
             f"{_e(data.started_at[:10])}</title><style>{_STYLE}</style></head><body>",
             f"<h1>Stress run: {_e(cfg.sut)}, {_e(data.started_at)}</h1>",
             f"<p>{verdict}. Status: {_e(data.status())}.</p>"]
    summary = [
        ("stack", cfg.sut), ("launcher", f"{cfg.launcher}, world size {cfg.world_size}"),
        ("seed", cfg.seed), ("default reuse", cfg.reuse), ("budget", f"{cfg.minutes:g} min"),
        ("elapsed", f"{t.elapsed_s:.0f} s (cases {t.running_s:.0f} s, shrinking {t.shrink_s:.0f} s, "
                    f"checking repros {t.verify_s:.0f} s)"),
        ("cases", f"{t.cases} in {t.batches} batches ({t.passed} passed, {t.failed} failed, "
                  f"{t.errors} errors, {t.skipped} skipped)"),
        ("declined draws", f"{t.declined_draws} of {t.draws} ({100 * t.declined_share:.1f}%)"),
        ("declared space run", t.coverage.text()),
        ("models built", t.models_built), ("reuse events", t.reuse_events),
        ("steps compared bitwise", t.steps_compared), ("retention warnings", t.retention_warnings),
        ("cases/s", f"{t.cases_per_s:.2f} overall, {t.cases_per_s_running:.2f} while running cases"),
    ]
    parts.append(_table(None, [(_e(k), _e(v)) for k, v in summary]))
    if t.reuse_events == 0 and t.cases:
        parts.append("<p class='bad'>No id was reused in this run: the id-reuse bug class was not exercised.</p>")
    parts.append("<h2>Failures</h2>")
    if not data.failures:
        parts.append("<p>None.</p>")
    for f in data.failures:
        parts.append(f"<h3>#{f.n} <span style='color:{ORACLE_COLOURS.get(f.oracle, '#000')}'>"
                     f"{_e(f.oracle)}</span>: {f.count} failing case{'s' * (f.count != 1)}, first "
                     f"<code>{_e(f.first_case)}</code></h3>")
        parts.append(_table(None, _failure_rows(f)))
        parts.append(f"<pre>{_e(f.repro.command if f.repro is not None else '')}</pre>")
        if f.replay is not None and f.replay.command:
            parts.append(f"<p>Exact replay of its batch (case <code>{_e(f.replay.case)}</code>):</p>"
                         f"<pre>{_e(f.replay.command)}</pre>")
        parts.append(f"<details><summary>detail</summary><pre>{_e(f.detail)}</pre></details>")
    parts.append("<h2>Plots</h2><div class='plots'>")
    for name, png in plots.items():
        parts.append(_img(png, name))
    parts.append("</div>")
    parts.append("<h2>Batches</h2>")
    parts.append(_table(["batch", "started (s)", "cases", "ended", "duration (s)", "replay"],
                        [(b.index, f"{b.started_s:.0f}", b.cases_run, _e(b.ended), _e(b.duration_s),
                          f"<code>{_e(b.file or '')}</code>") for b in data.batches], numeric=(0, 1, 2, 4)))
    skips: dict[str, int] = {}
    for c in data.cases:
        if c.outcome == "skipped":
            skips[c.skip_reason] = skips.get(c.skip_reason, 0) + 1
    if skips:
        parts.append(f"<h2>Skipped cases ({sum(skips.values())})</h2>")
        parts.append(_table(["cases", "reason"], [(n, _e(reason)) for reason, n in skips.items()], numeric=(0,)))
    failing = [c for c in data.cases if c.oracle]
    parts.append(f"<h2>Failing cases ({len(failing)})</h2>")
    parts.append(_table(["case", "oracle", "failure", "case spec", "reuse", "s"],
                        [(f"<code>{_e(c.name)}</code>", _e(c.oracle), c.failure, _e(c.describe),
                          c.reuse_events, f"{c.duration_s:.2f}") for c in failing[:500]], numeric=(2, 4, 5)))
    parts.append(f"<details><summary>All {len(data.cases)} cases</summary>")
    parts.append(_table(["case", "outcome", "case spec", "models", "reuse", "s"],
                        [(f"<code>{_e(c.name)}</code>", _e(c.outcome), _e(c.describe), c.models_built,
                          c.reuse_events, f"{c.duration_s:.2f}") for c in data.cases], numeric=(3, 4, 5)))
    parts.append("</details>")
    parts.append(f"<p><small>Config: <code>{_e(' '.join(cfg.argv))}</code></small></p></body></html>")
    return "\n".join(parts)


def write_stress_html(data: StressReport, path: str, plots_dir: str | None = None) -> dict[str, bytes]:
    """Draw the plots, write the page (atomically) and the PNGs; returns the PNGs by name."""
    plots = {name: draw(data) for name, draw in STRESS_PLOTS}
    if plots_dir:
        os.makedirs(plots_dir, exist_ok=True)
        for name, png in plots.items():
            write_atomic(os.path.join(plots_dir, f"{name}.png"), png)
    write_atomic(path, render_stress_html(data, plots))
    return plots


# --- the trend over several nights -------------------------------------------------------------
def trend_plots(runs: list) -> dict[str, bytes]:
    """cases/s, failing cases by oracle and reuse events, one point or bar per run."""
    labels = [r.label for r in runs]
    xs = list(range(len(runs)))
    out = {}

    fig, ax = _figure(left=0.16, bottom=_TREND_BOTTOM)
    ax.plot(xs, [r.report.totals.cases_per_s for r in runs], marker="o", color="#1f77b4")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("cases/s")
    ax.set_title("Throughput per run")
    _label_runs(ax, xs, labels)
    out["trend_cases_per_s"] = _png(fig)

    fig, ax = _figure(left=0.16, bottom=_TREND_BOTTOM)
    oracles = _oracle_order({o for r in runs for o in r.report.totals.failures_by_oracle})
    bottom = [0] * len(runs)
    for o in oracles:
        vals = [r.report.totals.failures_by_oracle.get(o, 0) for r in runs]
        ax.bar(xs, vals, bottom=bottom, color=ORACLE_COLOURS.get(o, "#000000"), label=o)
        bottom = [b + v for b, v in zip(bottom, vals)]
    if oracles:
        ax.legend(fontsize="small")
    ax.set_ylabel("failing cases")
    _integer_ticks(ax.yaxis)
    ax.set_title("Failing cases by oracle per run")
    _label_runs(ax, xs, labels)
    out["trend_failures"] = _png(fig)

    fig, ax = _figure(left=0.16, bottom=_TREND_BOTTOM)
    ax.bar(xs, [r.report.totals.reuse_events for r in runs], color="#2ca02c")
    ax.set_ylabel("reuse events")
    ax.set_title("Id reuse events per run")
    _label_runs(ax, xs, labels)
    out["trend_reuse_events"] = _png(fig)
    return out


_TREND_BOTTOM = 0.33     # room for the slanted date labels


def _label_runs(ax, xs, labels) -> None:
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize="small")
    if len(xs) == 1:
        ax.set_xlim(-1, 1)


def render_trend_html(runs: list, rows: list[list[str]], headers: list[str]) -> str:
    plots = trend_plots(runs) if runs else {}
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>stress trend</title>"
             f"<style>{_STYLE}</style></head><body><h1>Stress trend over {len(runs)} run"
             f"{'s' * (len(runs) != 1)}</h1>",
             _table(headers, [[_e(v) for v in row] for row in rows], numeric=(2, 4, 5, 6)),
             "<div class='plots'>"]
    parts += [_img(png, name) for name, png in plots.items()]
    parts.append("</div></body></html>")
    return "\n".join(parts)
