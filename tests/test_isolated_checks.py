"""The isolated re-run is checked as the shared run is, and a difference between them is explained.

Three things the isolation oracle's other half must not drop (known bad for each):

* the run alone's records go through the same reference as the shared run's: a stack that is
  wrong only in a forked child (``tests/planted/forked_stale_gemm.py``, a stale scale_inv in
  the last layer's GEMM) fails ``reference``, marked as the run alone's;
* the case digest covers what ``forward_backward`` returned, not only the FP8 state: a GEMM that
  is wrong while every FP8 tensor is right changes it (``tests/planted/stale_scale_inv.py``);
  and a digest difference says which of the two runs disagrees with the reference;
* a buffer-integrity failure inside the run alone is a ``buffer-integrity`` finding of the case,
  with its rank, communicator and chunk (``tests/planted/ub_cold_scale.py``, a Userbuffers layer
  that mis-scales its chunks in a process that has built nothing else).
"""

from __future__ import annotations

import pytest

from harness.case.catalog import builtin_cases
from harness.runner.config import RunConfig
from harness.runner.inproc import execute_here
from harness.runner.session import run
from harness.stacks import load_stack
from tests.planted.stale_scale_inv import StaleScaleInvStack

CASES = {c.name: c for c in builtin_cases()}


@pytest.fixture
def fresh_registries():
    stack = load_stack("emulated-patched")
    stack.reset()
    yield
    stack.reset()


def test_the_digest_covers_what_forward_backward_returned(fresh_registries):
    # one layer: the stale scale_inv changes the output and the input gradient, no FP8 state
    right = execute_here(CASES["delayed/wide"], load_stack("emulated-patched"), check_reference=False)
    load_stack("emulated-patched").reset()
    wrong = execute_here(CASES["delayed/wide"], StaleScaleInvStack(), check_reference=False)
    assert right.failures == [] and wrong.failures == []
    assert right.digest != wrong.digest


def test_a_stack_wrong_only_in_a_forked_child_fails_the_reference_in_its_run_alone():
    report = run(RunConfig(sut="tests.planted.forked_stale_gemm:STACK", launcher="spawn", world_size=2,
                           cases=[CASES["delayed/wide"]]))
    [case] = report.cases
    assert case.outcome == "failed" and case.oracle == "reference", case.detail
    lines = case.detail.splitlines()
    assert lines[0].startswith("[reference] rank 0, model 0, step 1: in the run alone (this case only, in a fresh "
                               "process): output[0, 0]: expected "), lines[0]
    digest = [line for line in lines if line.startswith("[isolation] rank 0: result digest")]
    assert digest and "the run after other cases agrees with the reference" in digest[0], lines
    assert "the run alone disagrees with the reference ([reference] rank 0, model 0, step 1: output[0, 0]" in digest[0]


def test_a_buffer_integrity_failure_in_the_run_alone_is_the_cases_buffer_integrity_finding():
    cases = [CASES["delayed/wide"], next(c for c in builtin_cases(2) if c.name == "userbuffers/column")]
    report = run(RunConfig(sut="tests.planted.ub_cold_scale:STACK", launcher="spawn", world_size=2, cases=cases))
    wide, column = report.cases
    assert wide.outcome == "passed", wide.detail
    assert column.outcome == "failed" and column.oracle == "buffer-integrity", column.detail
    first = column.detail.splitlines()[0]
    # the rank, the communicator, the chunk and both ranks of it, and that the run alone read it
    assert first.startswith("[buffer-integrity] rank 0: in the run alone (this case only, in a fresh process): "
                            "BufferIntegrityError: userbuffers 'qkv' ring all-gather: chunk 0 written by rank 0, "
                            "read by rank 0: scale mismatch"), first
