"""``python -m harness.bench.scaling``: stress throughput as rank groups are added, with what limits it.

For each N of ``--groups-list`` (default 1,2,4,8) it runs ``python -m harness stress --groups N``
(the stack, world size and budget given) under ``timeout``, one after the other, and samples
while each runs, every ``--sample-s`` seconds: every GPU's utilisation (``nvidia-smi
--query-gpu=utilization.gpu``; none where there is no nvidia-smi) and the machine's CPU
utilisation (``/proc/stat``: the busy share of all cores between two samples). It writes, under
``--out``: ``stress-g<N>.json`` (each run's merged stress report, the cases left out to keep it
small), ``summary.json`` and ``summary.md``: per N, cases, cases per second, that over N times
the one-group figure (the target is at least 0.8), the same two figures for the cases run after
each group's rank had started (:func:`rate_after_startup`: a run shorter than its budget, or a
slow start, weighs on the first figure and not on these), the median case's time on the rank and
its wall time (:func:`case_times`), mean and peak GPU utilisation, mean CPU utilisation in
cores, exit code and wall time. Everything is rewritten after each run, so a
lease that ends early keeps the runs that finished. A run that would not finish within
``--total-s`` of the start is not begun (said in the summary).

Called by ``scripts/stress-scaling`` (a GPU machine's system python3, PYTHONPATH at the
repository). The pure parts (:func:`cpu_busy`, :func:`gpu_utilisation`,
:func:`rate_after_startup`, :func:`case_times`, :func:`summarise`) are what the tests check.
:mod:`harness.bench.gpu_contexts` measures the one thing these figures leave open on a GPU: how
many fresh CUDA contexts a second the processes of several groups get.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from harness.errors import OneLineParser, UsageError, exit_from
from harness.files import write_atomic
from harness.report.stress_file import read_report

TARGET = 0.8            # cases/s with N groups at least TARGET * N * the one-group figure
SLACK_S = 150.0         # beyond the budget: group start, a late case, the merge and its plots


def cpu_times(text: str) -> tuple[int, int]:
    """(busy, total) jiffies from the ``cpu`` line of /proc/stat's text."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            idle = values[3] + (values[4] if len(values) > 4 else 0)       # idle + iowait
            total = sum(values[:8])                                        # guest time is in user already
            return total - idle, total
    raise ValueError("no 'cpu' line in /proc/stat")


