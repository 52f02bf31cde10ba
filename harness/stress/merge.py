"""``python -m harness stress merge OUT DIR...``: one stress report from the folders of many.

Each DIR holds the ``stress.json`` of one shard (``stress --shard I/N``) or one group of a
``--groups`` run; OUT gets one ``stress.json`` (a stress report like any other: ``harness
report`` reads it as one night), ``junit.xml``, ``index.html`` and the repro files of its
failures. Cases, models, reuse events and throughput are summed (the parts ran side by side:
cases per second is the sum of theirs); the elapsed time is the longest part's. Failures with
one signature (:mod:`harness.stress.signature`) are one failure, counted over every part, with
the parts it appeared in and the shortest repro that reproduced (fewest cases, then fewest steps,
models and layers), copied into OUT as ``repro-<n>.json`` with its command pointing there.

What merging checks, before anything is written:

* every DIR holds a stress report: else one line and exit 2 (nothing written);
* one seed, one stack (``--sut`` and its options), one launcher and world size, one shard count:
  parts that differ are refused, not mixed (exit 2): shards of different counts draw overlapping
  batches (:mod:`harness.stress.streams`), so their cases would be counted twice;
* a part given twice (a retried job: the same stream index) keeps the complete one, else the
  later one, with a warning; missing parts and parts that did not finish (killed, interrupted)
  are warned about, merged with the cases they finished, and make the merged report incomplete.

Called by the stress command line (``merge``), and by :mod:`harness.stress.groups` when a
``--groups`` run's groups have finished. Exit 0 merged without failures, 1 with failures,
2 bad input.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys

from harness.errors import OneLineParser, UsageError
from harness.report.model import CaseReport
from harness.stress.record import FORMAT, StressRecord, clear_previous, now_iso, publish
from harness.stress.repro import display_path
from harness.stress.summary import print_summary

MAX_NAMES_PER_FAILURE = 200
SAME = (("seed", "seed"), ("sut", "stack"), ("sut_options", "stack options"), ("launcher", "launcher"),
        ("world_size", "world size"))


@dataclasses.dataclass(frozen=True)
class Part:
    """One folder's report, and where it came from."""

    folder: str
    data: dict

    @property
    def stream(self) -> tuple[int, int]:
        s = self.data.get("config", {}).get("stream") or {"index": 0, "count": 1}
        return int(s["index"]), int(s["count"])

    @property
    def label(self) -> str:
        i, n = self.stream
        return f"{i}/{n}"


