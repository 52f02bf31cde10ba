"""Run one case on this rank, with the per-rank oracles.

For each of the case's models, four phases (each a function below):

1. **build** -- the model, under the morgue's forcing window (its module objects born on the last
   dead model's, where the rank forces reuse), counting the ids it took from dead objects and
   checking that every forced reuse landed;
2. **steps** -- forward, backward and optimizer step, each step's FP8 state compared with the
   reference bit for bit and folded into the case digest;
3. **death** -- destroy, park the reuse targets, let the module objects go (each dead one's
   block kept by a shell for the next build to be born on, :mod:`harness.idreuse.shells`),
   collect; then the hygiene scan of registries (stale ids) and of survivors (objects that
   outlived the model);
4. at the case's end, **retention** (registries that grew and keep dead models' state alive)
   and leftover threads.

Collectives go through the ledger; the cross-rank and isolation oracles compare ledgers and
digests afterwards, where every rank's result is at hand (:mod:`harness.runner.judge`). A bug
in the stack never raises out of here: it becomes a failure of the case.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import re
import sys
import threading
import time
import traceback


from harness.case.data import step_grad_output, step_inputs, tp_shapes, tp_tensor
from harness.case.spec import CaseSpec
from harness.collectives.registry_digest import registry_summary
from harness.idreuse.morgue import ReusePolicy, forcing_window
from harness.idreuse.shells import placeable, placing
from harness.idreuse.tracker import ActivationLog, collect, walk_model, what_ids_were
from harness.oracles.findings import HOLDS_DEAD_ID, REFERENCE_DIFFERS, SURVIVOR, Failure, Oracle
from harness.oracles.hidden_state import container_summary
from harness.oracles.hygiene import scan_registries, survivors
from harness.oracles.recorded import StepRecorder, judge_checks_reference
from harness.oracles.reference import compared_names, final_mismatch, step_mismatch
from harness.oracles.retention import RETENTION_NOTE, describe_growth, growth, retained_state, split_growth
from harness.runner.rank.cycles import run_cycles
from harness.runner.rank.exceptions import classify, describe_exception, exception_identity
from harness.runner.rank.result import RankResult, fold_digests, meta_fingerprint
from harness.runner.rank.state import RankState
from harness.stacks.hooks import traits
from harness.stacks.protocol import StepOutputs, checked_return

__harness_hidden__ = True

THREAD_JOIN_S = 0.5   # what a thread the case started and is ending gets to finish


@dataclasses.dataclass
class _CaseRun:
    """What the phases of one case share: the case, its result so far, timings, the digest."""

    case: CaseSpec
    state: RankState
    result: RankResult
    reuse: ReusePolicy
    fault_hook: object
    digest: "hashlib._Hash" = dataclasses.field(default_factory=hashlib.sha256)
    phases: dict = dataclasses.field(default_factory=lambda: {"reference": 0.0, "hygiene": 0.0, "stack": 0.0})
    retained: list = dataclasses.field(default_factory=lambda: [0, 0])
    recorder: StepRecorder | None = None     # every tensor hashed once (harness.oracles.recorded)
    for_judge: bool = False                  # the judge compares: the recorder keeps the bytes for it
    check_reference: bool = True
    method: str | None = None                # the stack's method running now (named when it fails)

    def call(self, method: str, fn, *args):
        """``fn(*args)``, the stack's ``method``, its return value checked (StackReturnError). While it
        runs, ``method`` names it, so that a failure out of it says which method of the stack raised."""
        self.method = method
        returned = fn(*args)
        self.method = None
        return checked_return(self.state.stack, method, returned)

    def timed(self, phase: str, started: float) -> None:
        self.phases[phase] += time.perf_counter() - started

    def fail(self, oracle: str, detail: str, **where) -> None:
        self.result.failures.append(Failure(oracle, detail, rank=self.state.rank, **where))

    def first_reference_failure(self) -> bool:
        return not any(f.oracle == Oracle.REFERENCE for f in self.result.failures)


def execute_case(case: CaseSpec, state: RankState, fault_hook=None, alone: bool = False) -> RankResult:
    """Run ``case`` on this rank. Never raises for a bug in the stack: that becomes a failure.

    ``alone``: the isolated re-run of a case (the isolation oracle compares its digest and its
    collectives with the shared run's). Its records are checked against the reference exactly as
    the shared run's are (here, or by the judge), so a run that is wrong only alone is a finding
    of its own and a digest difference can say which of the two runs is wrong."""
    run = _CaseRun(case, state, RankResult(case=case.name, rank=state.rank),
                   ReusePolicy.parse(case.reuse) if case.reuse else state.settings.reuse, fault_hook)
    run.check_reference = state.settings.check_reference
    run.for_judge = run.check_reference and judge_checks_reference(state.settings.reference_by_judge, state.stack)
    run.recorder = StepRecorder(keep_bytes=run.for_judge)
    started = time.perf_counter()
    checks_before = state.ledger.check_s
    state.morgue.configure(run.reuse, state.rank)
    state.ledger.begin_case(case.name)
    sizes_before = None
    threads_before = set(threading.enumerate())
    try:
        if state.settings.reset_between_cases or case.cycles:
            # a long-lived process starts from an empty stack (harness.runner.rank.cycles)
            run.call("reset", state.stack.reset)
            state.registry_sizes.forget()
        # what the registries were before anything of this case ran: the judge compares it between
        # ranks, so drift that the case before left is charged to that case
        run.result.start_registries = registry_summary(run.call("registries", state.stack.registries))
        run.result.start_containers = container_summary(state.stack)
        watch = getattr(state.ledger.precheck, "watch", None)     # (a fault's wrapper has none)
        if watch is not None:
            watch(state.stack)
        sizes_before = state.registry_sizes.before_case(state.stack)
        for m in range(case.models):
            built = _build(run, m)
            _steps(run, built, m)
            _death(run, built, m)
        if case.cycles:
            run_cycles(run, _step_data)
            collect()
    except Exception as exc:  # a crash of the stack under test is a result, not a harness error
        run.fail(classify(exc), describe_exception(exc, run.method, state.stack), **exception_identity(exc))
    finally:
        run.result.collectives = state.ledger.end_case()
        t0 = time.perf_counter()
        if run.for_judge:
            run.result.states = run.recorder.to_dict()
        elif not alone:
            run.result.tensors = run.recorder.to_dict()     # what the report keeps; isolation needs none
        run.timed("reference", t0)
    if sizes_before is not None:
        _retention(run, sizes_before)
    leftover = leftover_threads(threads_before)
    if leftover:
        run.fail(Oracle.LIVENESS, leftover, kind="the case left threads running")
    result = run.result
    result.digest = run.digest.hexdigest()[:32]
    result.duration_s = time.perf_counter() - started
    # Recording and prechecking collectives happens inside the stack's calls: move it out of "stack".
    run.phases["ledger"] = state.ledger.check_s - checks_before
    run.phases["stack"] -= run.phases["ledger"]
    result.phase_s = {k: round(v, 6) for k, v in run.phases.items()}
    gc.collect()
    return result


@dataclasses.dataclass
class _Built:
    """The one holder of a live model between its phases, so that death can drop every reference."""

    model: object
    targets: list
    tracked: list
    activations: ActivationLog = dataclasses.field(default_factory=ActivationLog)
    died_early: set = dataclasses.field(default_factory=set)     # tracked ids dead before the model died


def _build(run: _CaseRun, m: int) -> _Built:
    """Phase 1: build model ``m``; count reuse events and forced reuses that did not land."""
    state, result = run.state, run.result
    t0 = time.perf_counter()
    ctx = state.build_context(run.case, m)
    released_before = len(state.morgue.released_ids)
    try:
        with forcing_window(), placing():
            model = run.call("build", state.stack.build, run.case.model, ctx)
    except Exception:
        # The build itself failed (an id-keyed hook fired inside it, say): the forced
        # reuses it received cannot be verified on a model that does not exist; count them.
        forced = len(state.morgue.released_ids) - released_before
        result.reuse_events += forced
        if forced:
            result.reuse_examples.append(f"model {m}: {forced} forced reuse(s) before the build failed")
        raise
    result.models_built += 1
    state.morgue.settle()
    state.shells.settle()
    targets = run.call("reuse_targets", state.stack.reuse_targets, model)
    released = state.morgue.released_ids[released_before:]
    if released:
        # A forced reuse is a precondition of the id-reuse failures, not taken on trust.
        landed = {id(t) for t in targets}
        missed = [i for i in released if i not in landed]
        result.reuse_misses += len(missed)
        result.reuse_examples += [f"model {m}: released id {i:#x} was not taken by a new target" for i in missed[:2]]
    model_objs = run.call("model_objects", traits(state.stack).model_objects_of, model)
    tracked = walk_model(model, model_objs, targets)
    del model_objs
    result.add_reuse(m, state.graveyard.reuse_events(tracked))
    run.timed("stack", t0)
    return _Built(model, targets, tracked)


def _steps(run: _CaseRun, built: _Built, m: int) -> None:
    """Phase 2: every step of model ``m``, its FP8 state compared with the reference."""
    state, case, result = run.state, run.case, run.result
    model = built.model
    settings = state.settings
    t0 = time.perf_counter()
    hooks = traits(state.stack)
    reference = hooks.reference()
    recorder = run.recorder
    check_step = hooks.check_optimizer_step
    expected = None
    if run.check_reference and not run.for_judge:
        expected = reference(case, settings.seed, state.world, state.rank, m)
    run.timed("reference", t0)
    snap = None
    for t in range(case.steps):
        state.ledger.progress()
        if run.fault_hook is not None:
            run.fault_hook(case, state.rank, m, t)
        t0 = time.perf_counter()
        x, dy = _step_data(case, state, m, t)
        returned = StepOutputs.of(run.call("forward_backward", state.stack.forward_backward, model, x, dy)).named()
        built.activations.add(t, {"input": x, "grad_output": dy, **returned})
        snap = run.call("snapshot", state.stack.snapshot, model)
        run.timed("stack", t0)
        t0 = time.perf_counter()
        hashed, outputs = recorder.step(m, t, snap, returned)
        fold_digests(run.digest, hashed)
        fold_digests(run.digest, outputs)     # what the step returned: a GEMM wrong alone shows
        if case.model.recipe.reduce_amax:
            result.meta_fingerprints.append(meta_fingerprint(hashed))
        if expected is not None:
            mismatch = step_mismatch(expected, t, snap, returned)
            result.steps_compared += 1
            recorder.mark_compared(compared_names(expected, t))
            if mismatch and run.first_reference_failure():
                run.fail(Oracle.REFERENCE, mismatch, step=t, model=m, kind=REFERENCE_DIFFERS)
        run.timed("reference", t0)
        t0 = time.perf_counter()
        run.call("optimizer_step", state.stack.optimizer_step, model)
        run.timed("stack", t0)
        if check_step is not None and run.check_reference:
            t0 = time.perf_counter()
            mismatch = run.call("check_optimizer_step", check_step, model, t)
            if mismatch and run.first_reference_failure():
                run.fail(Oracle.REFERENCE, mismatch, step=t, model=m, kind=REFERENCE_DIFFERS)
            run.timed("reference", t0)
    built.died_early = {o.ident for o in built.tracked if not o.alive()}
    final = run.call("final_weights", state.stack.final_weights, model)
    fold_digests(run.digest, recorder.final(m, final))
    if expected is not None:
        recorder.mark_compared(compared_names(expected, None))
        mismatch = final_mismatch(expected, final)
        if mismatch and run.first_reference_failure():
            run.fail(Oracle.REFERENCE, mismatch, step=case.steps, model=m, kind=REFERENCE_DIFFERS)


def _step_data(case: CaseSpec, state: RankState, m: int, t: int):
    seed = state.settings.seed
    if case.model.userbuffers:
        shapes = tp_shapes(case, state.world)
        x = tp_tensor(case, m, "x", t, state.rank, seed, shapes["x"], std=1.0)
        dy = tp_tensor(case, m, "dy", t, state.rank, seed, shapes["dy"], std=0.01)
        return x, dy
    return step_inputs(case, m, t, state.rank, seed), step_grad_output(case, m, t, state.rank, seed)


def _death(run: _CaseRun, built: _Built, m: int) -> None:
    """Phase 3: destroy, park the reuse targets, drop every reference, collect; then hygiene."""
    state = run.state
    t0 = time.perf_counter()
    run.call("destroy", state.stack.destroy, built.model)
    modules, names = [], []
    if run.reuse.parks():
        state.morgue.park(built.targets)
        # The model's module objects too, which reuse_targets() does not name (shells.py).
        modules, names = _placeable_objects(built.tracked)
    tracked = built.tracked
    built.model = built.targets = built.tracked = None
    run.result.add_shell_misses(m, state.shells.take(modules, names).misses)
    collect()
    parked = state.morgue.parked_ids()
    dead = state.graveyard.bury(tracked, parked)
    activations = built.activations.dead()
    scan = scan_registries(state.stack, run.call("registries", state.stack.registries), {**dead, **activations},
                           state.entry_origins, run.case.name, m, what_ids_were(tracked, built.died_early, activations))
    run.result.model_containers.append(container_summary(state.stack, scan.walked))
    for found in scan.failures[:8]:
        run.fail(Oracle.HYGIENE, found.line, model=m, kind=HOLDS_DEAD_ID, registry=found.registry)
    run.result.warnings += [f"hygiene: {line}" for line in scan.notes[:4]]
    for found in survivors(tracked, parked)[:8]:
        run.fail(Oracle.HYGIENE, found.line, model=m, kind=SURVIVOR, holder=found.holder)
    count, nbytes = retained_state(tracked, parked)
    run.retained[0] += count
    run.retained[1] += nbytes
    run.timed("hygiene", t0)


def _placeable_objects(tracked: list) -> tuple[list, list]:
    """The live model objects of ``tracked`` a shell can stand in for, by their path in the model
    (``model``, ``model.layers[0]``, ``model.layers[0].weight``, ``model.layers[1]``...), so that
    a new model built in the same order puts its i-th layer on the dead i-th layer's address; and
    their descriptions, in the same order (what a miss names).
    (A function of its own: a comprehension's loop variable would stay bound in the caller.)"""
    chosen = []
    for o in tracked:
        obj = o.ref() if o.kind == "model" else None
        if obj is not None and placeable(obj):
            chosen.append((_path_key(o.desc), o.desc, obj))
        obj = None
    chosen.sort(key=lambda item: item[0])
    return [obj for _, _, obj in chosen], [desc for _, desc, _ in chosen]


def _path_key(desc: str) -> list:
    path = desc.split(" (", 1)[0]
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", path)]


def _retention(run: _CaseRun, sizes_before: dict) -> None:
    """Phase 4: registries that grew during the case while its dead models' state stays alive."""
    state, result = run.state, run.result
    sizes_after = state.registry_sizes.after_case(state.stack)
    grew = growth(sizes_before, sizes_after)
    result.retention = {"growth": grew, "retained_tensors": run.retained[0], "retained_bytes": run.retained[1]}
    if not (grew and run.retained[0]):
        return
    kept, other = split_growth(grew, traits(state.stack).kept_on_purpose())
    line = (f"{run.retained[0]} tensors ({run.retained[1]} B) of this case's dead models stay alive; "
            f"registries grew by: {', '.join(describe_growth(g) for g in (other, kept) if g)}")
    if not other:
        result.warnings.append(f"{RETENTION_NOTE}{line} (kept on purpose by the stack)")
    elif state.settings.strict:
        run.fail(Oracle.RETENTION, line, kind="dead models' state stays alive as registries grow",
                 registry=sorted(other)[0])
    else:
        result.warnings.append(f"{RETENTION_NOTE}{line}")


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
