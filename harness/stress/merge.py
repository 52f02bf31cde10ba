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
import os
import shutil
import sys

from harness.errors import OneLineParser, UsageError
from harness.report.stress_file import StressFile, read_report
from harness.report.stress_failure import FailureRecord, PartFailure
from harness.report.stress_model import Draws, PartInfo, StressReport, Timings, Totals
from harness.stress.record import (
    case_report_of, clear_previous, now_iso, publish, write_html_of, write_json_of, write_junit_of,
)
from harness.stress.repro import display_path
from harness.stress.summary import print_summary

MAX_NAMES_PER_FAILURE = 200
SAME = (("seed", "seed"), ("sut", "stack"), ("sut_options", "stack options"), ("launcher", "launcher"),
        ("world_size", "world size"))


@dataclasses.dataclass(frozen=True)
class Part:
    """One folder's report, and where it came from."""

    folder: str
    report: StressReport

    @property
    def stream(self) -> tuple[int, int]:
        stream = self.report.config.stream
        return stream.index, stream.count

    @property
    def label(self) -> str:
        i, n = self.stream
        return f"{i}/{n}"


@dataclasses.dataclass(frozen=True)
class Parts:
    """What merging takes: the parts kept (one per stream), the parts of the count not given,
    and what to tell people about them."""

    kept: list
    missing: tuple
    warnings: tuple

    @property
    def complete(self) -> bool:
        return not self.missing and all(p.report.complete for p in self.kept)


def load_part(folder: str) -> Part:
    """The stress report in ``folder``; UsageError (one line) when there is none."""
    if not os.path.isdir(folder):
        raise UsageError(f"stress merge: {folder!r} is not a folder")
    path = os.path.join(folder, "stress.json")
    if not os.path.isfile(path):
        raise UsageError(f"stress merge: {folder!r} holds no stress report (no stress.json)")
    try:
        return Part(folder, read_report(path))
    except UsageError as exc:
        raise UsageError(f"stress merge: {exc}") from None


def check_parts(parts: list[Part]) -> Parts:
    """The parts to merge (one per stream), those missing, and the warnings; UsageError for parts that differ."""
    first = parts[0].report.config
    for part in parts[1:]:
        config = part.report.config
        for key, what in SAME:
            if getattr(config, key) != getattr(first, key):
                raise UsageError(f"stress merge: {part.folder} has {what} {getattr(config, key)!r} but "
                                 f"{parts[0].folder} has {getattr(first, key)!r}: reports of different runs are "
                                 f"not merged")
        if part.stream[1] != parts[0].stream[1]:
            raise UsageError(f"stress merge: {part.folder} is part {part.label} but {parts[0].folder} is part "
                             f"{parts[0].label}: parts of different counts overlap and are not merged")
    warnings = []
    by_index: dict[int, Part] = {}
    for part in parts:
        i = part.stream[0]
        if i in by_index:
            keep = max(by_index[i], part, key=lambda p: (p.report.complete, p.report.started_at or ""))
            drop = part if keep is by_index[i] else by_index[i]
            warnings.append(f"warning: part {part.label} given twice ({by_index[i].folder}, {part.folder}; a retried "
                            f"job?): merging {keep.folder}, leaving out {drop.folder}")
            by_index[i] = keep
        else:
            by_index[i] = part
    count = parts[0].stream[1]
    missing = tuple(f"{i}/{count}" for i in range(count) if i not in by_index)
    if missing:
        warnings.append(f"warning: part{'s' * (len(missing) > 1)} {', '.join(missing)} missing: the merged report "
                        f"is incomplete")
    kept = [by_index[i] for i in sorted(by_index)]
    for part in kept:
        r = part.report
        if not r.complete:
            why = r.interrupted or r.error or "killed before it finished"
            warnings.append(f"warning: part {part.label} ({part.folder}) did not finish ({why}): merged with the "
                            f"{len(r.cases)} cases it finished")
    return Parts(kept, missing, tuple(warnings))


def merge_failures(parts: list[Part]) -> tuple[list[FailureRecord], dict]:
    """Failures by signature over every part; and (part label, its failure n) -> merged n."""
    merged: dict[str, FailureRecord] = {}
    numbers: dict[tuple, int] = {}
    for part in parts:
        for f in part.report.failures:
            m = merged.get(f.signature)
            if m is None:
                m = merged[f.signature] = dataclasses.replace(
                    f, n=len(merged) + 1, count=0, cases=[], parts=[], found_in=part.label, repro=None,
                    repro_from=None, repro_source=None, other_tries=list(f.other_tries))
            numbers[(part.label, f.n)] = m.n
            m.count += f.count
            m.cases = (m.cases + list(f.cases))[:MAX_NAMES_PER_FAILURE]
            m.parts.append(PartFailure(part.label, part.folder, f.n, f.count, f.status))
            if f.repro is not None and f.repro_rank() < m.repro_rank():
                m.repro, m.repro_from, m.repro_source = f.repro, part.label, part.folder
                m.status = f.status
                m.replay = f.replay
    return list(merged.values()), numbers