def load_part(folder: str) -> Part:
    """The stress report in ``folder``; UsageError (one line) when there is none."""
    path = os.path.join(folder, "stress.json")
    if not os.path.isdir(folder):
        raise UsageError(f"stress merge: {folder!r} is not a folder")
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise UsageError(f"stress merge: {folder!r} holds no stress report (no stress.json)") from None
    except OSError as exc:
        raise UsageError(f"stress merge: {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"stress merge: {path} is not a stress report (not JSON: {exc.msg} at line "
                         f"{exc.lineno})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("config"), dict):
        raise UsageError(f"stress merge: {path} is not a stress report (no 'format: {FORMAT}')")
    return Part(folder, data)


def check_parts(parts: list[Part]) -> tuple[list[Part], list[str]]:
    """The parts to merge (one per stream) and the warnings; UsageError for parts that differ."""
    first = parts[0].data["config"]
    for part in parts[1:]:
        config = part.data["config"]
        for key, what in SAME:
            if config.get(key) != first.get(key):
                raise UsageError(f"stress merge: {part.folder} has {what} {config.get(key)!r} but {parts[0].folder} "
                                 f"has {first.get(key)!r}: reports of different runs are not merged")
        if part.stream[1] != parts[0].stream[1]:
            raise UsageError(f"stress merge: {part.folder} is part {part.label} but {parts[0].folder} is part "
                             f"{parts[0].label}: parts of different counts overlap and are not merged")
    warnings = []
    by_index: dict[int, Part] = {}
    for part in parts:
        i = part.stream[0]
        if i in by_index:
            keep = max(by_index[i], part, key=lambda p: (bool(p.data.get("complete")), p.data.get("started_at") or ""))
            drop = part if keep is by_index[i] else by_index[i]
            warnings.append(f"warning: part {part.label} given twice ({by_index[i].folder}, {part.folder}; a retried "
                            f"job?): merging {keep.folder}, leaving out {drop.folder}")
            by_index[i] = keep
        else:
            by_index[i] = part
    count = parts[0].stream[1]
    missing = [f"{i}/{count}" for i in range(count) if i not in by_index]
    if missing:
        warnings.append(f"warning: part{'s' * (len(missing) > 1)} {', '.join(missing)} missing: the merged report "
                        f"is incomplete")
    kept = [by_index[i] for i in sorted(by_index)]
    for part in kept:
        if not part.data.get("complete"):
            why = part.data.get("interrupted") or part.data.get("error") or "killed before it finished"
            warnings.append(f"warning: part {part.label} ({part.folder}) did not finish ({why}): merged with the "
                            f"{len(part.data.get('cases', []))} cases it finished")
    return kept, warnings


def _repro_rank(repro: dict | None) -> tuple:
    """Smaller is better: verified first, then fewest cases, then the simplest case."""
    if not repro:
        return (2, 0, 0, 0, 0)
    return (0 if repro.get("verified") else 1, repro.get("cases") or 0, repro.get("steps") or 0,
            repro.get("models") or 0, repro.get("layers") or 0)


def merge_failures(parts: list[Part]) -> tuple[list[dict], dict]:
    """Failures by signature over every part; and (part label, its failure n) -> merged n."""
    merged: dict[str, dict] = {}
    numbers: dict[tuple, int] = {}
    for part in parts:
        for f in part.data.get("failures", []):
            sig = f.get("signature") or f["oracle"]
            m = merged.get(sig)
            if m is None:
                m = merged[sig] = dict(f, n=len(merged) + 1, count=0, cases=[], parts=[], found_in=part.label,
                                       repro=None, repro_from=None, repro_source=None)
            numbers[(part.label, f["n"])] = m["n"]
            m["count"] += f.get("count", 0)
            m["cases"] = (m["cases"] + list(f.get("cases", [])))[:MAX_NAMES_PER_FAILURE]
            m["parts"].append({"part": part.label, "folder": part.folder, "n": f["n"], "count": f.get("count", 0),
                               "status": f.get("status")})
            if f.get("repro") and _repro_rank(f["repro"]) < _repro_rank(m["repro"]):
                m["repro"], m["repro_from"], m["repro_source"] = dict(f["repro"]), part.label, part.folder
                m["status"] = f.get("status")
                m["replay"] = f.get("replay")
    return list(merged.values()), numbers


def _adopt_repro(failure: dict, out_dir: str) -> None:
    """Copy the failure's repro file into OUT as ``repro-<n>.json`` and point its command there."""
    repro = failure.get("repro")
    if not repro or not repro.get("file"):
        return
    source = os.path.join(failure["repro_source"], os.path.basename(repro["file"]))
    if not os.path.isfile(source):
        failure["repro"]["note_merge"] = f"{source} is missing: the command names the shard's own path"
        return
    target = os.path.join(out_dir, f"repro-{failure['n']}.json")
    shutil.copyfile(source, target)
    publish(target)
    old, new = repro["file"], display_path(target)
    repro["file"] = new
    if repro.get("command"):
        repro["command"] = repro["command"].replace(old, new)


class MergedRecord(StressRecord):
    """A :class:`StressRecord` made of the parts' records: what the writers read."""

    def __init__(self, parts: list[Part], out_dir: str, warnings: list[str], config_extra=None,
                 interrupted: str | None = None):
        first = parts[0].data
        config = dict(first["config"], **(config_extra or {}))
        config["merged_from"] = [{"part": p.label, "folder": p.folder, "complete": bool(p.data.get("complete")),
                                  "cases": len(p.data.get("cases", [])),
                                  "cases_per_s": p.data.get("totals", {}).get("cases_per_s", 0.0)} for p in parts]
        super().__init__(config, out_dir)
        self.parts = parts
        self.warnings = list(warnings)
        self.started_at = min(p.data.get("started_at") or now_iso() for p in parts)
        self.finished_at = max((p.data.get("finished_at") or "") for p in parts) or None
        self.complete = all(p.data.get("complete") for p in parts) and not any("missing" in w for w in warnings)
        stopped = [f"part {p.label}: {p.data['interrupted']}" for p in parts if p.data.get("interrupted")]
        self.interrupted = "; ".join(([interrupted] if interrupted else []) + stopped) or None
        errors = [f"part {p.label}: {p.data['error']}" for p in parts if p.data.get("error")]
        self.error = "; ".join(errors) or None
        self.failures, numbers = merge_failures(parts)
        for f in self.failures:
            _adopt_repro(f, out_dir)
        for p in parts:
            label = p.label
            for b in p.data.get("batches", []):
                self.batches.append(dict(b, part=label))
            for c in p.data.get("cases", []):
                entry = dict(c, part=label, failure=numbers.get((label, c.get("failure"))) if c.get("failure") else None)
                self.cases.append(entry)
                self._case_json.append(json.dumps(entry, separators=(",", ":")))
                self.case_reports.append(_case_report(entry))
            t = p.data.get("totals", {})
            self.draws += t.get("draws", 0)
            self.declined += t.get("declined_draws", 0)
            for reason, n in (t.get("declined_reasons") or {}).items():
                self.declined_reasons[reason] = self.declined_reasons.get(reason, 0) + n
            for key in self.time:
                self.time[key] += t.get(key, 0.0)
        self._elapsed_final = max((p.data.get("totals", {}).get("elapsed_s", 0.0) for p in parts), default=0.0)
        if self.finished_at is None:
            self.finished_at = now_iso()

    def totals(self) -> dict:
        t = super().totals()
        rates = [p.data.get("totals", {}) for p in self.parts]
        t["cases_per_s"] = round(sum(r.get("cases_per_s", 0.0) for r in rates), 3)
        t["cases_per_s_running"] = round(sum(r.get("cases_per_s_running", 0.0) for r in rates), 3)
        t["parts"] = len(self.parts)
        return t

    def header(self) -> dict:
        return dict(super().header(), warnings=self.warnings)


def _case_report(entry: dict) -> CaseReport:
    return CaseReport(name=entry["name"], outcome=entry["outcome"], oracle=entry.get("oracle"),
                      oracles=list(entry.get("oracles") or []), ranks=list(entry.get("ranks") or []),
                      reuse_events=entry.get("reuse_events", 0), detail=entry.get("detail", ""),
                      steps_compared=entry.get("steps_compared", 0), models_built=entry.get("models_built", 0),
                      duration_s=entry.get("duration_s", 0.0), skip_reason=entry.get("skip_reason") or "")


def check_out(out_dir: str, folders: list[str]) -> None:
    """UsageError unless ``out_dir`` can take the merged report without overwriting a part."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UsageError(f"stress merge: OUT {out_dir!r} exists and is not a folder")
    for folder in folders:
        if os.path.abspath(folder) == os.path.abspath(out_dir):
            raise UsageError(f"stress merge: OUT {out_dir!r} is also one of the folders to merge")


def merge(out_dir: str, folders: list[str], config_extra=None, stream=None, interrupted: str | None = None) -> MergedRecord:
    """Check and load every folder, then write OUT's reports; UsageError before anything is written.
    ``interrupted``: why the run that made the folders was stopped (a ``--groups`` run's signal)."""
    if not folders:
        raise UsageError("stress merge: no folders to merge (usage: stress merge OUT DIR...)")
    check_out(out_dir, folders)
    parts, warnings = check_parts([load_part(folder) for folder in folders])
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"stress merge: OUT {out_dir!r} cannot be created: {exc.strerror or exc}") from None
    clear_previous(out_dir, run_folders=False)
    stream = stream or sys.stderr
    for line in warnings:
        print(line, file=stream)
    record = MergedRecord(parts, out_dir, warnings, config_extra, interrupted)
    record.write_json()
    record.write_junit()
    try:
        record.write_html()
    except Exception as exc:      # a plot that cannot be drawn must not cost the merge its results
        print(f"warning: could not write index.html: {type(exc).__name__}: {exc}", file=stream)
    return record


def build_parser():
    p = OneLineParser(prog="python -m harness stress merge",
                      description="one stress report from the folders of shards or groups")
    p.add_argument("out", metavar="OUT", help="folder for the merged stress.json, junit.xml, index.html")
    p.add_argument("folders", metavar="DIR", nargs="*", help="a shard's or group's stress folder")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    record = merge(args.out, args.folders)
    print_summary(record)
    for f in record.failures:
        parts = ", ".join(p["part"] for p in f["parts"])
        print(f"failure #{f['n']} appeared in part{'s' * (len(f['parts']) > 1)} {parts}")
    return 1 if record.totals()["failing_cases"] else 0