def cpu_busy(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """The busy share of all cores between two :func:`cpu_times` samples (None: no time passed)."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else None


def gpu_utilisation(text: str) -> list[float]:
    """Per-GPU utilisation in percent from ``nvidia-smi --query-gpu=utilization.gpu
    --format=csv,noheader,nounits``; lines that are not numbers ([N/A]) are left out."""
    out = []
    for line in text.splitlines():
        try:
            out.append(float(line.strip()))
        except ValueError:
            continue
    return out


class Sampler:
    """Samples CPU and GPU utilisation on a thread until :meth:`stop`."""

    def __init__(self, every_s: float):
        self.every_s = every_s
        self.cpu: list[float] = []
        self.gpu: list[list[float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scaling-sampler", daemon=True)
        self.nvidia_smi = shutil.which("nvidia-smi")

    def _loop(self) -> None:
        before = _read_cpu()
        while not self._stop.wait(self.every_s):
            after = _read_cpu()
            busy = cpu_busy(before, after) if before and after else None
            if busy is not None:
                self.cpu.append(busy)
            before = after
            if self.nvidia_smi:
                try:
                    done = subprocess.run([self.nvidia_smi, "--query-gpu=utilization.gpu",
                                           "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                          timeout=10)
                    self.gpu.append(gpu_utilisation(done.stdout))
                except (OSError, subprocess.TimeoutExpired):
                    pass

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def gpu_names() -> str | None:
    """The GPUs nvidia-smi lists, by name, comma-separated (None: no nvidia-smi, or none listed)."""
    if not shutil.which("nvidia-smi"):
        return None
    names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=30).stdout.split("\n")
    return ", ".join(n.strip() for n in names if n.strip()) or None


def _read_cpu() -> tuple[int, int] | None:
    try:
        with open("/proc/stat") as fh:
            return cpu_times(fh.read())
    except (OSError, ValueError):
        return None


def _mean(values) -> float | None:
    values = list(values)
    return round(sum(values) / len(values), 3) if values else None


def rate_after_startup(batches: list[dict], groups: int) -> float | None:
    """Cases per second summed over the groups, each group's counted from its rank's start-up on.

    Group ``g`` of ``groups`` runs the batches whose index is ``g`` modulo ``groups``, one after
    the other: its rate is its cases over its batches' time less their start-up (``duration_s -
    startup_s``). None when no batch ran a case after its start-up."""
    cases: dict[int, int] = {}
    seconds: dict[int, float] = {}
    for b in batches:
        running = (b.get("duration_s") or 0.0) - (b.get("startup_s") or 0.0)
        if running <= 0 or not b.get("cases_run"):
            continue
        g = b["index"] % groups
        cases[g] = cases.get(g, 0) + b["cases_run"]
        seconds[g] = seconds.get(g, 0.0) + running
    if not cases:
        return None
    return round(sum(cases[g] / seconds[g] for g in cases), 3)


def case_times(cases: list[dict]) -> dict:
    """Medians over the cases run (skipped ones left out) of the shared run's time on the rank
    (``duration_s``) and of the case's wall time, from the case before it judged to it judged
    (``wall_s``: that run, the isolated run in a fresh process with its own CUDA context, the
    judging). Where groups are added and the second grows while the first does not, the time goes
    outside the shared run."""
    run = [c for c in cases if c.get("outcome") != "skipped"]

    def median(key):
        values = sorted(c[key] for c in run if isinstance(c.get(key), (int, float)))
        return round(values[len(values) // 2], 4) if values else None
    return {"case_s_median": median("duration_s"), "case_wall_s_median": median("wall_s")}


def utilisation(cpu_mean: float | None, gpu_samples: list[list[float]], ncores: int) -> dict:
    """A run's utilisation figures: the cores busy on average (the busy share times the cores),
    and the GPUs' mean (each sample's mean over the GPUs, averaged) and peak, in percent."""
    per_sample = [sum(s) / len(s) for s in gpu_samples if s]
    return {"cpu_cores_busy": None if cpu_mean is None else round(cpu_mean * ncores, 2),
            "gpu_util_mean_pct": _mean(per_sample),
            "gpu_util_peak_pct": max((max(s) for s in gpu_samples if s), default=None)}


def _ratio(rate, base, groups):
    return round(rate / (base * groups), 3) if (rate and base) else None


def summarise(runs: list[dict], ncores: int, base_rate: float | None = None,
              base_after_startup: float | None = None) -> list[dict]:
    """One row per run: its rate against N times the one-group rate (this invocation's, else
    ``base_rate``: an earlier invocation's), the same for the rate after start-up
    (``base_after_startup``), and its utilisations."""
    def one_group(key, given):
        return next((r[key] for r in runs if r["groups"] == 1 and r.get(key)), given)
    base = one_group("cases_per_s", base_rate)
    base_running = one_group("cases_per_s_after_startup", base_after_startup)
    rows = []
    for r in runs:
        row = {k: r.get(k) for k in ("groups", "exit_code", "wall_s", "cases", "cases_per_s",
                                     "cases_per_s_after_startup", "case_s_median", "case_wall_s_median",
                                     "note")}
        row["scaling"] = _ratio(r.get("cases_per_s"), base, r["groups"])
        row["meets_target"] = None if row["scaling"] is None else row["scaling"] >= TARGET
        row["scaling_after_startup"] = _ratio(r.get("cases_per_s_after_startup"), base_running, r["groups"])
        row.update(utilisation(r.get("cpu_mean"), r.get("gpu_samples") or [], ncores))
        rows.append(row)
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# stress scaling: {meta['command']}", "",
             f"{meta['host']}, {meta['ncores']} cores, GPUs: {meta['gpus'] or 'none seen by nvidia-smi'}; "
             f"load average at start {meta['load_start']}, at end {meta.get('load_end', '?')}", "",
             "| groups | exit | cases | cases/s | vs N x one group (>= 0.8) | cases/s after start-up | vs N x one "
             "group | CPU cores busy | GPU util mean % | GPU util peak % | case s on rank (median) | case wall s "
             "(median) | wall s | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| " + " | ".join("-" if r.get(k) is None else str(r[k]) for k in (
            "groups", "exit_code", "cases", "cases_per_s", "scaling", "cases_per_s_after_startup",
            "scaling_after_startup", "cpu_cores_busy", "gpu_util_mean_pct", "gpu_util_peak_pct", "case_s_median",
            "case_wall_s_median", "wall_s",
            "note")) + " |")
    return "\n".join(lines) + "\n"


def whole_numbers(flag: str, most: int | None = None):
    """An argparse type for ``flag``: whole numbers from 1 (to ``most``) separated by commas."""
    def parse(text: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be whole numbers separated by commas, got {text!r}")
        if not values or any(v < 1 or (most is not None and v > most) for v in values):
            bound = f"from 1 to {most}" if most is not None else ">= 1"
            raise argparse.ArgumentTypeError(f"{flag} must be whole numbers {bound}, got {text!r}")
        return values
    return parse


def build_parser():
    p = OneLineParser(prog="python -m harness.bench.scaling", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for stress-g<N>.json, summary.json, summary.md")
    p.add_argument("--groups-list", type=whole_numbers("--groups-list"), default=[1, 2, 4, 8])
    p.add_argument("--minutes", type=float, default=2.0)
    p.add_argument("--sample-s", type=float, default=2.0)
    p.add_argument("--total-s", type=float, default=None, help="begin no run that could end after this")
    p.add_argument("--base-rate", type=float, default=None,
                   help="the one-group cases/s of an earlier invocation, where this one runs no --groups 1")
    p.add_argument("--base-rate-after-startup", type=float, default=None,
                   help="the same for the one-group cases/s after start-up")
    p.add_argument("--work", default=None, help="folder for the runs' full reports (default: a temp folder, removed)")
    return p


def main(argv=None) -> int:
    args, stress_args = build_parser().parse_known_args(argv)
    if args.minutes <= 0 or args.sample_s <= 0:
        raise UsageError("--minutes and --sample-s must be > 0")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out!r} exists and is not a folder")
    os.makedirs(args.out, exist_ok=True)
    work = args.work or tempfile.mkdtemp(prefix="fp8h-scaling-")
    limit_s = args.minutes * 60.0 + SLACK_S
    ncores = os.cpu_count() or 1
    started = time.monotonic()
    meta = {"command": " ".join(["python -m harness stress"] + stress_args + ["--minutes", f"{args.minutes:g}"]),
            "host": os.uname().nodename, "ncores": ncores, "load_start": round(os.getloadavg()[0], 2),
            "gpus": gpu_names(), "base_rate": args.base_rate, "base_after_startup": args.base_rate_after_startup}
    runs: list[dict] = []
    try:
        for n in args.groups_list:
            run = {"groups": n}
            runs.append(run)
            if args.total_s is not None and time.monotonic() - started + limit_s > args.total_s:
                run["note"] = f"not begun: could end after --total-s {args.total_s:g}"
                continue
            out = os.path.join(work, f"g{n}")
            cmd = ["timeout", "-k", "30", str(int(limit_s)), sys.executable, "-m", "harness", "stress",
                   *stress_args, "--groups", str(n), "--minutes", f"{args.minutes:g}", "--out", out]
            print(f"scaling: {' '.join(cmd)}", file=sys.stderr, flush=True)
            sampler = Sampler(args.sample_s).start()
            t0 = time.monotonic()
            try:
                done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
            finally:
                sampler.stop()
            run.update(exit_code=done.returncode, wall_s=round(time.monotonic() - t0, 1),
                       cpu_mean=_mean(sampler.cpu), gpu_samples=sampler.gpu, output_tail=done.stdout[-3000:])
            if done.returncode in (124, 137):
                run["note"] = "timed out"
            try:
                report = read_report(out)
                run["cases"] = report.totals.cases
                run["cases_per_s"] = report.totals.cases_per_s
                run["cases_per_s_after_startup"] = rate_after_startup([b.to_dict() for b in report.batches], n)
                run.update(case_times([c.to_dict() for c in report.cases]))
                write_atomic(os.path.join(args.out, f"stress-g{n}.json"), json.dumps(report.header(), indent=1))
            except UsageError as exc:
                run["note"] = f"no report: {exc}"
            _save(args.out, runs, meta, ncores)
    finally:
        meta["load_end"] = round(os.getloadavg()[0], 2)
        _save(args.out, runs, meta, ncores)
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(markdown(summarise(runs, ncores, args.base_rate, args.base_rate_after_startup), meta))
    return 0


def _save(out: str, runs: list[dict], meta: dict, ncores: int) -> None:
    rows = summarise(runs, ncores, meta.get("base_rate"), meta.get("base_after_startup"))
    write_atomic(os.path.join(out, "summary.json"), json.dumps({"meta": meta, "rows": rows, "runs": runs}, indent=1))
    write_atomic(os.path.join(out, "summary.md"), markdown(rows, meta))


if __name__ == "__main__":
    exit_from(main)
