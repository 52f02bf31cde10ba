"""The long-lived loop of a case with cycles (harness/runner/rank/cycles.py) checks its final
weights against the same reference as the case's own models: the stack's ``expected_model``
where it has one. TE's leaves the final weights out (a GEMM's result, rounded differently on
tensor cores); a loop that asked the delayed-scaling reference instead failed TE 2.20 on an H100
at the first checked cycle (63), two units in the last place off, in every stress run.

Reproduce: python -m harness run --sut tests.planted.gemm_low_bits:OWN_REFERENCE --case-file FILE --reuse off
(FILE: the case below)
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from harness.case.model import ModelSpec
from harness.case.spec import CaseSpec
from harness.fp8.recipe import DelayedScalingRecipe
from harness.runner.rank.cycles import CHECK_EVERY

REPO = pathlib.Path(__file__).resolve().parents[2]


def _case_file(tmp_path: pathlib.Path) -> pathlib.Path:
    model = ModelSpec(dims=(16, 16), recipe=DelayedScalingRecipe(amax_history_len=1), fp8_params=False,
                      data_parallel=False)
    case = CaseSpec(name="planted/cycles", model=model, batch=16, steps=1, models=1, data_seed=7, cycles=CHECK_EVERY)
    path = tmp_path / "cycles.json"
    path.write_text(json.dumps([case.to_dict()]))
    return path


@pytest.mark.parametrize("stack, passes", [("OWN_REFERENCE", True), ("NO_OWN_REFERENCE", False)])
def test_the_loop_asks_the_stacks_own_reference(tmp_path, stack, passes):
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--sut", f"tests.planted.gemm_low_bits:{stack}",
         "--case-file", str(_case_file(tmp_path)), "--reuse", "off"],
        cwd=REPO, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )
    out = proc.stdout + proc.stderr
    if passes:
        assert proc.returncode == 0 and "1 passed, 0 failed" in out, out
    else:
        # the same final weights against a reference that includes them: the loop's check fails,
        # naming the cycle and the first differing element
        assert proc.returncode == 1, out
        assert f"cycle {CHECK_EVERY - 1} of {CHECK_EVERY} (model {CHECK_EVERY})" in out, out
        assert "after the last step: layer0.weight.fp8_bytes[0, 0]" in out, out