def _adopt_repro(failure: FailureRecord, out_dir: str) -> None:
    """Copy the failure's repro file into OUT as ``repro-<n>.json`` and point its command there."""
    repro = failure.repro
    if repro is None or not repro.file:
        return
    source = os.path.join(failure.repro_source, os.path.basename(repro.file))
    if not os.path.isfile(source):
        failure.repro = dataclasses.replace(repro, note_merge=f"{source} is missing: the command names the shard's "
                                                              f"own path")
        return
    target = os.path.join(out_dir, f"repro-{failure.n}.json")
    shutil.copyfile(source, target)
    publish(target)
    new = display_path(target)
    failure.repro = dataclasses.replace(repro, file=new, command=repro.command.replace(repro.file, new))


def merged_report(parts: Parts, out_dir: str, config_extra=None, interrupted: str | None = None) -> StressReport:
    """One report composed of the parts' reports: their cases and batches labelled with their
    part, their failures joined by signature, their counts and times summed, the elapsed time
    the longest part's; complete when every part finished and none is missing."""
    kept = parts.kept
    merged_from = tuple(PartInfo(p.label, p.folder, p.report.complete, len(p.report.cases),
                                 p.report.totals.cases_per_s) for p in kept)
    config = dataclasses.replace(kept[0].report.config, merged_from=merged_from, **(config_extra or {}))
    failures, numbers = merge_failures(kept)
    for f in failures:
        _adopt_repro(f, out_dir)
    cases, batches, draws, time = [], [], Draws(), Timings()
    for p in kept:
        label = p.label
        batches += [dataclasses.replace(b, part=label) for b in p.report.batches]
        cases += [dataclasses.replace(c, part=label, failure=numbers.get((label, c.failure)) if c.failure else None)
                  for c in p.report.cases]
        t = p.report.totals
        d = t.draw_counts()
        draws.add(d.draws, d.declined, d.declined_reasons)
        time.add(t.timings())
    stopped = [f"part {p.label}: {p.report.interrupted}" for p in kept if p.report.interrupted]
    errors = [f"part {p.label}: {p.report.error}" for p in kept if p.report.error]
    rates = (round(sum(p.report.totals.cases_per_s for p in kept), 3),
             round(sum(p.report.totals.cases_per_s_running for p in kept), 3))
    elapsed = max((p.report.totals.elapsed_s for p in kept), default=0.0)
    totals = Totals.of(cases, len(failures), len(batches), draws, time, elapsed, config.capabilities, rates,
                       parts=len(kept))
    return StressReport(
        config=config, started_at=min(p.report.started_at or now_iso() for p in kept), totals=totals,
        seed=config.seed, finished_at=max((p.report.finished_at or "") for p in kept) or now_iso(),
        complete=parts.complete, interrupted="; ".join(([interrupted] if interrupted else []) + stopped) or None,
        error="; ".join(errors) or None, failures=tuple(failures), batches=tuple(batches),
        warnings=parts.warnings, missing_parts=parts.missing, cases=tuple(cases))


def check_out(out_dir: str, folders: list[str]) -> None:
    """UsageError unless ``out_dir`` can take the merged report without overwriting a part."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UsageError(f"stress merge: OUT {out_dir!r} exists and is not a folder")
    for folder in folders:
        if os.path.abspath(folder) == os.path.abspath(out_dir):
            raise UsageError(f"stress merge: OUT {out_dir!r} is also one of the folders to merge")


def merge(out_dir: str, folders: list[str], config_extra=None, stream=None,
          interrupted: str | None = None) -> StressReport:
    """Check and load every folder, then write OUT's reports; UsageError before anything is written.
    ``interrupted``: why the run that made the folders was stopped (a ``--groups`` run's signal)."""
    if not folders:
        raise UsageError("stress merge: no folders to merge (usage: stress merge OUT DIR...)")
    check_out(out_dir, folders)
    parts = check_parts([load_part(folder) for folder in folders])
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"stress merge: OUT {out_dir!r} cannot be created: {exc.strerror or exc}") from None
    clear_previous(out_dir, run_folders=False)
    stream = stream or sys.stderr
    for line in parts.warnings:
        print(line, file=stream)
    report = merged_report(parts, out_dir, config_extra, interrupted)
    write_json_of(report, StressFile(os.path.join(out_dir, "stress.json")))
    write_junit_of(report, [case_report_of(c) for c in report.cases], out_dir)
    try:
        write_html_of(report, out_dir)
    except Exception as exc:      # a plot that cannot be drawn must not cost the merge its results
        print(f"warning: could not write index.html: {type(exc).__name__}: {exc}", file=stream)
    return report


def build_parser():
    p = OneLineParser(prog="python -m harness stress merge",
                      description="one stress report from the folders of shards or groups")
    p.add_argument("out", metavar="OUT", help="folder for the merged stress.json, junit.xml, index.html")
    p.add_argument("folders", metavar="DIR", nargs="*", help="a shard's or group's stress folder")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    report = merge(args.out, args.folders)
    print_summary(report, args.out)
    for f in report.failures:
        parts = ", ".join(p.part for p in f.parts)
        print(f"failure #{f.n} appeared in part{'s' * (len(f.parts) > 1)} {parts}")
    return 1 if report.totals.failing_cases else 0
