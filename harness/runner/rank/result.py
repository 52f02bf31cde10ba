"""What one rank reports for one case: findings, counters, digests and its ledger of collectives.

Plain data: it crosses the process boundary as JSON (:meth:`RankResult.to_dict`).
"""

from __future__ import annotations

import dataclasses
import hashlib

import torch

from harness.oracles.findings import Failure

__harness_hidden__ = True


@dataclasses.dataclass
class RankResult:
    case: str
    rank: int
    failures: list = dataclasses.field(default_factory=list)
    warnings: list = dataclasses.field(default_factory=list)
    reuse_events: int = 0
    reuse_examples: list = dataclasses.field(default_factory=list)
    reuse_misses: int = 0     # forced releases whose id no new reuse target took
    steps_compared: int = 0
    digest: str = ""
    meta_fingerprints: list = dataclasses.field(default_factory=list)
    collectives: list = dataclasses.field(default_factory=list)
    retention: dict = dataclasses.field(default_factory=dict)
    models_built: int = 0
    duration_s: float = 0.0
    phase_s: dict = dataclasses.field(default_factory=dict)
    states: dict = dataclasses.field(default_factory=dict)   # records for the judge's reference check

    def to_dict(self) -> dict:
        try:
            # Results are plain data (str, numbers, lists, dicts) but for the failures: copy them
            # directly, which is what dataclasses.asdict does through copy.deepcopy, many times slower.
            d = {}
            for field in dataclasses.fields(self):
                value = getattr(self, field.name)
                # the records are built for this dict alone: nothing else holds them
                d[field.name] = (list(value) if field.name == "failures" else value if field.name == "states"
                                 else _plain_copy(value))
        except _NotPlain:
            d = dataclasses.asdict(self)
        d["failures"] = [f.to_dict() if isinstance(f, Failure) else f for f in self.failures]
        return d

    def left_with_error(self) -> bool:
        """The case ended on an exception here: peers still waiting at the precheck are told so."""
        return any(f.oracle in ("error", "liveness") for f in self.failures)

    @classmethod
    def from_dict(cls, d: dict) -> "RankResult":
        d = dict(d)
        d["failures"] = [Failure.from_dict(f) for f in d.get("failures", [])]
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


def _bytes_of(t: torch.Tensor) -> bytes:
    t = t.detach()
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        t = t.view(torch.uint8)
    return t.numpy().tobytes()


def hash_state(h, states: dict) -> None:
    """Feed every role's meta and bytes, in key order, into the case digest ``h``."""
    for key in sorted(states):
        st = states[key]
        h.update(key.encode())
        for field in ("amax_history", "scale", "scale_inv", "fp8_bytes", "fp8_scale_inv"):
            t = getattr(st, field)
            if t is not None:
                h.update(_bytes_of(t))


def hash_returned(h, returned: dict) -> None:
    """Feed what ``forward_backward`` returned (``StepOutputs.named()``: output, input gradient,
    weight gradients), in name order, into the case digest ``h``: a run whose GEMMs differ while
    its FP8 state does not has another digest."""
    for name in sorted(returned):
        h.update(name.encode())
        t = returned[name].detach()
        if t.device.type != "cpu":
            t = t.cpu()
        h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())   # any dtype, bf16 too


def meta_fingerprint(states: dict) -> str:
    """The all-reduced part of a snapshot (histories and scales): equal on every rank when sound."""
    h = hashlib.sha256()
    for key in sorted(states):
        st = states[key]
        for t in (st.amax_history, st.scale):
            h.update(_bytes_of(t))
    return h.hexdigest()[:16]
