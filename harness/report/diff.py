"""``python -m harness diff A.json B.json [--json OUT]``: the diff of two runs' JSON reports.

Two releases of a library cannot be imported in one process; two runs can each write a report
(``--json``), and this compares them: per case, equal or different, and for a difference the
first model, step, rank and tensor that differ (``key|field``, or a returned tensor), with both
tokens and, where the reports carry them (one-element tensors: scales, scale_invs), both values
and bit patterns (:mod:`harness.report.tensors`, :mod:`harness.report.bitvalues`). A case in one
report only is a difference. Cases that force id reuse of their own (``CaseSpec.reuse``:
``repro/isolation``, ``reuse/*``) are listed apart: PR #1326 says its change makes "no change in
numerics" when no id is reused, and these cases reuse ids whatever the run's ``--reuse``.

It compares numerics only: a case whose tensors are equal is ``equal`` whatever its verdict in
either run (a differing verdict is shown beside it). Exit 0 every case equal, 1 a difference,
2 bad input (an unreadable file, not a report, reports of another format version, of
different seeds or world sizes: one line on stderr). Called by :mod:`harness.cli`; works on any
pair of reports of this format, on any stack, with or without a GPU.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import shlex

from harness.errors import OneLineParser, UsageError
from harness.report.bitvalues import value_of
from harness.files import write_atomic
from harness.report.jsonfile import read_json
from harness.report.model import FORMAT_VERSION, check_writable
from harness.report.tensors import entries


class Status(enum.Enum):
    EQUAL = "equal"
    DIFFERENT = "different"
    ONLY_A = "only in A"
    ONLY_B = "only in B"
    NOT_RUN = "not run"          # neither run recorded a tensor of it (skipped, or failed before a step)

    def differs(self) -> bool:
        return self in (Status.DIFFERENT, Status.ONLY_A, Status.ONLY_B)


@dataclasses.dataclass(frozen=True)
class Side:
    """One report's side of the first difference: its token, and the value where it carries one."""

    token: str | None            # None: the tensor is not in this report
    dtype: str = ""
    shape: str = ""
    compared: bool = False       # the run's reference compared it: shown, never part of equality

    def numerics(self) -> tuple | None:
        """What two sides must share to be equal: the tensor's bits, dtype and shape."""
        return None if self.token is None else (self.token, self.dtype, self.shape)

    def text(self) -> str:
        if self.token is None:
            return "absent"
        value = value_of(self.token, self.dtype)
        shown = f"{value} (0x{self.token[1:]})" if value is not None else f"digest {self.token}"
        return f"{shown} {self.dtype}{self.shape}"

    def to_dict(self) -> dict:
        if self.token is None:
            return {"present": False}
        value = value_of(self.token, self.dtype)
        out = {"present": True, "token": self.token, "dtype": self.dtype, "shape": self.shape,
               "compared": self.compared}
        if value is not None:
            out.update(value=value, bits="0x" + self.token[1:])
        return out


@dataclasses.dataclass(frozen=True)
class FirstDifference:
    model: int
    step: int | None             # None: the final weights
    rank: int
    tensor: str                  # the snapshot's role key, or a returned tensor's name
    field: str                   # amax_history, scale, ...; "returned" for what a step returned
    a: Side
    b: Side

    def text(self) -> str:
        step = "final weights" if self.step is None else f"step {self.step}"
        what = self.tensor if self.field == "returned" else f"{self.tensor} {self.field}"
        compared = "compared" if (self.a.compared or self.b.compared) else "not compared"
        return f"model {self.model} {step} rank {self.rank} {what} ({compared}): A {self.a.text()}, B {self.b.text()}"

    def to_dict(self) -> dict:
        return {"model": self.model, "step": "final" if self.step is None else self.step, "rank": self.rank,
                "tensor": self.tensor, "field": self.field, "a": self.a.to_dict(), "b": self.b.to_dict()}


