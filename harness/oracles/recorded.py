"""The reference oracle at the judge: ranks record their FP8 state, the judge compares it once.

In a controlled group (a controller and its ranks on one host) the ranks do not compute the
reference. After every step a rank packs what it would have compared -- every role's meta and
bytes from the stack's snapshot, and the tensors ``forward_backward`` returned -- into one byte
string (:class:`StepRecorder`; nothing of the model is kept), and its result carries the case's
records. The controller simulates each model of the case once for every rank
(:class:`CaseExpectation`, :func:`harness.reference.expected_models`), in the time it waits for
the ranks, and :func:`check_recorded` compares every rank's records with it through the same
functions a rank would call (:mod:`harness.oracles.reference`): the same finding, the same first
element with both values and both bit patterns, the same ``step`` and ``model``.

Why: with two ranks on two cores, each rank simulating the whole group before its steps put
the simulation twice on the critical path of every case (14.7 % of a rank's case time in the
bench); one simulation on the controller overlaps the ranks' own work. A stack with a reference
of its own (``expected_model``: TE, torchao) is compared on its ranks as before: its reference
may need the stack's process.
"""

from __future__ import annotations

import contextlib
import hashlib
import math

import torch

from harness.fp8.digest import flat_bytes, sha1_of, token
from harness.fp8.state import RoleState
from harness.oracles.findings import REFERENCE_DIFFERS, Failure, Oracle
from harness.oracles.reference import FINAL_FIELDS, STEP_FIELDS, final_mismatch, output_order, step_mismatch

_STATE, _OUTPUT, _FINAL = "s", "o", "f"
_DTYPES = {str(d): d for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8,
                               torch.int8, torch.int32, torch.int64, torch.float8_e4m3fn, torch.float8_e5m2)}


def judge_checks_reference(by_judge: bool, stack) -> bool:
    """Whether the judge checks ``stack``'s reference, where ranks can record for it
    (``by_judge``): yes unless the stack brings a reference of its own (``expected_model``)."""
    from harness.stacks.hooks import traits

    return by_judge and traits(stack).expected_model is None


class StepRecorder:
    """A rank's records of one case: ``(model, step, kind, name, dtype, shape)`` per tensor, the
    tensors' bytes, packed one step at a time, each tensor's SHA-1 and a digest of them all.

    Every tensor is hashed once, here: its SHA-1 gives the report's token of it
    (:func:`harness.fp8.digest.token`, what ``python -m harness diff`` compares), the case's
    digest for the isolation oracle (the executor folds in what :meth:`step` and :meth:`final`
    return) and the records' digest, a SHA-1 of every tensor's SHA-1 in layout order, which the
    judge matches against the reference's.

    ``keep_bytes=False`` keeps the layout and the digests only: what the judge needs of the
    reference to recognise records equal to it without encoding its bytes, and what a rank
    that compares its state itself (or runs a case alone) needs for the report and isolation."""

    def __init__(self, keep_bytes: bool = True):
        self.layout: list[list] = []
        self.tokens: list[str] = []
        self.compared: list[bool] = []
        self.chunks: list[bytes] = []
        self.keep_bytes = keep_bytes
        self._digest = hashlib.sha1()

    def _add(self, model: int, step: int, kind: str, named: list) -> list:
        flat, hashed = [], []
        for name, t in named:
            self.layout.append([model, step, kind, name, str(t.dtype), list(t.shape)])
            raw = flat_bytes(t)
            sha1 = sha1_of(raw)
            self._digest.update(sha1)
            self.tokens.append(token(t, raw, sha1))
            hashed.append((name, sha1))
            flat.append(raw)
        if flat and self.keep_bytes:
            self.chunks.append(torch.cat(flat).numpy().tobytes())
        return hashed

    def step(self, model: int, step: int, snapshot: dict, returned: dict) -> list:
        """After step ``step`` of model ``model``: the snapshot and what the step returned.
        Returns the snapshot's ``("key|field", sha1)`` pairs and the returned tensors' ``(name,
        sha1)`` pairs, each in layout order."""
        hashed = self._add(model, step, _STATE, _state_tensors(snapshot, STEP_FIELDS))
        outputs = self._add(model, step, _OUTPUT, [(n, returned[n]) for n in output_order(returned)])
        return hashed, outputs

    def final(self, model: int, weights: dict) -> list:
        """After the last optimizer step of model ``model``: what its weights are. Returns their
        ``("key|field", sha1)`` pairs, in layout order."""
        return self._add(model, -1, _FINAL, _state_tensors(weights, FINAL_FIELDS))

    def mark_compared(self, names) -> None:
        """Mark every tensor recorded since the last call compared with the reference when its
        name is in ``names`` (:func:`harness.oracles.reference.compared_names`), not compared
        otherwise: a rank that compares its state itself says which tensors it compared."""
        self.compared.extend(row[3] in names for row in self.layout[len(self.compared):])

    def to_dict(self) -> dict:
        out = {"layout": self.layout, "digest": self._digest.hexdigest(), "tokens": self.tokens}
        if self.compared:
            out["compared"] = self.compared + [False] * (len(self.layout) - len(self.compared))
        if self.keep_bytes:
            out["data"] = b"".join(self.chunks)     # raw: the message carries bytes apart from its JSON
        return out


