"""``pytest -n 2 -p harness.sentinel``: each worker watches its own tests, the controller's summary
lists every finding once, and the findings are those of the same suite run in one process."""

from __future__ import annotations

import re

import pytest

pytest_plugins = ["pytester"]

TOYPKG = """
LEAKY = {}


class Weight:
    pass


# One class per size class of CPython's small-object allocator (the GC header, the object
# header, 8 bytes a slot and the weak reference: 48, 64, ..., 144 bytes). pymalloc hands a
# freed block to the next object of the same size class, so a Weight registered in one test
# could land on the block of one that leaked in an earlier test; its key would then already be
# there, one entry for two registrations, and the suite's count of findings would depend on
# where the allocator put an object. With a size class each, no registered object can land on
# another's block.
KINDS = [type(f"Weight{n}", (), {"__slots__": tuple(f"s{i}" for i in range(1 + 2 * n)) + ("__weakref__",)})
         for n in range(7)]


def weight(n):
    return KINDS[n]()


def register(obj):
    LEAKY[id(obj)] = 1
"""

# Two files of leaks and one entry whose object lives in a session fixture: it dies when the
# worker that ran its test tears the session fixtures down, and is reported there.
LEAKS = """
import pytest
import toypkg

@pytest.mark.parametrize("n", range(3))
def test_leak(n):
    toypkg.register(toypkg.weight(FIRST + n))

def test_clean():
    pass
"""
LATE = """
import pytest
import toypkg

@pytest.fixture(scope="session")
def kept():
    yield toypkg.weight(6)

def test_registers_a_live_one(kept):
    toypkg.register(kept)
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, tmp_path, monkeypatch) -> pytest.Pytester:
    monkeypatch.setenv("HARNESS_SENTINEL_CACHE", str(tmp_path / "scan-cache"))
    pytester.mkpydir("toypkg").joinpath("__init__.py").write_text(TOYPKG)
    pytester.makepyfile(test_a="FIRST = 0\n" + LEAKS,
                        test_b="FIRST = 3\n" + LEAKS.replace("test_leak", "test_other_leak"), test_c=LATE)
    pytester.makeini("[pytest]\npythonpath = .\n")
    return pytester


def findings(result: pytest.RunResult) -> list[str]:
    """The summary's finding lines, addresses blanked (they differ between processes)."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "sentinel: 7 registry entries outlived their objects" in line)
    found = [re.sub(r"0x[0-9a-f]+|\b\d{6,}\b", "ADDR", line) for line in lines[start + 1:]
             if line.startswith("test_")]
    return found


def run(pytester: pytest.Pytester, workers: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-n", workers, "-p", "harness.sentinel", "-p", "no:cacheprovider",
                                         "-p", "no:hypothesispytest", "--sentinel-scan", "toypkg")


def test_two_workers_find_what_one_process_finds_each_once(suite):
    alone, spread = run(suite, "0"), run(suite, "2")
    for result in (alone, spread):
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        result.stdout.fnmatch_lines(["sentinel: watching 1 registry: toypkg:LEAKY"])
    spread.stdout.fnmatch_lines(["created: 2/2 workers*"])
    spread.assert_outcomes(passed=9, errors=7)
    one, two = findings(alone), findings(spread)
    assert len(one) == 7 and sorted(one) == sorted(two), (one, two)
    assert len(set(two)) == len(two)              # every finding once


HELD_UNTIL_THE_END = """
import toypkg

def test_registers_a_held_one():
    weight = toypkg.Weight()
    toypkg.HELD.append(weight)
    toypkg.register(weight)
"""
# Runs before every other pytest_sessionfinish: the held object dies after the last test.
RELEASE_AT_THE_END = """
import pytest
import toypkg

@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session):
    toypkg.HELD.clear()
    return (yield)
"""


@pytest.mark.parametrize("workers", ["0", "2"])
def test_an_entry_whose_object_dies_after_the_last_test_is_in_the_summary(pytester, tmp_path, monkeypatch, workers):
    monkeypatch.setenv("HARNESS_SENTINEL_CACHE", str(tmp_path / "scan-cache"))
    pytester.mkpydir("toypkg").joinpath("__init__.py").write_text(TOYPKG + "\nHELD = []\n")
    pytester.makepyfile(test_held=HELD_UNTIL_THE_END)
    pytester.makeconftest(RELEASE_AT_THE_END)
    pytester.makeini("[pytest]\npythonpath = .\n")
    result = run(pytester, workers)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*sentinel: 1 registry entry outlived its object*",
        "after the last test:",
        "toypkg:LEAKY key * -> a toypkg.Weight (key made by id() at *__init__.py:* (register), during test_held.py::test_registers_a_held_one)",
    ])