@dataclasses.dataclass(frozen=True)
class CaseDiff:
    name: str
    status: Status
    forced_reuse: str = ""       # the case's own reuse (CaseSpec.reuse), in either report
    first: FirstDifference | None = None
    differing: int = 0           # tensors that differ (or are in one report only)
    tensors: int = 0             # tensors in either report
    note: str = ""               # verdicts that differ, why a case did not run
    repro: tuple = ()            # the commands that rerun a differing case, A's and B's (one if the same)

    def line(self) -> str:
        text = f"{self.status.value:10} {self.name}"
        if self.first is not None:
            text += f": {self.differing} of {self.tensors} tensors differ; first: {self.first.text()}"
        elif self.status is Status.EQUAL:
            text += f": {self.tensors} tensors"
        text += f" [{self.note}]" if self.note else ""
        if len(self.repro) == 1:
            text += f"\n  rerun it: {self.repro[0]}"
        elif self.repro:
            text += f"\n  rerun it: A: {self.repro[0]}\n            B: {self.repro[1]}"
        return text

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status.value, "forced_reuse": self.forced_reuse,
                "tensors": self.tensors, "differing": self.differing,
                "first_difference": self.first.to_dict() if self.first else None, "note": self.note,
                "repro": list(self.repro)}


def load_report(path: str, label: str) -> dict:
    """A run's JSON report of this format; UsageError (one line) for anything else."""
    data = read_json(path, label)
    if isinstance(data, dict) and str(data.get("format", "")).startswith("harness-stress/"):
        raise UsageError(f"{label} {path} is a stress report (python -m harness stress); diff compares two run "
                         f"reports (python -m harness run --json PATH); python -m harness report shows stress runs")
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list) or "seed" not in data:
        raise UsageError(f"{label} {path} is not a run report (python -m harness run --json PATH writes one)")
    version = data.get("format_version", 1)
    if version != FORMAT_VERSION:
        raise UsageError(f"{label} {path} is a report of format {version}; diff reads format {FORMAT_VERSION} "
                         f"(run it again with this harness)")
    if not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in data["cases"]):
        raise UsageError(f"{label} {path} is not a run report: a case without a name")
    return data


def check_comparable(a: dict, b: dict) -> None:
    """Reports of different seeds or world sizes hold different data: nothing to compare."""
    for key, what in (("seed", "seeds"), ("world_size", "world sizes")):
        if a.get(key) != b.get(key):
            raise UsageError(f"the reports are of different {what} (A {a.get(key)!r}, B {b.get(key)!r}): "
                             f"run both with the same --{key.replace('_', '-')}")


def _verdict(case: dict) -> str:
    oracle = f" ({case['oracle']})" if case.get("oracle") else ""
    return f"{case.get('outcome', '?')}{oracle}"


def diff_case(name: str, a: dict | None, b: dict | None) -> CaseDiff:
    """One case of both reports (None: not in that one)."""
    forced = (a or {}).get("forced_reuse") or (b or {}).get("forced_reuse") or ""
    if a is None or b is None:
        return CaseDiff(name, Status.ONLY_B if a is None else Status.ONLY_A, forced)
    ea = entries(a.get("tensors") or {}, f"A's case {name}")
    eb = entries(b.get("tensors") or {}, f"B's case {name}")
    note = "" if _verdict(a) == _verdict(b) else f"A {_verdict(a)}, B {_verdict(b)}"
    if not ea and not eb:
        why = a.get("skip_reason") or b.get("skip_reason") or "no tensor recorded in either run"
        return CaseDiff(name, Status.NOT_RUN, forced, note=note or why)
    keys = list(ea) + [k for k in eb if k not in ea]
    keys.sort(key=lambda k: (ea.get(k) or eb[k]).order())        # stable: the recorded order within a step
    differing = [k for k in keys if _side(ea.get(k)).numerics() != _side(eb.get(k)).numerics()]
    if not differing:
        return CaseDiff(name, Status.EQUAL, forced, tensors=len(keys), note=note)
    repro = tuple(dict.fromkeys(c["repro"] for c in (a, b) if c.get("repro")))
    k = differing[0]
    model, step, rank, full = k
    tensor, sep, field = full.partition("|")
    first = FirstDifference(model, step, rank, tensor, field if sep else "returned",
                            _side(ea.get(k)), _side(eb.get(k)))
    return CaseDiff(name, Status.DIFFERENT, forced, first, len(differing), len(keys), note, repro)