def _state_tensors(states: dict, fields) -> list:
    out = []
    for key in sorted(states):
        st = states[key]
        for field in fields:
            t = getattr(st, field)
            if t is not None:
                out.append((f"{key}|{field}", t))
    return out


class Records:
    """A rank's records unpacked: per (model, step) the snapshot and the returned tensors; per
    model the final weights. Steps in the order they ran."""

    def __init__(self, recorded: dict):
        data = bytearray(recorded["data"])
        self.steps: dict[tuple, dict] = {}     # (model, step) -> {"s": {key: RoleState}, "o": {name: tensor}}
        self.finals: dict[int, dict] = {}
        offset = 0
        fields: dict[tuple, dict] = {}         # (model, step, kind, key) -> field -> tensor
        for model, step, kind, name, dtype, shape in recorded["layout"]:
            dt = _DTYPES[dtype]
            nbytes = math.prod(shape) * dt.itemsize
            if nbytes:
                t = torch.frombuffer(data, dtype=torch.uint8, count=nbytes, offset=offset).view(dt).reshape(shape)
            else:
                t = torch.empty(shape, dtype=dt)
            offset += nbytes
            if kind == _OUTPUT:
                self.steps.setdefault((model, step), {_STATE: {}, _OUTPUT: {}})[_OUTPUT][name] = t
            else:
                key, field = name.split("|")
                fields.setdefault((model, step, kind, key), {})[field] = t
                if kind == _STATE:
                    self.steps.setdefault((model, step), {_STATE: {}, _OUTPUT: {}})
        for (model, step, kind, key), by_field in fields.items():
            state = RoleState(*(by_field.get(f) for f in STEP_FIELDS))
            if kind == _STATE:
                self.steps[(model, step)][_STATE][key] = state
            else:
                self.finals.setdefault(model, {})[key] = state


class CaseExpectation:
    """The reference of one case for every rank: each model simulated at most once, on first need
    (:meth:`compute` does them all, while the ranks run the case)."""

    def __init__(self, case, run_seed: int, world_size: int):
        self.case, self.run_seed, self.world_size = case, run_seed, world_size
        self._models: dict[int, list] = {}
        self._digests: dict[int, dict] = {}

    def model(self, index: int) -> list:
        """Model ``index``'s expected states, by rank."""
        if index not in self._models:
            from harness.reference import expected_models

            with _one_thread():
                self._models[index] = expected_models(self.case, self.run_seed, self.world_size, index)
        return self._models[index]

    def compute(self) -> None:
        with _one_thread():       # the packing too: on a busy host a pool of threads only waits
            for r in range(self.world_size):
                self.digest(r)

    def digest(self, rank: int) -> dict:
        """The layout and the digest of what rank ``rank`` records when it runs the whole case as
        the reference says it must: records with the same layout and digest hold the same bytes."""
        if rank not in self._digests:
            self._digests[rank] = self.records(rank, keep_bytes=False)
        return self._digests[rank]

    def records(self, rank: int, keep_bytes: bool = True) -> dict:
        """What rank ``rank`` records when it runs the whole case as the reference says it must
        (:class:`StepRecorder`'s form, its bytes included unless ``keep_bytes`` is false)."""
        recorder = StepRecorder(keep_bytes=keep_bytes)
        for m in range(self.case.models):
            expected = self.model(m)[rank]
            for t in range(self.case.steps):
                recorder.step(m, t, expected.steps[t], expected.step_outputs(t))
            recorder.final(m, expected.final)
        return recorder.to_dict()


