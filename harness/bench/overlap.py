"""Figure 7: how much of the Userbuffers-style all-gather the GEMM hides.

Taken from the communication package's own benchmark, :func:`harness.comm.bench.measure_overlap`
(all-gather alone, GEMM alone and the overlapped ring all-gather + GEMM, timed side by side in
the same ranks), looked up when the figure is computed: while that module or function does not
exist, the figure is reported as missing with the reason. One sample per repetition: the
slowest rank's overlapped time / (its all-gather time + its GEMM time).
"""

from __future__ import annotations

import importlib
import inspect

from harness.bench.figures import Figure, figure, missing

MODULE, FUNCTION = "harness.comm.bench", "measure_overlap"
TARGET = "< 0.85"


def find_measure_overlap():
    """The overlap benchmark function, or (None, why not)."""
    try:
        module = importlib.import_module(MODULE)
    except ImportError as exc:
        return None, f"{MODULE} is not importable ({exc}); the figure appears once it exists"
    fn = getattr(module, FUNCTION, None)
    if not callable(fn):
        return None, f"{MODULE} has no {FUNCTION}() yet; the figure appears once it exists"
    return fn, ""


def overlap_figure(repeats: int = 5, shape: dict | None = None, world_size: int = 2, log=print) -> Figure:
    fn, why = find_measure_overlap()
    if fn is None:
        return missing("overlap", "x", TARGET, why)
    wanted = {"world_size": world_size, "repeats": repeats, **(shape or {})}
    params = inspect.signature(fn).parameters
    kwargs = {k: v for k, v in wanted.items() if k in params}
    try:
        timing = fn(**kwargs)
    except Exception as exc:   # another package's benchmark: report, do not stop the bench
        return missing("overlap", "x", TARGET, f"{MODULE}.{FUNCTION} failed: {type(exc).__name__}: {exc}")
    get = timing.get if isinstance(timing, dict) else (lambda k, d=None: getattr(timing, k, d))
    ag, gemm, both = get("allgather_s"), get("gemm_s"), get("overlapped_s")
    if None in (ag, gemm, both):
        return missing("overlap", "x", TARGET, f"{MODULE}.{FUNCTION} returned no allgather_s/gemm_s/overlapped_s")
    samples = []
    per_rank = get("samples") or {}
    times = [v for v in per_rank.values() if isinstance(v, dict)]
    if times and all(len(t.get("overlapped", [])) == len(times[0].get("overlapped", [])) for t in times):
        for i in range(len(times[0]["overlapped"])):
            a = max(t["allgather"][i] for t in times)
            g = max(t["gemm"][i] for t in times)
            o = max(t["overlapped"][i] for t in times)
            samples.append(o / (a + g))
    value = both / (ag + gemm)
    log(f"  all-gather {ag * 1e3:.1f} ms, GEMM {gemm * 1e3:.1f} ms, overlapped {both * 1e3:.1f} ms: {value:.3f}")
    return figure("overlap", samples or [value], "x", TARGET, value=value, detail={
        "allgather_ms": ag * 1e3, "gemm_ms": gemm * 1e3, "overlapped_ms": both * 1e3,
        "best_possible": max(ag, gemm) / (ag + gemm), "source": f"{MODULE}.{FUNCTION}",
        "arguments": kwargs, "value_is": "overlapped median / (all-gather median + GEMM median)",
        "sample": "per repetition: slowest rank's overlapped / (all-gather + GEMM)"})
