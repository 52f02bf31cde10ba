"""``--sentinel-scan PKG``: the installed package is scanned at session start and what the scan
names is watched; every bad input and refused combination is one line and a usage error, with
no test run and nothing watched half-way."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

# A package the scan reports one registry of (toypkg:LEAKY), and whose leak a test makes.
TOYPKG = '''
class Weight:
    def __init__(self, name):
        self.name = name


LEAKY = {}


def register(obj):
    LEAKY[id(obj)] = obj.name
'''

LEAKING_TEST = """
import toypkg

def test_leaks():
    toypkg.register(toypkg.Weight("w0"))

def test_innocent():
    assert True
"""

QUIET = ["-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:hypothesispytest",
         "-W", "ignore::pytest.PytestAssertRewriteWarning"]  # the plugin may be imported here already


@pytest.fixture
def suite(pytester: pytest.Pytester, tmp_path, monkeypatch) -> pytest.Pytester:
    monkeypatch.setenv("HARNESS_SENTINEL_CACHE", str(tmp_path / "scan-cache"))
    pytester.mkpydir("toypkg").joinpath("__init__.py").write_text(TOYPKG)
    pytester.syspathinsert()
    pytester.makepyfile(test_suite=LEAKING_TEST)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "harness.sentinel", *QUIET, *args)


def test_scan_watches_what_the_scan_names_and_fails_the_leak(suite):
    result = run(suite, "--sentinel-scan", "toypkg")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines([
        "sentinel: scanned toypkg (*toypkg, 1 files, * s): 1 registry to watch",
        "sentinel: watching 1 registry: toypkg:LEAKY",
        "*ERROR at teardown of test_leaks*",
        "*toypkg:LEAKY key * -> a toypkg.Weight (key made by id() at *toypkg*__init__.py:*register*",
        "*sentinel: 1 registry entry outlived its object =*",
        "test_suite.py::test_leaks: toypkg:LEAKY key 0x* -> a toypkg.Weight (key made by id() at *",
    ])


def test_scan_from_the_ini_file_beside_a_registry_named_by_hand(suite):
    suite.mkpydir("other").joinpath("__init__.py").write_text("REG = {}\n")
    suite.makeini("[pytest]\nsentinel_scan = toypkg\nsentinel_registries =\n    other:REG\n")
    result = run(suite)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["sentinel: watching 2 registries: other:REG, toypkg:LEAKY"])


def test_a_subpackage_of_a_namespace_package_is_named_from_the_name_given(suite):
    # megatron.core's case: the folder above the package has no __init__.py.
    suite.mkdir("nspkg").joinpath("sub").mkdir()
    suite.path.joinpath("nspkg", "sub", "__init__.py").write_text(TOYPKG)
    suite.makepyfile(test_suite=LEAKING_TEST.replace("import toypkg", "from nspkg import sub as toypkg"))
    result = run(suite, "--sentinel-scan", "nspkg.sub")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["sentinel: watching 1 registry: nspkg.sub:LEAKY"])


def test_a_package_with_nothing_to_watch_says_why_and_runs(suite):
    suite.mkpydir("fixedpkg").joinpath("__init__.py").write_text("import weakref\nREG = weakref.WeakKeyDictionary()\n")
    result = run(suite, "--sentinel-scan", "fixedpkg")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "sentinel: scanned fixedpkg (*): nothing to watch: the scan found no id()-keyed registry a module reaches*",
        "sentinel: watching 0 registries: nothing",
    ])


@pytest.mark.parametrize("args, message", [
    (["--sentinel-scan", "no_such_package_here"],
     "ERROR: --sentinel-scan no_such_package_here: no installed package or module of that name*; nothing is watched"),
    (["--sentinel-scan", "toypkg,no_such_package_here"],
     "ERROR: --sentinel-scan no_such_package_here: no installed package*; nothing is watched"),
    (["--sentinel-scan", "sys"], "ERROR: --sentinel-scan sys: a built-in module, with no Python source to scan*"),
    (["--sentinel-scan", "toy-pkg"], "ERROR: --sentinel-scan toy-pkg: not a dotted module name*"),
    (["--sentinel-scan", "nopython"], "ERROR: --sentinel-scan nopython: the scan cannot read it: no Python files under*"),
    (["--sentinel-no-id-hook"], "ERROR: --sentinel-no-id-hook: nothing to watch; give --sentinel-registry or --sentinel-scan*"),
], ids=["not-installed", "one-of-two-not-installed", "built-in", "not-a-name", "no-python-source", "no-id-hook-alone"])
def test_bad_input_is_one_line_and_a_usage_error(suite, args, message):
    suite.mkdir("nopython").joinpath("data.txt").write_text("a namespace folder with no Python file\n")
    result = run(suite, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert len([line for line in result.stderr.lines if line.strip()]) == 1, result.stderr.lines
    assert "test_suite.py" not in result.stdout.str()   # no test ran, nothing was watched


def test_scan_and_no_id_hook_together_still_catch_a_key_the_heap_walk_ties(suite):
    suite.makepyfile(test_suite="""
        import pytest
        import toypkg

        @pytest.fixture
        def weight():
            yield toypkg.Weight("held")

        def test_held(weight):
            toypkg.register(weight)
        """)
    result = run(suite, "--sentinel-scan", "toypkg", "--sentinel-no-id-hook")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*toypkg:LEAKY key * -> a toypkg.Weight (found at that address by a heap walk*"])


def test_a_second_session_uses_the_cached_scan_until_a_file_changes(suite):
    run(suite, "--sentinel-scan", "toypkg").stdout.fnmatch_lines(["sentinel: scanned toypkg (*, 1 files, * s): 1 registry*"])
    run(suite, "--sentinel-scan", "toypkg").stdout.fnmatch_lines(["sentinel: scanned toypkg (*, 1 files, * s, cached): 1*"])
    suite.path.joinpath("toypkg", "__init__.py").write_text(TOYPKG + "\n\ndef more(obj):\n    OTHER[id(obj)] = 1\n\n\nOTHER = {}\n")
    result = run(suite, "--sentinel-scan", "toypkg")
    result.stdout.fnmatch_lines(["sentinel: scanned toypkg (*, 1 files, * s): 2 registries to watch"])
