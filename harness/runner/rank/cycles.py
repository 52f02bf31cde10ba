"""A long-lived process in one case: ``CaseSpec.cycles`` more models in a light loop.

A case with cycles starts from an empty stack (its registries emptied, its communicators
destroyed, as ``--reset-between-cases`` does), so that what it costs is its own: a TE-like stack
reduces every autocast key the process has seen at each autocast exit, and the 600 exits of the
loop over the dozen recipes of the cases before it cost five times the loop itself. The
communicators it creates then count their operations from 0, in the run and in its repro alike.

After a case's models (each with the four phases of :mod:`harness.runner.rank.execute`), the
same stack builds, trains and destroys ``cycles`` more models in turn, with none of the per-model
work that makes a model of a case cost what it does: no reuse accounting, no per-step reference
comparison or recording, no collection or hygiene scan after each death. What the loop is for is
length: a communicator taken through hundreds of operations, the build/destroy cycle through
hundreds of models, so a counter that wraps or a pool that cycles is reached. What it checks:

* the stack raises nothing and every wait ends in time (a hang is a liveness failure naming the
  communicator, the operation and the counters);
* every cycle's final weights are the reference's, bit for bit, for the cycles the check covers
  (:data:`CHECK_EVERY` apart, and the last), the cycle's index and its count of models in the
  failure, so that a failure found after N operations names the length that its repro replays
  (the case itself, all of its cycles, in a fresh process). The reference is the stack's own
  (:meth:`harness.stacks.hooks.Traits.reference`), as for the case's models: TE's leaves the
  final weights out (each is a GEMM's result, which tensor cores round differently), so for TE
  the loop checks liveness and that nothing raises.

Such a case gets no isolated re-run (:attr:`harness.case.spec.CaseSpec.reruns_isolated`): its run
already starts from an empty stack, and a second one would double the dearest case of the run.
"""

from __future__ import annotations


from harness.oracles.findings import REFERENCE_DIFFERS, Oracle
from harness.oracles.reference import final_mismatch
from harness.stacks.hooks import traits

__harness_hidden__ = True

CHECK_EVERY = 64    # cycles between two reference checks of the final weights (and the last one)


def run_cycles(run, step_data) -> None:
    """The case's ``cycles`` models after its own, each built, stepped ``steps`` times and destroyed."""
    state, case = run.state, run.case
    reference = traits(state.stack).reference()
    for k in range(case.cycles):
        m = case.models + k
        model = state.stack.build(case.model, state.build_context(case, m))
        for t in range(case.steps):
            state.ledger.progress()
            x, dy = step_data(case, state, m, t)
            state.stack.forward_backward(model, x, dy)
            state.stack.optimizer_step(model)
        checked = run.check_reference and (k % CHECK_EVERY == CHECK_EVERY - 1 or k == case.cycles - 1)
        if checked:
            expected = reference(case, state.settings.seed, state.world, state.rank, m)
            mismatch = final_mismatch(expected, state.stack.final_weights(model))
            if mismatch:
                run.fail(Oracle.REFERENCE, f"cycle {k} of {case.cycles} (model {m}): {mismatch}",
                         step=case.steps, model=m, kind=REFERENCE_DIFFERS)
                state.stack.destroy(model)
                return
        state.stack.destroy(model)
        model = None
        run.result.models_built += 1
