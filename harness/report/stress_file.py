"""``stress.json``: its one writer and its one reader.

The file is a :class:`~harness.report.stress_model.StressReport` as JSON, the cases last, one
case a line. A stress run rewrites it after every case, so the writer (:class:`StressFile`)
keeps each case's JSON text from the first time it wrote it (a case never changes once it ran)
and serialises only the rest again. The reader (:func:`read_report`) gives the report back, or
one line (:class:`~harness.errors.UsageError`) saying why the file is not one.
"""

from __future__ import annotations

import json
import os

from harness.errors import UsageError
from harness.files import write_atomic
from harness.report.stress_model import FORMAT, OLD_FORMATS, StressReport


class StressFile:
    """Writes one report's ``stress.json``, again and again as the run goes on."""

    def __init__(self, path: str):
        self.path = path
        self._case_texts: list[str] = []

    def text(self, report: StressReport) -> str:
        cases = report.cases
        if len(cases) < len(self._case_texts):
            self._case_texts = []
        for case in cases[len(self._case_texts):]:
            self._case_texts.append(json.dumps(case.to_dict(), separators=(",", ":")))
        members = [f"{json.dumps(key)}: {json.dumps(value, indent=1)}" for key, value in report.header().items()]
        members.append('"cases": [' + ("\n" + ",\n".join(self._case_texts) + "\n" if self._case_texts else "") + "]")
        return "{\n" + ",\n".join(members) + "\n}\n"

    def write(self, report: StressReport) -> None:
        write_atomic(self.path, self.text(report))


def report_path(path: str) -> str:
    """``path/stress.json`` for a folder, else ``path``."""
    return os.path.join(path, "stress.json") if os.path.isdir(path) else path


def read_report(path: str, old_formats: bool = False) -> StressReport:
    """The stress report at ``path`` (a folder or its ``stress.json``); UsageError, one line,
    when there is none or it is not one. ``old_formats``: also read a report of an earlier format
    (what it holds of the current fields; its failures' signatures were made another way)."""
    file = report_path(path)
    try:
        with open(file) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise UsageError(f"{file}: no stress report (no such file)") from None
    except OSError as exc:
        raise UsageError(f"{file}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{file} is not a stress report (not JSON: {exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise UsageError(f"{file} is not a stress report (no 'format: {FORMAT}')")
    found = data.get("format")
    if found in OLD_FORMATS and not old_formats:
        raise UsageError(f"{file} is a stress report of format {found}, whose failure signatures were read from "
                         f"message text; this needs {FORMAT} (run the stress again)")
    if found != FORMAT and found not in OLD_FORMATS:
        raise UsageError(f"{file} is not a stress report (no 'format: {FORMAT}')")
    try:
        return StressReport.from_dict(data)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise UsageError(f"{file} is not a stress report of format {found}: {type(exc).__name__}: {exc}") from None
