"""``python -m harness.bench.gpu_contexts``: how many fresh processes a second get their CUDA context, K at a time.

Every isolated run of a case on a GPU stack starts in a freshly forked child of the rank's
zygote, which creates its own CUDA context before the case runs (:mod:`harness.runner.rank.zygote`):
one fresh context per case. With N stress groups side by side, N zygotes fork such children at
once. Where a run with more groups does not run more cases while cores and the GPU are idle,
this tells whether fresh contexts are what is served one at a time.

For each K of ``--procs``: K workers, each forking one child after another for ``--seconds``;
each child does ``--work`` and exits:

* ``context``: creates its CUDA context on GPU 0 (a one-element tensor) and synchronises;
* ``te``: that, then one small Transformer Engine ``Linear`` forward and backward under FP8
  autocast (the first use of TE's kernels in a fresh context, as an isolated case's first step);
* ``cpu``: a CPU tensor only, the same processes without a GPU (a dry run).

It reports children finished per second (all workers together), the median and 90th-percentile
time of one child (fork to exit) and the medians of its parts (the fork, the work, and from the
work's end to the child reaped: the context's teardown), failed children, and the cores' and GPU's utilisation sampled
meanwhile, and writes ``gpu-contexts.json`` and ``gpu-contexts.md`` under ``--out``. The workers
are forked from this process after torch (and, for ``te``, TE) is imported and before CUDA is
started, as the zygote is; ``--workers spawn`` makes each a fresh interpreter instead, as each
stress group's rank is, so that no two workers' children descend from one process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import struct
import subprocess
import sys
import time

from harness.bench.scaling import Sampler, _mean, gpu_names, utilisation, whole_numbers
from harness.errors import HarnessError, OneLineParser, UsageError, exit_from
from harness.files import write_atomic

WORKS = ("context", "te", "cpu")


def _child(work: str, te_mods) -> None:
    import torch

    if work == "cpu":
        torch.ones(64).sum().item()
        return
    device = torch.device("cuda", 0)
    torch.zeros(1, device=device)
    if work == "te":
        from harness.stacks.te.model import autocast

        layer = te_mods.te.Linear(32, 32, params_dtype=torch.float32, device=device)
        x = torch.randn(16, 32, device=device, requires_grad=True)
        with autocast(te_mods.te, te_mods.recipe.DelayedScaling(), None):
            y = layer(x)
        y.sum().backward()
    torch.cuda.synchronize(device)


def _worker(work: str, te_mods, deadline: float, fd: int) -> None:
    """Forks children one after another until ``deadline``; writes one [seconds, exit code,
    fork s, work s, exit s, reaped at] per child: fork to exit, its three parts (fork to the
    child's first line, the work, the work's end to the child reaped, which holds the context's
    teardown), and when it was reaped (``time.monotonic``)."""
    times = []
    while time.monotonic() < deadline:
        r, w = os.pipe()
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            code = 0
            began = time.monotonic()
            try:
                _child(work, te_mods)
            except BaseException:
                code = 1
            os.write(w, struct.pack("<dd", began, time.monotonic()))
            os._exit(code)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        t3 = time.monotonic()
        data = os.read(r, 16)
        os.close(r)
        began, ended = struct.unpack("<dd", data) if len(data) == 16 else (t0, t3)
        times.append([round(t3 - t0, 4), os.waitstatus_to_exitcode(status), round(began - t0, 4),
                      round(ended - began, 4), round(t3 - ended, 4), t3])
    os.write(fd, json.dumps(times).encode())


def measure(work: str, procs: int, seconds: float, te_mods=None, workers: str = "fork") -> dict:
    """K = ``procs`` workers forking children for ``seconds``; the figures of one row. Workers
    ``fork``: forked from this process; ``spawn``: each a fresh interpreter (as each stress group's
    rank is), sharing no ancestor's memory with the others."""
    if workers == "spawn":
        times, elapsed = _spawned(work, procs, seconds)
        return row(work, procs, times, elapsed, workers)
    start = time.monotonic()
    deadline = start + seconds
    pids = []
    try:
        for _ in range(procs):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    os.close(r)
                    _worker(work, te_mods, deadline, w)
                except BaseException:
                    code = 1
                os._exit(code)
            os.close(w)
            pids.append((pid, r))
        times = []
        for pid, r in pids:
            times.extend(json.loads(_read_all(r) or b"[]"))
            os.close(r)
            os.waitpid(pid, 0)
        pids = []
    finally:
        for pid, _ in pids:                  # interrupted: no worker outlives this process
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    return row(work, procs, times, _elapsed(times, start, seconds), workers)


