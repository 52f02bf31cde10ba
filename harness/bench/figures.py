"""Figures: one measured ratio (or share, or time) with its samples, target and verdict.

Every figure is built from samples taken side by side in one run (each sample is a ratio of
two things measured back to back, or a time measured the same way every time), so a loaded
machine moves both sides of a ratio together. ``value`` is the median of the samples and
``spread`` says how far they ranged (min, max and the interquartile range).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

from harness.files import write_atomic


@dataclasses.dataclass
class Figure:
    name: str
    value: float | None           # the headline number (the median of the samples), None when missing
    unit: str                     # "x", "%", "s", "ms", "MB/100 cycles", ...
    target: str                   # ">= 15", "<= 1.25", "< 0.85"; "" for a figure reported only
    ok: bool | None               # None: no target, or the figure is missing
    median: float | None
    spread: dict                  # {"min", "max", "q1", "q3", "n"}
    detail: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def spread_of(samples: list[float]) -> dict:
    """min, max, quartiles and count of ``samples`` (empty dict when there are none)."""
    xs = sorted(x for x in samples if x is not None and not math.isnan(x))
    if not xs:
        return {}
    if len(xs) >= 2:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    else:
        q1 = q3 = xs[0]
    return {"min": xs[0], "max": xs[-1], "q1": q1, "q3": q3, "n": len(xs)}


def check(value: float | None, target: str) -> bool | None:
    """Whether ``value`` meets ``target`` (``">= 15"``, ``"<= 1.25"``, ``"< 0.85"``); None if either is missing."""
    if value is None or not target:
        return None
    op, _, bound = target.partition(" ")
    limit = float(bound)
    return {">=": value >= limit, "<=": value <= limit, "<": value < limit, ">": value > limit}[op]


def figure(name: str, samples: list[float], unit: str, target: str = "", detail: dict | None = None,
           value: float | None = None) -> Figure:
    """A figure from its samples; ``value`` defaults to their median."""
    clean = [x for x in samples if x is not None and not math.isnan(x)]
    med = statistics.median(clean) if clean else None
    value = med if value is None else value
    return Figure(name, _round(value), unit, target, check(value, target), _round(med),
                  {k: (_round(v) if k != "n" else v) for k, v in spread_of(clean).items()}, detail or {})


def slope_mb_per_100(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (cycle, kB) points, in MB per 100 cycles."""
    n = len(points)
    if n < 2:
        return float("nan")
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    return (sxy / sxx) * 100 / 1024 if sxx else float("nan")


def missing(name: str, unit: str, target: str, why: str, detail: dict | None = None) -> Figure:
    """A figure that could not be measured in this run, with the reason in ``detail["missing"]``."""
    return Figure(name, None, unit, target, None, None, {}, {"missing": why, **(detail or {})})


def _round(x):
    if x is None:
        return None
    return float(f"{x:.4g}")


def _fmt(x) -> str:
    if x is None:
        return "-"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def table(figures: list[Figure]) -> str:
    """The figures as a fixed-width table: name, value, spread, target, verdict."""
    rows = [("figure", "value", "spread (min..max, n)", "target", "verdict")]
    for f in figures:
        sp = f.spread
        spread = f"{_fmt(sp['min'])}..{_fmt(sp['max'])}, n={sp['n']}" if sp else "-"
        verdict = "missing" if f.value is None else ("-" if f.ok is None else ("ok" if f.ok else "MISSED"))
        unit = f" {f.unit}" if f.unit else ""
        rows.append((f.name, f"{_fmt(f.value)}{unit}" if f.value is not None else "-", spread,
                     f"{f.target}{unit}" if f.target else "-", verdict))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(figures: list[Figure]) -> str:
    """The same table in Markdown (for docs/performance.md and the README)."""
    out = ["| figure | value | spread (min..max, n) | target | verdict |", "|---|---|---|---|---|"]
    for f in figures:
        sp = f.spread
        spread = f"{_fmt(sp['min'])}..{_fmt(sp['max'])}, n={sp['n']}" if sp else "-"
        verdict = "missing" if f.value is None else ("-" if f.ok is None else ("ok" if f.ok else "missed"))
        unit = f" {f.unit}" if f.unit else ""
        out.append(f"| `{f.name}` | {_fmt(f.value) + unit if f.value is not None else '-'} | {spread} | "
                   f"{f.target + unit if f.target else '-'} | {verdict} |")
    return "\n".join(out)


def write_json(figures: list[Figure], path: str, meta: dict | None = None) -> None:
    """``{"figures": [...], "meta": {...}}``, written atomically (temp file, then rename)."""
    write_atomic(path, json.dumps({"figures": [f.to_dict() for f in figures], "meta": meta or {}}, indent=2) + "\n")
