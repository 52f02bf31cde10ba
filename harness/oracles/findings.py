"""A failure as plain data: which oracle, on which rank, at which step, what exactly."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Failure:
    oracle: str
    detail: str
    rank: int | None = None
    step: int | None = None
    model: int | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Failure":
        return cls(**d)

    def line(self) -> str:
        where = []
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        if self.model is not None:
            where.append(f"model {self.model}")
        if self.step is not None:
            where.append(f"step {self.step}")
        return f"[{self.oracle}] {', '.join(where)}{': ' if where else ''}{self.detail}"