def _elapsed(times: list, start: float, seconds: float) -> float:
    """From the start to the last child reaped (the workers' own exit left out)."""
    return max([start + seconds] + [t[5] for t in times if len(t) > 5]) - start


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _spawned(work: str, procs: int, seconds: float) -> tuple[list, float]:
    """Spawned workers: each imports what its children need and says so; then all get one
    deadline (CLOCK_MONOTONIC, the same in every process here) and fork their children."""
    cmd = [sys.executable, "-m", "harness.bench.gpu_contexts", "--worker", work]
    procs_ = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(procs)]
    try:
        for p in procs_:
            if p.stdout.readline().strip() != b"ready":
                raise HarnessError(f"a spawned worker did not start (exit {p.wait()})")
        start = time.monotonic()
        for p in procs_:
            p.stdin.write(f"{start + seconds!r}\n".encode())
            p.stdin.close()
        times = []
        for p in procs_:
            times.extend(json.loads(p.stdout.read() or b"[]"))
            p.wait()
        return times, _elapsed(times, start, seconds)
    finally:
        for p in procs_:                     # interrupted: no worker outlives this process
            if p.poll() is None:
                p.kill()
                p.wait()


def _spawned_worker(work: str) -> None:
    te_mods = _imports([work])
    sys.stdout.buffer.write(b"ready\n")
    sys.stdout.buffer.flush()
    deadline = float(sys.stdin.readline())
    _worker(work, te_mods, deadline, sys.stdout.fileno())


def _imports(works) -> object:
    """What the children need, imported before any is forked (TE's modules for ``te``); CUDA left
    unstarted. Returns TE's modules or None."""
    import torch

    te_mods = None
    if "te" in works:
        from harness.stacks.te import availability

        availability.require()
        te_mods = availability.te_modules()
        import harness.stacks.te.model  # noqa: F401  (imported here, not in every child)
    if torch.cuda.is_initialized():
        raise UsageError("CUDA was started before the workers were forked; their children could not use it")
    return te_mods


def row(work: str, procs: int, times: list[list[float]], elapsed_s: float, workers: str = "fork") -> dict:
    """Children per second, child time median and 90th percentile, the medians of its parts
    (fork, work, exit), failures, from ``times`` (per child: seconds, exit code, then the parts)
    over ``elapsed_s``."""
    ok = [t for t in times if t[1] == 0]
    total = sorted(t[0] for t in ok)

    def median(i):
        values = [t[i] for t in ok if len(t) > i]
        return round(statistics.median(values), 4) if values else None
    return {"work": work, "workers": workers, "procs": procs, "children": len(times), "failed": len(times) - len(ok),
            "elapsed_s": round(elapsed_s, 2),
            "children_per_s": round(len(ok) / elapsed_s, 3) if elapsed_s > 0 else None,
            "child_s_median": median(0), "child_s_p90": total[min(len(total) - 1, int(0.9 * len(total)))] if ok else None,
            "fork_s_median": median(2), "work_s_median": median(3), "exit_s_median": median(4)}


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# fresh CUDA contexts, K processes at a time: {meta['command']}", "",
             f"{meta['host']}, {meta['ncores']} cores, GPUs: {meta['gpus'] or 'none seen by nvidia-smi'}; "
             f"CUDA_DEVICE_MAX_CONNECTIONS={meta.get('cuda_device_max_connections') or 'unset'}", "",
             "| work | workers | K | children | failed | children/s | vs K x one | child s median | child s p90 "
             "| fork s | work s | exit s | CPU cores busy | GPU util mean % | GPU util peak % |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| " + " | ".join("-" if r.get(k) is None else str(r[k]) for k in (
            "work", "workers", "procs", "children", "failed", "children_per_s", "scaling", "child_s_median", "child_s_p90",
            "fork_s_median", "work_s_median", "exit_s_median", "cpu_cores_busy", "gpu_util_mean_pct", "gpu_util_peak_pct")) + " |")
    return "\n".join(lines) + "\n"