def _side(entry) -> Side:
    if entry is None:
        return Side(None)
    return Side(entry.token, entry.dtype, entry.shape, entry.compared)


def diff_reports(a: dict, b: dict) -> list[CaseDiff]:
    """Every case of either report, in A's order, then B's own."""
    by_a = {c["name"]: c for c in a["cases"]}
    by_b = {c["name"]: c for c in b["cases"]}
    names = list(by_a) + [n for n in by_b if n not in by_a]
    return [diff_case(n, by_a.get(n), by_b.get(n)) for n in names]


def _run_line(label: str, path: str, report: dict) -> str:
    return (f"{label}: {path}  sut {report.get('sut')}  reuse {report.get('reuse')}  "
            f"launcher {report.get('launcher')}")


def render(diffs: list[CaseDiff], a: dict, b: dict, path_a: str, path_b: str) -> str:
    lines = [_run_line("A", path_a, a), _run_line("B", path_b, b),
             f"seed {a.get('seed')}, world size {a.get('world_size')}, report format {FORMAT_VERSION}"]
    plain = [d for d in diffs if not d.forced_reuse]
    forced = [d for d in diffs if d.forced_reuse]
    lines += [d.line() for d in plain]
    if forced:
        lines.append("cases that force id reuse of their own (CaseSpec.reuse), whatever the run's --reuse; "
                     "PR #1326's \"no change in numerics\" is for runs that reuse no id:")
        lines += ["  " + dataclasses.replace(d, name=f"{d.name} (reuse {d.forced_reuse})").line().replace("\n", "\n  ")
                  for d in forced]
    counts = summary(diffs)
    lines.append(f"{len(diffs)} cases: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return "\n".join(lines)


def summary(diffs: list[CaseDiff]) -> dict:
    return {s.value: sum(d.status is s for d in diffs) for s in Status}


def to_json(diffs: list[CaseDiff], a: dict, b: dict, path_a: str, path_b: str) -> dict:
    def side(path, report):
        return {"path": path, "sut": report.get("sut"), "reuse": report.get("reuse"),
                "launcher": report.get("launcher")}

    return {"format_version": FORMAT_VERSION, "a": side(path_a, a), "b": side(path_b, b),
            "seed": a.get("seed"), "world_size": a.get("world_size"),
            "equal": not any(d.status.differs() for d in diffs), "summary": summary(diffs),
            "cases": [d.to_dict() for d in diffs]}


def main(argv=None) -> int:
    p = OneLineParser(prog="python -m harness diff", description=__doc__.splitlines()[0])
    p.add_argument("a", metavar="A.json", help="a run's JSON report (python -m harness run --json)")
    p.add_argument("b", metavar="B.json", help="another run's JSON report, same seed and world size")
    p.add_argument("--json", default=None, metavar="OUT", help="also write the diff as JSON here")
    args = p.parse_args(argv)
    if args.json:
        check_writable(args.json, "--json")
    a, b = load_report(args.a, "A"), load_report(args.b, "B")
    check_comparable(a, b)
    diffs = diff_reports(a, b)
    print(render(diffs, a, b, args.a, args.b))
    if args.json:
        write_atomic(args.json, json.dumps(to_json(diffs, a, b, args.a, args.b), indent=1))
        print(f"JSON diff: {args.json}")
    if not any(d.status.differs() for d in diffs):
        return 0
    command = ["python", "-m", "harness", "diff", args.a, args.b] + (["--json", args.json] if args.json else [])
    print("reproduce: " + " ".join(shlex.quote(c) for c in command))
    return 1
