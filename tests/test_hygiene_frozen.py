"""A model kept by a module imported before the rank froze its heap is named with its chain.

Ranks import the stack, then ``gc.freeze()`` (``freeze_imports``): the stack module's dict and its
classes' namespaces move to the permanent generation, which ``gc.get_referrers`` does not search.
Known bad: ``tests/planted/keeps_last_model.py`` (a module global) and
``tests/planted/keeps_model_on_class.py`` (a class attribute), both imported before the freeze;
hygiene names the global (``module.NAME -> Model``) and the class attribute.
"""

from __future__ import annotations

import gc
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harness.case.catalog import builtin_cases
from harness.idreuse.referrers import referrer_chain
from harness.idreuse.tracker import freeze_imports
from harness.runner.inproc import execute_here
from tests.planted import keeps_last_model, keeps_model_on_class

REPO = Path(__file__).resolve().parents[1]
CASES = {c.name: c for c in builtin_cases()}


@pytest.fixture
def frozen_heap():
    """This process's heap frozen after the planted modules' import, as a rank's is."""
    for stack in (keeps_last_model.STACK, keeps_model_on_class.STACK):
        stack.reset()
    freeze_imports()
    yield
    gc.unfreeze()
    for stack in (keeps_last_model.STACK, keeps_model_on_class.STACK):
        stack.reset()


def test_the_collector_does_not_see_a_frozen_module_dict(frozen_heap):
    """The premise: after the freeze, the module's dict is no referrer the collector reports."""
    class Model:
        pass

    keeps_last_model.LAST_MODEL = Model()
    assert not any(r is vars(keeps_last_model) for r in gc.get_referrers(keeps_last_model.LAST_MODEL))
    assert referrer_chain(keeps_last_model.LAST_MODEL) == "tests.planted.keeps_last_model.LAST_MODEL -> Model"


@pytest.mark.parametrize("stack, held", [
    (keeps_last_model.STACK, "tests.planted.keeps_last_model.LAST_MODEL -> Model"),
    (keeps_model_on_class.STACK, "tests.planted.keeps_model_on_class.Registry.last_model -> Model"),
], ids=["module-global", "class-attribute"])
def test_a_survivor_held_from_a_frozen_module_is_named_with_its_chain(frozen_heap, stack, held):
    result = execute_here(CASES["repro/hygiene"], stack)
    lines = [f.detail for f in result.failures if f.oracle == "hygiene"]
    assert f"model (Model) is still alive (held by {held})" in lines, lines


def run_cli(argv: list[str]) -> tuple[int, str]:
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stdout + proc.stderr


def test_the_plain_run_names_the_class_attribute_and_its_repro_command_reproduces_it():
    held = "model (Model) is still alive (held by tests.planted.keeps_model_on_class.Registry.last_model -> Model)"
    rc, out = run_cli([sys.executable, "-m", "harness", "run", "--sut", "tests.planted.keeps_model_on_class:STACK",
                       "--cases", "repro/hygiene", "--no-isolation"])
    assert rc == 1 and held in out, out
    repro = re.search(r"^reproduce: (.*)$", out, re.M).group(1)
    argv = shlex.split(repro)
    assert argv[:3] == ["python", "-m", "harness"], repro
    rc, again = run_cli([sys.executable, *argv[1:]])
    assert rc == 1 and held in again, again