def with_scaling(rows: list[dict]) -> list[dict]:
    """Each row's children/s over K times the one-process figure of its work and workers (None
    without one)."""
    base = {(r["work"], r.get("workers")): r["children_per_s"] for r in rows
            if r["procs"] == 1 and r.get("children_per_s")}
    for r in rows:
        b = base.get((r["work"], r.get("workers")))
        r["scaling"] = round(r["children_per_s"] / (b * r["procs"]), 3) if b and r.get("children_per_s") else None
    return rows


def build_parser():
    p = OneLineParser(prog="python -m harness.bench.gpu_contexts", description=__doc__.splitlines()[0])
    p.add_argument("--out", help="folder for gpu-contexts.json and gpu-contexts.md")
    p.add_argument("--procs", type=whole_numbers("--procs", most=64), default=[1, 2, 4, 8, 16])
    p.add_argument("--work", action="append", choices=WORKS,
                   help="what each child does (repeatable; default: context, then te)")
    p.add_argument("--workers", action="append", choices=("fork", "spawn"),
                   help="workers forked from this process, or each a fresh interpreter (repeatable; default fork)")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--max-connections", type=int, default=1,
                   help="CUDA_DEVICE_MAX_CONNECTIONS for the children (default 1, as --sut te sets it for its "
                        "ranks and their zygotes; 0: as the environment has it, CUDA's 8 when unset)")
    p.add_argument("--worker", choices=WORKS, help=argparse.SUPPRESS)
    p.add_argument("--sample-s", type=float, default=1.0)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        _spawned_worker(args.worker)
        return 0
    if not args.out:
        raise UsageError("--out is required")
    works = args.work or ["context", "te"]
    if args.seconds <= 0 or args.sample_s <= 0:
        raise UsageError("--seconds and --sample-s must be > 0")
    if args.max_connections < 0:
        raise UsageError("--max-connections must be >= 0")
    if args.max_connections:
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = str(args.max_connections)   # children inherit it
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out!r} exists and is not a folder")
    if any(w != "cpu" for w in works):
        from harness.stacks.te_common import gpus

        if not gpus.visible_gpus():
            raise UsageError(f"--work {','.join(w for w in works if w != 'cpu')}: no GPU visible here "
                             "(NVML); --work cpu runs the same processes without one")
    te_mods = _imports(works)
    os.makedirs(args.out, exist_ok=True)
    ncores = os.cpu_count() or 1
    meta = {"command": "python -m harness.bench.gpu_contexts " + " ".join(argv if argv is not None else sys.argv[1:]),
            "host": os.uname().nodename, "ncores": ncores, "gpus": gpu_names(),
            "cuda_device_max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")}
    rows: list[dict] = []
    for work, workers in [(w, m) for w in works for m in args.workers or ["fork"]]:
        for k in args.procs:
            sampler = Sampler(args.sample_s).start()
            try:
                r = measure(work, k, args.seconds, te_mods, workers)
            finally:
                sampler.stop()
            r.update(utilisation(_mean(sampler.cpu), sampler.gpu, ncores))
            rows.append(r)
            print(f"gpu_contexts: {work} {workers} K={k}: {r['children']} children, {r['children_per_s']}/s", file=sys.stderr,
                  flush=True)
            with_scaling(rows)
            write_atomic(os.path.join(args.out, "gpu-contexts.json"), json.dumps({"meta": meta, "rows": rows}, indent=1))
            write_atomic(os.path.join(args.out, "gpu-contexts.md"), markdown(rows, meta))
    print(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    exit_from(main)
