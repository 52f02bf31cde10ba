"""Typed records as plain data and back: the base class of the stress report's records.

:class:`Record` gives a dataclass ``to_dict`` (nested records, enums and case specs made plain)
and ``from_dict`` (what each field is read back as, named in ``_convert``). Used by
:mod:`harness.report.stress_failure` and :mod:`harness.report.stress_model`.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, ClassVar

from harness.case.spec import CaseSpec


def plain(value: Any) -> Any:
    if isinstance(value, (Record, CaseSpec)):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def many(convert):
    return lambda values: [convert(v) for v in values or []]


class Record:
    """Plain data out and back for a dataclass: ``_convert`` names how a field is read back
    (a nested record, a list of them, an enum); every other field is taken as it is. Keys the
    class does not know are left out on reading."""

    _convert: ClassVar[dict] = {}

    def to_dict(self) -> dict:
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict):
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in data.items():
            if key in known:
                convert = cls._convert.get(key)
                kwargs[key] = convert(value) if convert is not None and value is not None else value
        return cls(**kwargs)
