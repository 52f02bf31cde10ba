"""A case's tensor table in a JSON report: every recorded tensor's token, by rank, model and step.

The judge (:func:`harness.runner.judge.case_report`) builds it with :func:`table` from what
each rank recorded (:class:`harness.oracles.recorded.StepRecorder`: every snapshot field, what
each step returned, the final weights); ``python -m harness diff`` reads it back with
:func:`entries`. It is written compactly, since a run of 45 cases records about 40,000 tensors:

```
"tensors": {
 "names": ["layer0.input|amax_history float32[16]", "layer0.input|scale float32[]", ...],
 "rows": {"rank 0 model 0 step 0": "0:5d41402abc4b 1:=43e00000 ...",
          "rank 0 model 0 final": "..."}
}
```

``names`` lists each tensor once as ``NAME DTYPE[SHAPE]``, where NAME is ``key|field`` for a
role's field (``layer0.weight|scale``: the snapshot's fields ``amax_history``, ``scale``,
``scale_inv``, ``fp8_bytes``, ``fp8_scale_inv``; after the last step the final weights'
``fp8_bytes`` and ``fp8_scale_inv``), or the name of what the step returned (``output``,
``grad_input``, ``layer0.weight_grad``, ``layer0.bias_grad``). A row holds one step of one model on one rank, its
tensors in the order they were recorded, each ``INDEX:TOKEN`` when the reference compared it
and ``INDEX~TOKEN`` when not (a stack whose reference leaves it out, or a run without the
reference). A token is ``=`` and the bit pattern of a one-element tensor, or the first 12 hex
digits of the SHA-1 of its bytes (:mod:`harness.fp8.digest`).
"""

from __future__ import annotations

import dataclasses

from harness.errors import UsageError

COMPARED, NOT_COMPARED = ":", "~"
FINAL = "final"


def table(records_by_rank: dict) -> dict:
    """The table of one case from each rank's reported records (``{"layout", "tokens",
    "compared"}``, :func:`harness.oracles.recorded.reported_records`); ``{}`` when no rank
    recorded anything."""
    names: dict[str, int] = {}
    rows: dict[str, list] = {}
    for rank in sorted(records_by_rank):
        rec = records_by_rank[rank]
        if not rec:
            continue
        compared = rec.get("compared") or [False] * len(rec["layout"])
        for (model, step, _kind, name, dtype, shape), tok, seen in zip(rec["layout"], rec["tokens"], compared):
            label = f"{name} {dtype.replace('torch.', '')}{list(shape)}".replace(", ", ",")
            index = names.setdefault(label, len(names))
            where = f"rank {rank} model {model} " + (FINAL if step < 0 else f"step {step}")
            rows.setdefault(where, []).append(f"{index}{COMPARED if seen else NOT_COMPARED}{tok}")
    if not rows:
        return {}
    return {"names": list(names), "rows": {k: " ".join(v) for k, v in rows.items()}}


@dataclasses.dataclass(frozen=True)
class Entry:
    """One tensor of one step of one model on one rank, as a report holds it."""

    model: int
    step: int | None          # None: the final weights, after the last step
    rank: int
    name: str                 # key|field, or a returned tensor's name
    dtype: str
    shape: str
    token: str
    compared: bool

    def where(self) -> str:
        step = "final weights" if self.step is None else f"step {self.step}"
        return f"model {self.model} {step} rank {self.rank} {self.name}"

    def order(self) -> tuple:
        """Model, then step (the final weights last), then rank."""
        return (self.model, 1 << 30 if self.step is None else self.step, self.rank)


def entries(tensors: dict, what: str) -> dict:
    """The table of a case (``what`` names it in errors), read back: ``{(model, step, rank, name):
    Entry}`` in the order recorded. UsageError (one line) on a table that does not parse."""
    try:
        names = [n.rsplit(" ", 1) for n in tensors.get("names", [])]
        out = {}
        for where, row in tensors.get("rows", {}).items():
            parts = where.split()
            if len(parts) not in (5, 6) or parts[0] != "rank" or parts[2] != "model":
                raise ValueError(f"row {where!r}")
            rank, model = int(parts[1]), int(parts[3])
            step = None if parts[4] == FINAL else int(parts[5])
            for item in row.split():
                sep = COMPARED if COMPARED in item else NOT_COMPARED
                index, tok = item.split(sep, 1)
                name, typed = names[int(index)]
                dtype, _, shape = typed.partition("[")
                out[(model, step, rank, name)] = Entry(model, step, rank, name, dtype, "[" + shape, tok,
                                                       sep == COMPARED)
        return out
    except (ValueError, IndexError, AttributeError, TypeError) as exc:
        raise UsageError(f"{what}: its tensor table does not parse ({exc})") from None