@contextlib.contextmanager
def _one_thread():
    """The reference's GEMMs on one thread, as on the ranks: a different thread count may sum in a
    different order, and the comparison is bit for bit. The caller's setting is restored."""
    before = torch.get_num_threads()
    if before != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if before != 1:
            torch.set_num_threads(before)


def check_recorded(result, expectation: CaseExpectation) -> None:
    """Compare one rank's records (``result.states``) with the reference, as the rank would have:
    every step's snapshot and returned tensors, then each model's final weights; the first
    difference becomes the rank's reference failure. Sets ``result.steps_compared``."""
    if not result.states:
        return
    expected = expectation.digest(result.rank)
    if result.states.get("digest") == expected["digest"] and result.states.get("layout") == expected["layout"]:
        # Every step's records as the reference's, in the same layout, and a SHA-1 of their bytes
        # equal to the reference's: the same bits throughout. Any other records are unpacked and
        # compared element by element, so a difference is reported at its first element.
        result.steps_compared += len({(m, t) for m, t, kind, *_ in result.states["layout"] if kind == _STATE})
        return
    rank = result.rank
    try:
        records = Records(result.states)
    except Exception as exc:      # records that do not parse are a finding, never a pass
        result.failures.append(Failure(Oracle.ERROR, f"the records of this rank's FP8 state cannot be read: "
                                                     f"{type(exc).__name__}: {exc}", rank=rank,
                                       kind="the records of FP8 state cannot be read"))
        return
    first = not any(f.oracle == Oracle.REFERENCE for f in result.failures)
    compared = 0
    models = sorted({m for m, _ in records.steps} | set(records.finals))
    for m in models:
        expected = expectation.model(m)[rank]
        for (mm, t) in sorted(k for k in records.steps if k[0] == m):
            got = records.steps[(mm, t)]
            mismatch = step_mismatch(expected, t, got[_STATE], got[_OUTPUT])
            compared += 1
            if mismatch and first:
                result.failures.append(Failure(Oracle.REFERENCE, mismatch, rank=rank, step=t, model=m,
                                               kind=REFERENCE_DIFFERS))
                first = False
        if m in records.finals:
            mismatch = final_mismatch(expected, records.finals[m])
            if mismatch and first:
                result.failures.append(Failure(Oracle.REFERENCE, mismatch, rank=rank, step=expectation.case.steps,
                                               model=m, kind=REFERENCE_DIFFERS))
                first = False
    result.steps_compared += compared


def reported_records(states: dict, expected_layout: list | None) -> dict:
    """What a report keeps of one rank's records (its layout and each tensor's token), each
    tensor marked compared with the reference when the reference holds it (``expected_layout``:
    :meth:`CaseExpectation.digest`'s; None: nothing was compared). Called by the judge once it
    has checked the records; a rank that compares its state itself marks its own
    (:meth:`StepRecorder.mark_compared`)."""
    layout, tokens = states.get("layout"), states.get("tokens")
    if not layout or tokens is None or len(tokens) != len(layout):
        return {}
    held = {tuple(row[:4]) for row in expected_layout or ()}
    return {"layout": layout, "tokens": tokens, "compared": [tuple(row[:4]) in held for row in layout]}
