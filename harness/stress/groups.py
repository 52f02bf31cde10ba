"""``stress --groups N``: N rank groups side by side, each a stress process of its own, one report.

A run of G groups starts G child ``python -m harness stress`` processes with the parent's
command line, each with its own folder (``OUT/group-<g>``), its own stream of the seed's
batches (group g of shard I/N runs stream I + N*g of N*G, :mod:`harness.stress.streams`) and
one claims folder (``OUT/claims``, :mod:`harness.stress.claims`), so that a failure two groups
hit is shrunk and checked once, by the first. The seed is resolved here and passed to every
child, so no child sees another date. Each child is a whole stress run (its own rank group,
shrink group and reports), so a group's failure reproduces with the command it prints, and the
groups share no interpreter: the controller's work in one does not wait on another's.

While they run, this process prints one progress line counting every group (read from each
child's ``stress.json``, rewritten after every case) and relays each child's notes prefixed
with its group. When all have ended it merges their folders into OUT
(:mod:`harness.stress.merge`), so OUT holds one ``stress.json``, ``junit.xml`` and ``index.html``.
SIGINT or SIGTERM is passed on to the children (which write their reports and stop their
ranks), then the folders are merged all the same; a child that does not stop within
``STOP_WAIT_S`` is killed. A child also dies with this process (``PR_SET_PDEATHSIG``).

GPUs: a stack that says how many GPUs it sees (``gpu_count()``, e.g. ``--sut te``) gets group g
on GPUs ``g*W .. g*W+W-1`` at world size W >= 2 (through ``CUDA_VISIBLE_DEVICES``; more groups
than the GPUs hold are refused, one line, exit 2); at world size 1 the groups share the GPUs,
group g on GPU ``g % count`` (no communicator spans two groups). ``--groups auto`` takes
``cores // (W + 1)`` groups (a core per rank and one for its controller), and on GPUs at world
size >= 2 no more than ``count // W``.

Called by :mod:`harness.stress.cli` when ``--groups`` asks for more than one group.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

from harness.errors import UsageError
from harness.report.stress_file import read_report
from harness.report.stress_model import StressReport, Totals
from harness.runner.interrupts import Interrupted, raise_on_signals
from harness.stress.progress import Progress
from harness.stress.repro import die_with_parent

POLL_S = 1.0           # the progress line and children's exits, at most this stale
READ_EVERY_S = 5.0     # children's stress.json read at most this often
STOP_WAIT_S = 60.0     # after SIGTERM, a child's time to write its reports and stop its ranks


def parse_groups(text: str) -> str | int:
    """``"auto"`` or a whole number >= 1; anything else is a UsageError line."""
    if text == "auto":
        return "auto"
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise UsageError(f"--groups must be a whole number >= 1 or 'auto', got {text!r}") from None
    if value < 1:
        raise UsageError(f"--groups must be a whole number >= 1 or 'auto', got {text!r}")
    return value


def auto_groups(world_size: int, ncores: int, gpus: int | None) -> int:
    """What ``--groups auto`` takes: a core per rank and one per controller; GPUs at W >= 2."""
    n = max(1, ncores // (world_size + 1))
    if gpus is not None and world_size >= 2:
        n = min(n, max(1, gpus // world_size))
    return n


def stack_gpus(stack, environ=None) -> list[str] | None:
    """The GPU names the stack's ranks see (``CUDA_VISIBLE_DEVICES`` entries, else indices), or
    None for a stack that runs on no GPU (it has no ``gpu_count``)."""
    from harness.stacks.hooks import traits

    count = traits(stack).gpu_count
    if count is None:
        return None
    n = int(count())
    visible = (environ if environ is not None else os.environ).get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        return entries[:n]
    return [str(i) for i in range(n)]


def gpu_sets(groups: int, world_size: int, gpus: list[str] | None, sut: str = "the stack") -> list[str | None]:
    """``CUDA_VISIBLE_DEVICES`` for each group (None: leave it as it is); UsageError when the
    groups need more GPUs than there are."""
    if gpus is None:
        return [None] * groups
    if not gpus:
        raise UsageError(f"--groups {groups}: --sut {sut} runs on GPUs and none is visible here")
    if world_size == 1:
        return [gpus[g % len(gpus)] for g in range(groups)]
    need = groups * world_size
    if need > len(gpus):
        raise UsageError(f"--groups {groups} --world-size {world_size} needs {need} GPUs (group g on GPUs "
                         f"g*{world_size}..g*{world_size}+{world_size - 1}) but {len(gpus)} are visible here; "
                         f"use --groups {max(1, len(gpus) // world_size)} or fewer")
    return [",".join(gpus[g * world_size:(g + 1) * world_size]) for g in range(groups)]


def split_cases(max_cases: int | None, groups: int) -> list[int | None]:
    """Each group's share of ``--max-cases`` (None: no limit)."""
    if max_cases is None:
        return [None] * groups
    return [max_cases // groups + (1 if g < max_cases % groups else 0) for g in range(groups)]


def read_totals(path: str) -> StressReport | None:
    """A group's ``stress.json`` as it stands, or None while there is none (or it is being replaced)."""
    try:
        return read_report(path)
    except UsageError:
        return None


def combined_totals(reports: list[StressReport]) -> Totals:
    """What the progress line shows, over every group: failures counted once per signature."""
    signatures = {f.signature for r in reports for f in r.failures}
    return Totals(cases=sum(r.totals.cases for r in reports),
                  failing_cases=sum(r.totals.failing_cases for r in reports),
                  failures=len(signatures), reuse_events=sum(r.totals.reuse_events for r in reports))


class GroupRun:
    """The children of one ``--groups`` run, from their start to the merged report."""

    def __init__(self, argv: list[str], out_dir: str, groups: int, seed: int, devices: list[str | None],
                 max_cases: list[int | None], budget_s: float, progress: Progress | None = None):
        self.argv = list(argv)
        self.out_dir = out_dir
        self.groups = groups
        self.seed = seed
        self.devices = devices
        self.max_cases = max_cases
        self.progress = progress or Progress(budget_s)
        self.children: list[subprocess.Popen] = []
        self.lines: queue.Queue = queue.Queue()
        self.readers: list[threading.Thread] = []
        self.interrupted: str | None = None

    def folder(self, g: int) -> str:
        return os.path.join(self.out_dir, f"group-{g}")

    def child_argv(self, g: int) -> list[str]:
        # The parent's options, then what differs per group: argparse keeps an option's last value.
        extra = ["--out", self.folder(g), "--groups", "1", "--seed", str(self.seed),
                 "--group-of", f"{g}/{self.groups}", "--claims", os.path.join(self.out_dir, "claims")]
        if self.max_cases[g] is not None:
            extra += ["--max-cases", str(self.max_cases[g])]
        return [sys.executable, "-m", "harness", "stress"] + self.argv + extra

    def start(self) -> None:
        for g in range(self.groups):
            os.makedirs(self.folder(g), exist_ok=True)
            env = dict(os.environ)
            if self.devices[g] is not None:
                env["CUDA_VISIBLE_DEVICES"] = self.devices[g]
            with open(os.path.join(self.folder(g), "stdout.txt"), "wb") as stdout:
                proc = subprocess.Popen(self.child_argv(g), stdout=stdout, stderr=subprocess.PIPE,
                                        stdin=subprocess.DEVNULL, env=env, preexec_fn=die_with_parent)
            self.children.append(proc)
            reader = threading.Thread(target=self._relay, args=(g, proc.stderr), daemon=True,
                                      name=f"stress-group-{g}-stderr")
            reader.start()
            self.readers.append(reader)

    def _relay(self, g: int, pipe) -> None:
        """On the reader thread: every line of child g's stderr onto the queue, then None."""
        for raw in iter(pipe.readline, b""):
            self.lines.put((g, raw.decode(errors="replace").rstrip("\n")))
        pipe.close()
        self.lines.put((g, None))

    def headers(self) -> list[StressReport]:
        found = (read_totals(os.path.join(self.folder(g), "stress.json")) for g in range(self.groups))
        return [h for h in found if h is not None]

    def wait(self) -> list[int]:
        """Relay notes and show progress until every child has ended; their exit codes."""
        open_pipes = self.groups
        last_read = 0.0
        totals = combined_totals([])
        while open_pipes or any(p.poll() is None for p in self.children):
            try:
                g, line = self.lines.get(timeout=POLL_S)
            except queue.Empty:
                g, line = None, ""
            if g is not None and line is None:
                open_pipes -= 1
            else:
                self._note(g, line)
            if time.monotonic() - last_read >= READ_EVERY_S:
                totals = combined_totals(self.headers())
                last_read = time.monotonic()
                self.progress.phase = f"{sum(p.poll() is None for p in self.children)} of {self.groups} groups running"
                self.progress.update(totals)
        for reader in self.readers:
            reader.join(timeout=5.0)
        self.progress.phase = "merging"
        self.progress.close(combined_totals(self.headers()))
        return [p.returncode for p in self.children]

    def stop(self, why: str) -> None:
        """SIGTERM to every child still running (each writes its reports), then SIGKILL after
        :data:`STOP_WAIT_S`; each wait bounded."""
        self.interrupted = why
        for proc in self.children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        for proc in self.children:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                try:
                    proc.wait(timeout=10.0)
                except subprocess.TimeoutExpired:
                    pass
        # Drain what they said on the way out.
        while True:
            try:
                g, line = self.lines.get_nowait()
            except queue.Empty:
                break
            self._note(g, line)

    def _note(self, g: int | None, line: str | None) -> None:
        """A line of child ``g``'s stderr, prefixed with its group; not its own progress line
        (ours counts every group)."""
        if line and not line.startswith("stress ["):
            self.progress.note(f"[group {g}] {line}")


def run_groups(run: GroupRun) -> list[int]:
    """Start the children and wait for them; SIGINT/SIGTERM stops them in order. Exit codes."""
    previous = raise_on_signals()
    try:
        try:
            run.start()
            return run.wait()
        except (Interrupted, KeyboardInterrupt) as exc:
            name = exc.args[0] if isinstance(exc, Interrupted) and exc.args else "SIGINT"
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            run.stop(f"received {name}")
            return [p.returncode for p in run.children]
    finally:
        for proc in run.children:     # never leave one behind, whatever happened above
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10.0)
        for sig, old in previous.items():
            signal.signal(sig, old)
