"""Run one case in this process, as one rank of a group, with the per-rank oracles.

For each of the case's models: build (counting ids reused from dead objects), K steps each
compared with the reference bit for bit, destroy, collect, then the hygiene scan and the
retention measurement. Collectives go through the ledger; the cross-rank and isolation oracles
compare ledgers and digests afterwards, in the controller.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import sys
import threading
import time
import traceback
import weakref

import torch

from harness.case.data import initial_weights, step_grad_output, step_inputs, tp_shapes, tp_tensor
from harness.case.spec import CaseSpec
from harness.idreuse.morgue import MORGUE, ReusePolicy, forcing_window
from harness.idreuse.tracker import Graveyard, collect, walk_model
from harness.oracles.findings import Failure
from harness.oracles.hygiene import stale_ids, survivors, undeclared_stale_ids
from harness.oracles.reference import FINAL_FIELDS, compare_outputs, compare_states
from harness.oracles.retention import growth, registry_sizes, retained_state
from harness.reference import expected_model
from harness.runner.ledger import LEDGER
from harness.stacks.protocol import BuildContext, StepOutputs

GRAVEYARD = Graveyard()


class _LastRegistrySizes:
    """The registry sizes a case ended with, so the next case on the same stack starts from them.

    Walking the registries for bytes costs time in proportion to what they retain (TE-like
    stacks never prune their amax buffers): 7 % of a rank's samples after a few dozen small
    cases, when it ran at both ends of every case. Nothing of the stack runs between two cases
    of a rank, so the sizes at the end of one are those at the start of the next. Entry counts
    are cheap and are always taken afresh: a registry whose count changed (a reset, say) is
    walked again.
    """

    def __init__(self):
        self.stack_ref = None          # a weak reference: an id() could name a later stack
        self.sizes: dict | None = None

    def before_case(self, stack) -> dict:
        same = self.stack_ref is not None and self.stack_ref() is stack
        return registry_sizes(stack.registries(), known=self.sizes if same else None)

    def after_case(self, stack) -> dict:
        sizes = registry_sizes(stack.registries())
        try:
            self.stack_ref, self.sizes = weakref.ref(stack), sizes
        except TypeError:              # a stack without weak reference support: no caching
            self.forget()
        return sizes

    def forget(self) -> None:
        self.stack_ref = self.sizes = None


LAST_REGISTRY_SIZES = _LastRegistrySizes()


@dataclasses.dataclass
class RunOptions:
    run_seed: int = 0
    reuse: ReusePolicy = dataclasses.field(default_factory=ReusePolicy)
    strict: bool = False
    deadline_s: float = 10.0
    reset_between_cases: bool = False
    check_reference: bool = True

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["reuse"] = self.reuse.text()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RunOptions":
        d = dict(d)
        d["reuse"] = ReusePolicy.parse(d.get("reuse", "natural"))
        return cls(**d)


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

    def to_dict(self) -> dict:
        try:
            # Results are plain data (str, numbers, lists, dicts) but for the failures: copy them
            # directly, which is what dataclasses.asdict does through copy.deepcopy, many times slower.
            d = {}
            for field in dataclasses.fields(self):
                value = getattr(self, field.name)
                d[field.name] = (list(value) if field.name == "failures" else _plain_copy(value))
        except _NotPlain:
            d = dataclasses.asdict(self)
        d["failures"] = [f.to_dict() if isinstance(f, Failure) else f for f in self.failures]
        return d

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


def _hash_state(h, states: dict) -> None:
    for key in sorted(states):
        st = states[key]
        h.update(key.encode())
        for field in ("amax_history", "scale", "scale_inv", "fp8_bytes", "fp8_scale_inv"):
            t = getattr(st, field)
            if t is not None:
                h.update(_bytes_of(t))


def _meta_fingerprint(states: dict) -> str:
    h = hashlib.sha256()
    for key in sorted(states):
        st = states[key]
        for t in (st.amax_history, st.scale):
            h.update(_bytes_of(t))
    return h.hexdigest()[:16]


def execute_case(case: CaseSpec, stack, rank: int, world_size: int, group, options: RunOptions,
                 fault_hook=None) -> RankResult:
    """Run ``case`` on this rank. Never raises for a bug in the stack: that becomes a failure."""
    result = RankResult(case=case.name, rank=rank)
    started = time.perf_counter()
    phases = {"reference": 0.0, "hygiene": 0.0, "stack": 0.0}
    checks_before = LEDGER.check_s
    digest = hashlib.sha256()
    reuse = ReusePolicy.parse(case.reuse) if case.reuse else options.reuse
    MORGUE.configure(reuse, rank)
    if options.reset_between_cases:
        stack.reset()
        LAST_REGISTRY_SIZES.forget()
    LEDGER.begin_case(case.name)
    if LEDGER.precheck is not None:
        LEDGER.precheck.watch(stack)
    sizes_before = LAST_REGISTRY_SIZES.before_case(stack)
    threads_before = set(threading.enumerate())
    retained = [0, 0]
    try:
        for m in range(case.models):
            t0 = time.perf_counter()
            weights = initial_weights(case, m, options.run_seed)
            ctx = BuildContext(rank=rank, world_size=world_size, group=group, device=torch.device("cpu"),
                               initial_weights=weights, deadline_s=options.deadline_s)
            released_before = len(MORGUE.released_ids)
            try:
                with forcing_window():
                    model = stack.build(case.model, ctx)
            except Exception:
                # The build itself failed (an id-keyed hook fired inside it, say): the forced
                # reuses it received cannot be verified on a model that does not exist; count them.
                forced = len(MORGUE.released_ids) - released_before
                result.reuse_events += forced
                if forced:
                    result.reuse_examples.append(f"model {m}: {forced} forced reuse(s) before the build failed")
                raise
            result.models_built += 1
            MORGUE.settle()
            targets = stack.reuse_targets(model)
            released = MORGUE.released_ids[released_before:]
            if released:
                # A forced reuse is a precondition of the id-reuse failures, not taken on trust.
                landed = {id(t) for t in targets}
                missed = [i for i in released if i not in landed]
                result.reuse_misses += len(missed)
                result.reuse_examples += [f"model {m}: released id {i:#x} was not taken by a new target"
                                          for i in missed[:2]]
            model_objs = stack.model_objects(model) if hasattr(stack, "model_objects") else ()
            tracked = walk_model(model, model_objs, targets)
            del model_objs
            events = GRAVEYARD.reuse_events(tracked)
            result.reuse_events += len(events)
            result.reuse_examples += [f"model {m}: {new} took the id of dead {old}" for new, old in events[:4]]
            phases["stack"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            reference = getattr(stack, "expected_model", expected_model)
            expected = reference(case, options.run_seed, world_size, rank, m) if options.check_reference else None
            phases["reference"] += time.perf_counter() - t0
            for t in range(case.steps):
                LEDGER.progress()
                if fault_hook is not None:
                    fault_hook(case, rank, m, t)
                t0 = time.perf_counter()
                if case.model.userbuffers:
                    shapes = tp_shapes(case, world_size)
                    x = tp_tensor(case, m, "x", t, rank, options.run_seed, shapes["x"], std=1.0)
                    dy = tp_tensor(case, m, "dy", t, rank, options.run_seed, shapes["dy"], std=0.01)
                else:
                    x = step_inputs(case, m, t, rank, options.run_seed)
                    dy = step_grad_output(case, m, t, rank, options.run_seed)
                returned = StepOutputs.of(stack.forward_backward(model, x, dy)).named()
                snap = stack.snapshot(model)
                phases["stack"] += time.perf_counter() - t0
                t0 = time.perf_counter()
                _hash_state(digest, snap)
                if case.model.recipe.reduce_amax:
                    result.meta_fingerprints.append(_meta_fingerprint(snap))
                if expected is not None:
                    mismatch = compare_states(expected.steps[t], snap) or \
                        compare_outputs(expected.step_outputs(t), returned)
                    result.steps_compared += 1
                    if mismatch and not any(f.oracle == "reference" for f in result.failures):
                        result.failures.append(Failure("reference", mismatch, rank=rank, step=t, model=m))
                phases["reference"] += time.perf_counter() - t0
                t0 = time.perf_counter()
                stack.optimizer_step(model)
                phases["stack"] += time.perf_counter() - t0
            final = stack.final_weights(model)
            _hash_state(digest, {k: dataclasses.replace(v, amax_history=torch.zeros(0), scale=torch.ones(()),
                                                        scale_inv=torch.ones(())) for k, v in final.items()})
            if expected is not None:
                mismatch = compare_states(expected.final, final, FINAL_FIELDS)
                if mismatch and not any(f.oracle == "reference" for f in result.failures):
                    result.failures.append(Failure("reference", f"after the last step: {mismatch}", rank=rank,
                                                   step=case.steps, model=m))
            del final, snap, expected, returned
            # Death of the model: destroy, park the reuse targets, drop every reference, collect.
            t0 = time.perf_counter()
            stack.destroy(model)
            if reuse.parks():
                MORGUE.park(targets)
            del model, targets
            collect()
            parked = MORGUE.parked_ids()
            dead = GRAVEYARD.bury(tracked, parked)
            declared = stack.registries()
            for line in (stale_ids(declared, dead) + undeclared_stale_ids(stack, declared, dead))[:8]:
                result.failures.append(Failure("hygiene", line, rank=rank, model=m))
            for line in survivors(tracked, parked)[:8]:
                result.failures.append(Failure("hygiene", line, rank=rank, model=m))
            count, nbytes = retained_state(tracked, parked)
            retained[0] += count
            retained[1] += nbytes
            del tracked
            phases["hygiene"] += time.perf_counter() - t0
    except Exception as exc:  # a crash of the stack under test is a result, not a harness error
        result.failures.append(Failure(_classify(exc), f"{type(exc).__name__}: {exc}\n{_short_tb(exc)}", rank=rank))
    finally:
        result.collectives = LEDGER.end_case()
    sizes_after = LAST_REGISTRY_SIZES.after_case(stack)
    grew = growth(sizes_before, sizes_after)
    result.retention = {"growth": grew, "retained_tensors": retained[0], "retained_bytes": retained[1]}
    if grew and retained[0]:
        names = ", ".join(f"{k} +{v['entries']} entries (+{v['bytes']} B)" for k, v in grew.items())
        line = (f"{retained[0]} tensors ({retained[1]} B) of this case's dead models stay alive; "
                f"registries grew by: {names}")
        if options.strict:
            result.failures.append(Failure("retention", line, rank=rank))
        else:
            result.warnings.append(line)
    leftover = leftover_threads(threads_before)
    if leftover:
        result.failures.append(Failure("liveness", leftover, rank=rank))
    result.digest = digest.hexdigest()[:32]
    result.duration_s = time.perf_counter() - started
    # Recording and prechecking collectives happens inside the stack's calls: move it out of "stack".
    phases["ledger"] = LEDGER.check_s - checks_before
    phases["stack"] -= phases["ledger"]
    result.phase_s = {k: round(v, 6) for k, v in phases.items()}
    gc.collect()
    return result


THREAD_JOIN_S = 0.5   # what a thread the case started and is ending gets to finish


def leftover_threads(before: set) -> str:
    """Non-daemon threads the case started that are still running, with their stacks ("" if none).

    A non-daemon thread keeps its process alive at exit: left behind by a case, it makes the
    rank hang at shutdown, so it is a ``liveness`` failure. Threads that are finishing get a
    short bounded join first; daemon threads (the harness's own, the comm overlap threads) are
    not counted.
    """
    new = [t for t in threading.enumerate() if t not in before and not t.daemon and t.is_alive()]
    end = time.monotonic() + THREAD_JOIN_S
    for t in new:
        t.join(timeout=max(0.0, end - time.monotonic()))
    alive = [t for t in new if t.is_alive()]
    if not alive:
        return ""
    frames = sys._current_frames()
    lines = [f"the case left {len(alive)} non-daemon thread(s) running (a process with one cannot exit):"]
    for t in alive:
        lines.append(f"  thread {t.name!r} (ident {t.ident}), stack:")
        frame = frames.get(t.ident)
        if frame is not None:
            lines += ["    " + line for line in "".join(traceback.format_stack(frame, limit=8)).rstrip().splitlines()]
    return "\n".join(lines)


def _classify(exc: BaseException) -> str:
    from harness.errors import DeadlineExceeded
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, DeadlineExceeded) or "Timed out" in text or "timed out" in text:
        return "liveness"
    if type(exc).__name__ == "CollectiveMismatch":
        return "cross-rank"
    if type(exc).__name__ == "PeerLeftCase":
        return "error"          # the peer's own failure is the finding; this rank only saw it go
    if type(exc).__name__ == "BufferIntegrityError":
        return "buffer-integrity"
    if "Connection closed by peer" in text or "Connection reset" in text:
        return "liveness"       # the peer process is gone (the precheck keeps mismatches out of gloo)
    if "doesn't match" in text:
        return "cross-rank"
    return "error"


def _short_tb(exc: BaseException, limit: int = 6) -> str:
    """The stack under test's frames of the traceback (the harness's own frames trimmed)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "/harness/runner/" not in f.filename and "/harness/idreuse/" not in f.filename
              and "/contextlib.py" not in f.filename]
    return "".join(traceback.format_list(frames[-limit:])).rstrip()
