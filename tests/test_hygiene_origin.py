"""Hygiene names the object whose id was stored, and the case and model that stored it.

Known bad: ``tests/planted/cast_once_registry.py`` keeps the ids of ``init_cast`` weights' storages
and never prunes them. Forced reuse hands those addresses on to the next case's weights, in a case
(``copy`` construction) that never touches the registry: its hygiene must not be charged with
entries an earlier case stored (alone, that case passes); the earlier case is, with a line naming
the stored object, its case and its model, and its printed repro command reproduces it.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harness.case.catalog import builtin_cases
from harness.runner.config import Launcher, RunConfig
from harness.runner.rank.execute import execute_case
from harness.runner.rank.state import RankState
from tests.planted import cast_once_registry

REPO = Path(__file__).resolve().parents[1]
CASES = {c.name: c for c in builtin_cases(world_size=1)}
STORING, LATER = "reuse/init-cast-symmetric", "reuse/copy-symmetric"
STORED = re.compile(r"^cast_once\.CAST_ONCE element holds id 0x[0-9a-f]+ of dead model\.layers\[\d\]\.weight\._data "
                    r"\(Tensor uint8\[16, 16\]\), the id of a weight, stored in case reuse/init-cast-symmetric, model 0$")


@pytest.fixture(autouse=True)
def fresh_registry():
    cast_once_registry.STACK.reset()
    yield
    cast_once_registry.STACK.reset()


def test_an_entry_an_earlier_case_stored_is_charged_to_that_case_and_names_what_it_stored():
    state = RankState(RunConfig(launcher=Launcher.INPROC).rank_settings(), 0, cast_once_registry.STACK)
    storing = execute_case(CASES[STORING], state)
    later = execute_case(CASES[LATER], state)
    first = [f.detail for f in storing.failures if f.oracle == "hygiene" and f.model == 0]
    assert len(first) == 3 and all(STORED.match(line) for line in first), storing.failures
    assert [f for f in later.failures if f.oracle == "hygiene"] == [], later.failures
    notes = [w for w in later.warnings if w.startswith("hygiene: ")]
    assert notes and all(f"in case {STORING}, model 0 (that case's finding)" in w for w in notes), later.warnings


def run_cli(argv: list[str]) -> tuple[int, str]:
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stdout + proc.stderr


def test_the_run_fails_the_storing_case_only_and_its_repro_command_reproduces_it():
    rc, out = run_cli([sys.executable, "-m", "harness", "run", "--launcher", "inproc", "--no-isolation",
                       "--sut", "tests.planted.cast_once_registry:STACK", "--cases", f"{STORING} or {LATER}"])
    failed = re.findall(r"^FAIL\s+(\S+)", out, re.M)
    assert rc == 1 and failed == [STORING], out
    assert re.search(r"stored in case reuse/init-cast-symmetric, model 0", out), out
    repro = re.search(r"^reproduce: (.*)$", out, re.M).group(1)
    argv = shlex.split(repro)
    assert argv[:3] == ["python", "-m", "harness"] and LATER not in repro, repro
    rc, again = run_cli([sys.executable, *argv[1:]])
    assert rc == 1 and re.findall(r"^FAIL\s+(\S+)", again, re.M) == [STORING], again
    assert re.search(r"holds id 0x[0-9a-f]+ of dead model\.layers\[0\]\.weight\._data \(Tensor uint8\[16, 16\]\), "
                     r"the id of a weight, stored in case reuse/init-cast-symmetric, model 0", again), again


def test_an_entry_a_later_object_had_the_address_of_is_named_by_what_it_was_stored_for():
    """What a key was the id of is what it was when stored, not what a later object at its address
    was: a weight's id a registry kept from model 0 is a weight's id, also where model 1's dead
    activation had the address since; an int that was no dead object's id when first seen is of an
    unknown object."""
    from harness.oracles.hygiene import EntryOrigins, scan_registries

    weight, other, activation = 0x7F37B9D3BF20, 0x7F37B9D3C000, "input of step 0 (Tensor float32[8, 16])"
    registry = {weight: 1, other: 2}
    origins = EntryOrigins()
    scan_registries(object(), {"planted.REGISTRY": registry}, {weight: "model.w (Tensor uint8[16, 16])"}, origins,
                    "c", 0, {weight: "the id of a weight"})
    later = scan_registries(object(), {"planted.REGISTRY": registry}, {weight: activation, other: activation}, origins,
                            "c", 1, {weight: "the id of an activation", other: "the id of an activation"})
    lines = sorted(f.line for f in later.failures)
    assert lines == [
        f"planted.REGISTRY key holds id {weight:#x} of dead {activation}, stored for model.w (Tensor uint8[16, 16]), "
        f"the id of a weight, in case c, model 0",
        f"planted.REGISTRY key holds id {other:#x} of dead {activation}, stored for an object (what it was the id of "
        f"is not known) in case c, model 0",
    ], lines
