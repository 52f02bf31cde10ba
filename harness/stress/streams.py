"""Which batches of a seed's case sequence a stress process runs: shards and groups.

A seed defines ONE sequence of batches, numbered 0, 1, 2, ...; batch ``b`` is drawn from
``derive_seed("stress-batch", seed, b)`` and its cases are named ``stress/b<b>/c<i>``. A run
takes a *stream* of that sequence: stream ``k`` of ``K`` runs batches ``k, k + K, k + 2K, ...``.
Streams of one ``K`` are disjoint by construction (no batch number is in two of them), and a
stream's batches do not depend on how fast it runs.

``--shard I/N`` splits the sequence round-robin over N shards (shard I is stream I of N);
``--groups G`` splits a shard's batches round-robin over its G rank groups. So group ``g`` of
shard ``I/N`` runs batches ``I + N*g + N*G*j``: stream ``I + N*g`` of ``N*G``. That is, ``--shard
I/N --groups G`` runs exactly what shards ``I, I+N, ..., I+(G-1)N`` of ``N*G`` run one group
each; ``--groups G`` alone runs what ``--shard g/G`` for g in 0..G-1 run. Without either the
stream is 0 of 1: batches 0, 1, 2, ... as a single-group run always drew them.

The stress command line parses ``--shard`` here (:func:`parse_shard`); the session asks its
:class:`Stream` for the number of its j-th batch; the group launcher (:mod:`harness.stress.groups`)
gives each of its children its stream with :func:`group_stream`.
"""

from __future__ import annotations

import dataclasses
import re

from harness.errors import UsageError

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclasses.dataclass(frozen=True)
class Stream:
    """Stream ``index`` of ``count``: the batches ``index + count * j`` for j = 0, 1, 2, ..."""

    index: int = 0
    count: int = 1

    def __post_init__(self):
        for name, value in (("index", self.index), ("count", self.count)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise UsageError(f"shard {name} must be a whole number, got {value!r}")
        if self.count < 1:
            raise UsageError(f"--shard I/N: N must be at least 1, got {self.count}")
        if not 0 <= self.index < self.count:
            raise UsageError(f"--shard {self.index}/{self.count}: I must be 0 to {self.count - 1} (shards count from 0)")

    def batch(self, j: int) -> int:
        """The seed's batch number of this stream's ``j``-th batch."""
        return self.index + self.count * j

    def text(self) -> str:
        return f"{self.index}/{self.count}"

    def to_dict(self) -> dict:
        """As a report's ``config.stream`` holds it (``stress merge`` reads it back)."""
        return {"index": self.index, "count": self.count}


def parse_shard(text: str) -> Stream:
    """``"I/N"`` (I from 0) as a :class:`Stream`; anything else is a :class:`UsageError` line."""
    m = _SHARD.match(text or "")
    if m is None:
        raise UsageError(f"--shard must be I/N with whole numbers, shards counting from 0 (e.g. 0/4), got {text!r}")
    return Stream(int(m.group(1)), int(m.group(2)))


def group_stream(shard: Stream, groups: int, group: int) -> Stream:
    """The stream group ``group`` of ``groups`` runs within ``shard``: ``shard.index + shard.count *
    group`` of ``shard.count * groups``."""
    if not 0 <= group < groups:
        raise UsageError(f"group {group} is not one of 0..{groups - 1}")
    return Stream(shard.index + shard.count * group, shard.count * groups)
