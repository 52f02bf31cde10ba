"""What one rank reports for one case: findings, counters, digests and its ledger of collectives.

Plain data: it crosses the process boundary as JSON (:meth:`RankResult.to_dict`).
"""

from __future__ import annotations

import dataclasses
import hashlib

from harness.idreuse.shells import ShellMiss
from harness.oracles.findings import Failure

__harness_hidden__ = True

EXAMPLES_PER_MODEL = 4      # reuse events per model shown in RankResult.reuse_examples
_RECORD_LISTS = ("failures", "reuse_log", "shell_misses")     # lists of records, each turned into a dict below


@dataclasses.dataclass(frozen=True)
class ReuseEvent:
    """A new object of model ``model`` took the id of a dead tracked object (each told by its
    type and its path in its model, :func:`harness.idreuse.tracker.walk_model`)."""

    model: int
    new: str
    old: str

    def line(self) -> str:
        return f"model {self.model}: {self.new} took the id of dead {self.old}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ReuseEvent":
        return cls(**d)


@dataclasses.dataclass
class RankResult:
    case: str
    rank: int
    failures: list = dataclasses.field(default_factory=list)
    warnings: list = dataclasses.field(default_factory=list)
    reuse_events: int = 0
    reuse_examples: list = dataclasses.field(default_factory=list)    # lines for people: a few per model
    reuse_log: list = dataclasses.field(default_factory=list)   # every ReuseEvent of the model walks, uncapped
    reuse_misses: int = 0     # forced releases whose id no new reuse target took
    shell_misses: list = dataclasses.field(default_factory=list)   # every ShellMiss: a dead model object no shell landed on
    steps_compared: int = 0
    digest: str = ""
    meta_fingerprints: list = dataclasses.field(default_factory=list)
    collectives: list = dataclasses.field(default_factory=list)
    retention: dict = dataclasses.field(default_factory=dict)
    models_built: int = 0
    duration_s: float = 0.0
    phase_s: dict = dataclasses.field(default_factory=dict)
    states: dict = dataclasses.field(default_factory=dict)   # records for the judge's reference check
    tensors: dict = dataclasses.field(default_factory=dict)  # each tensor's token for the report (no bytes)
    start_registries: dict = dataclasses.field(default_factory=dict)   # registry summary as the case began
    start_containers: dict = dataclasses.field(default_factory=dict)   # every container's, as the case began
    model_containers: list = dataclasses.field(default_factory=list)   # ... after each model died

    def to_dict(self) -> dict:
        try:
            # Results are plain data (str, numbers, lists, dicts) but for the failures: copy them
            # directly, which is what dataclasses.asdict does through copy.deepcopy, many times slower.
            d = {}
            for field in dataclasses.fields(self):
                value = getattr(self, field.name)
                # the records are built for this dict alone: nothing else holds them
                d[field.name] = (list(value) if field.name in _RECORD_LISTS else value if field.name == "states"
                                 else _plain_copy(value))
        except _NotPlain:
            d = dataclasses.asdict(self)
        d["failures"] = [f.to_dict() if isinstance(f, Failure) else f for f in self.failures]
        d["reuse_log"] = [e.to_dict() for e in self.reuse_log]
        d["shell_misses"] = [e.to_dict() for e in self.shell_misses]
        return d

    def add_reuse(self, model: int, events: list) -> None:
        """Model ``model``'s reuse events (``(new, dead)`` pairs of descriptions, in walk order):
        counted, every one kept in :attr:`reuse_log`, the first :data:`EXAMPLES_PER_MODEL` of them
        shown in :attr:`reuse_examples`. Which ones come first depends on which objects happened
        to land on a dead one's address: a check for a given event reads the log."""
        logged = [ReuseEvent(model, new, old) for new, old in events]
        self.reuse_events += len(logged)
        self.reuse_log += logged
        self.reuse_examples += [e.line() for e in logged[:EXAMPLES_PER_MODEL]]

    def add_shell_misses(self, model: int, misses: list) -> None:
        """Model ``model``'s objects that died and got no shell (:meth:`Shells.take
        <harness.idreuse.shells.Shells.take>`), every one kept: the next model's instances of
        their classes were not born where the case forces them."""
        self.shell_misses += [dataclasses.replace(miss, model=model) for miss in misses]

    def left_with_error(self) -> bool:
        """The case ended on an exception here: peers still waiting at the precheck are told so
        (a buffer-integrity failure is raised out of the stack's call too: a peer that went on to
        its next collective must not read this rank's early end as "fewer collectives")."""
        return any(f.oracle in ("error", "liveness", "buffer-integrity") for f in self.failures)

    @classmethod
    def from_dict(cls, d: dict) -> "RankResult":
        d = dict(d)
        d["failures"] = [Failure.from_dict(f) for f in d.get("failures", [])]
        d["reuse_log"] = [ReuseEvent.from_dict(e) for e in d.get("reuse_log", [])]
        d["shell_misses"] = [ShellMiss.from_dict(e) for e in d.get("shell_misses", [])]
        return cls(**d)


class _NotPlain(Exception):
    pass


_SCALARS = (str, int, float, bool, type(None))


def _plain_copy(value):
    """A deep copy of JSON-like data (exact types only); raises _NotPlain for anything else."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        return {k: _plain_copy(v) for k, v in value.items()}
    if kind is list:
        return [_plain_copy(v) for v in value]
    raise _NotPlain(kind.__name__)


def fold_digests(h, hashed: list) -> None:
    """Feed one step's ``("key|field", sha1)`` pairs (what the recorder hashed:
    :meth:`harness.oracles.recorded.StepRecorder.step`) into the case digest ``h``, the one the
    isolation oracle compares: every role's meta and bytes, by name, without hashing them again."""
    for name, sha1 in hashed:
        h.update(name.encode())
        h.update(sha1)


def meta_fingerprint(hashed: list) -> str:
    """The all-reduced part of a snapshot (histories and scales), from the step's ``("key|field",
    sha1)`` pairs: equal on every rank when sound."""
    h = hashlib.sha256()
    for name, sha1 in hashed:
        if name.endswith(("|amax_history", "|scale")):
            h.update(sha1)
    return h.hexdigest()[:16]
