"""The forms CI reads: SARIF 2.1.0, baselines, settings from pyproject.toml, and the
pre-commit hook; each shown failing on a known-bad input.

The SARIF schema is tests/scan/data/sarif-schema-2.1.0.json, the OASIS SARIF TC's schema of
the 2.1.0 Committee Specification (oasis-tcs/sarif-spec, Documents/CommitteeSpecifications/
2.1.0/sarif-schema-2.1.0.json at 3a361e0b), kept as test data.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

from harness.scan.cli import main

HERE = pathlib.Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
FIXTURE = HERE / "fixtures" / "te_pre_fix_registry.py"
SCHEMA = HERE / "data" / "sarif-schema-2.1.0.json"

STORE = """\
class Tracker:
    seen = {}


def track(weight, value):
    Tracker.seen[id(weight)] = value
"""
READER = """\
from bad import Tracker


def lookup(weight):
    return Tracker.seen.get(id(weight))
"""


def _sarif(capsys, *argv) -> dict:
    assert main(["--format", "sarif", *argv]) == 1
    return json.loads(capsys.readouterr().out)


def _validate(log: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).validate(log)


def test_sarif_validates_against_the_2_1_0_schema_with_relative_uris_and_rules(tmp_path, capsys, monkeypatch):
    shutil.copy(FIXTURE, tmp_path / "fp8.py")
    monkeypatch.chdir(tmp_path)
    log = _sarif(capsys, "fp8.py")
    _validate(log)
    run = log["runs"][0]
    rules = [rule["id"] for rule in run["tool"]["driver"]["rules"]]
    assert "IDK001" in rules and "IDK002" in rules
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"] == tmp_path.as_uri() + "/"
    found = {(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in run["results"]}
    assert found == {("IDK002", 13), ("IDK001", 19)}
    for result in run["results"]:
        artifact = result["locations"][0]["physicalLocation"]["artifactLocation"]
        assert artifact == {"uri": "fp8.py", "uriBaseId": "SRCROOT"}
        assert rules[result["ruleIndex"]] == result["ruleId"]
        assert result["level"] == "error"


def test_a_log_missing_a_required_property_fails_the_schema(tmp_path, capsys, monkeypatch):
    # the check can fail: a result without its message is not SARIF
    jsonschema = pytest.importorskip("jsonschema")
    shutil.copy(FIXTURE, tmp_path / "fp8.py")
    monkeypatch.chdir(tmp_path)
    log = _sarif(capsys, "fp8.py")
    del log["runs"][0]["results"][0]["message"]
    with pytest.raises(jsonschema.ValidationError):
        _validate(log)


def test_partial_fingerprints_survive_an_unrelated_edit_above(tmp_path, capsys, monkeypatch):
    target = tmp_path / "fp8.py"
    shutil.copy(FIXTURE, target)
    monkeypatch.chdir(tmp_path)
    before = _sarif(capsys, "fp8.py")["runs"][0]["results"]
    target.write_text("import os\n\n\ndef unrelated():\n    return os.sep\n\n" + FIXTURE.read_text())
    after = _sarif(capsys, "fp8.py")["runs"][0]["results"]
    assert [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in after] == [
        r["locations"][0]["physicalLocation"]["region"]["startLine"] + 6 for r in before
    ]
    assert [r["partialFingerprints"] for r in after] == [r["partialFingerprints"] for r in before]
    # an edit of the flagged line itself is a new finding
    target.write_text(FIXTURE.read_text().replace("id(w._data) for w in fp8_weights", "id(w._data) for w in weights_fp8"))
    edited = _sarif(capsys, "fp8.py")["runs"][0]["results"]
    assert edited[0]["partialFingerprints"] != before[0]["partialFingerprints"]


def test_baseline_quiets_known_findings_and_fails_on_new_ones(tmp_path, capsys, monkeypatch):
    (tmp_path / "bad.py").write_text(STORE)
    monkeypatch.chdir(tmp_path)
    assert main(["--write-baseline", "baseline.json", "."]) == 0
    assert json.loads((tmp_path / "baseline.json").read_text())["findings"][0]["registry"] == "Tracker.seen"
    capsys.readouterr()
    assert main(["--baseline", "baseline.json", "."]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "1 in the baseline" in captured.err
    (tmp_path / "new.py").write_text("IDS = set()\n\n\ndef add(x):\n    IDS.add(id(x))\n")
    assert main(["--baseline", "baseline.json", "."]) == 1
    out = capsys.readouterr().out
    assert "IDS" in out and "Tracker.seen" not in out


def test_a_missing_or_malformed_baseline_is_bad_input(tmp_path, capsys):
    (tmp_path / "bad.py").write_text(STORE)
    assert main(["--baseline", str(tmp_path / "none.json"), str(tmp_path)]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    (tmp_path / "broken.json").write_text("[1, 2")
    assert main(["--baseline", str(tmp_path / "broken.json"), str(tmp_path)]) == 2
    assert "cannot be read" in capsys.readouterr().err


def _project(tmp_path, section: str) -> pathlib.Path:
    root = tmp_path / "project"
    (root / "src" / "vendored").mkdir(parents=True)
    (root / "pyproject.toml").write_text(f"[project]\nname = 'x'\n\n[tool.fp8-harness.scan]\n{section}\n")
    (root / "src" / "vendored" / "bad.py").write_text(STORE)
    (root / "src" / "low.py").write_text("def fill(table, w):\n    table[id(w)] = 1\n")
    return root


def test_pyproject_settings_exclude_paths_and_set_the_confidence(tmp_path, capsys):
    root = _project(tmp_path, 'exclude = ["src/vendored"]')
    assert main([str(root / "src")]) == 0                # bad.py excluded, low.py of low confidence
    assert "in 1 file(s)" in capsys.readouterr().err
    root = _project(tmp_path / "b", 'confidence = "low"')
    assert main([str(root / "src")]) == 1
    out = capsys.readouterr().out
    assert "table in fill()" in out and "Tracker.seen" in out


@pytest.mark.parametrize("section, words", [
    ('confidence = "maybe"', "confidence must be one of high, low"),
    ('exclude = "src"', "exclude must be a list"),
    ('excludes = ["src"]', "unknown key(s) excludes"),
])
def test_bad_settings_are_bad_input_naming_the_file(tmp_path, capsys, section, words):
    root = _project(tmp_path, section)
    assert main([str(root / "src")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and str(root / "pyproject.toml") in err[0] and words in err[0]


def test_an_unparsable_file_is_reported_and_hides_nothing_else(tmp_path, capsys):
    (tmp_path / "bad.py").write_text(STORE)
    (tmp_path / "broken.py").write_text("def f(:\n")
    assert main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "IDK010" in out and "Tracker.seen" in out


# ---- the pre-commit hook -------------------------------------------------------------------

def _git(repo: pathlib.Path, *argv: str) -> None:
    subprocess.run(["git", *argv], cwd=repo, check=True, capture_output=True, timeout=60)


def _hook_repo(tmp_path: pathlib.Path) -> pathlib.Path:
    """A git repository holding a store in bad.py and its read in reader.py, configured to run
    the hook from this checkout as a local hook (no network, nothing installed)."""
    repo = tmp_path / "project"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "scan@example.invalid")
    _git(repo, "config", "user.name", "scan")
    (repo / "bad.py").write_text(STORE)
    (repo / "reader.py").write_text(READER)
    hook = textwrap.dedent(f"""\
        repos:
        - repo: local
          hooks:
          - id: id-hazard-scan
            name: id() hazard scan
            entry: {sys.executable} {REPO_ROOT / 'scripts' / 'id-hazard-scan'}
            language: system
            pass_filenames: false
            types: [python]
            require_serial: true
        """)
    (repo / ".pre-commit-config.yaml").write_text(hook)
    return repo


def _pre_commit(repo: pathlib.Path, tmp_path: pathlib.Path, *argv: str) -> subprocess.CompletedProcess:
    pre_commit = shutil.which("pre-commit", path=os.path.dirname(sys.executable))
    if pre_commit is None:
        pytest.skip("pre-commit is not installed (it is in the test extra)")
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "cache"), PYTHONPATH="", PIP_NO_INDEX="1")
    return subprocess.run([pre_commit, "run", *argv], cwd=repo, env=env, capture_output=True, text=True, timeout=300)


def test_the_hook_entry_imports_only_the_standard_library_and_the_scan():
    script = REPO_ROOT / "scripts" / "id-hazard-scan"
    probe = (
        "import runpy, sys\n"
        f"sys.argv = ['id-hazard-scan', '--help']\n"
        "try:\n"
        f"    runpy.run_path({str(script)!r}, run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in ('torch', 'mpi4py', 'numpy', 'yaml', 'hypothesis') if m in sys.modules)\n"
        "outside = sorted(m for m in sys.modules if m.startswith('harness') and not m.startswith('harness.scan')"
        " and m not in ('harness', 'harness.errors'))\n"
        "print(heavy, outside)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd="/")
    assert done.stdout.strip().splitlines()[-1] == "[] []", done.stdout + done.stderr


@pytest.mark.slow
def test_pre_commit_hook_fails_and_names_the_store_and_its_reader_in_another_file(tmp_path):
    repo = _hook_repo(tmp_path)
    _git(repo, "add", "-A")
    done = _pre_commit(repo, tmp_path, "--all-files")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "bad.py:6:5: IDK001" in done.stdout and "Tracker.seen" in done.stdout
    assert "reader.py:5:12" in done.stdout, done.stdout

    # Only the reader staged: the same finding, with the store in the file not passed.
    _git(repo, "commit", "-q", "-m", "initial", "--no-verify")
    (repo / "reader.py").write_text(READER + "\n\ndef other(weight):\n    return lookup(weight)\n")
    _git(repo, "add", "reader.py")
    done = _pre_commit(repo, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "bad.py:6:5: IDK001" in done.stdout and "reader.py:5:12" in done.stdout, done.stdout


@pytest.mark.slow
def test_the_published_hook_runs_from_a_clone_of_this_repository(tmp_path):
    # .pre-commit-hooks.yaml as a user gets it (language: script: nothing installed, offline)
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("this checkout is not a git repository")
    repo = _hook_repo(tmp_path)
    _git(repo, "add", "-A")
    pre_commit = shutil.which("pre-commit", path=os.path.dirname(sys.executable))
    if pre_commit is None:
        pytest.skip("pre-commit is not installed (it is in the test extra)")
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "cache"), PYTHONPATH="")
    done = subprocess.run(
        [pre_commit, "try-repo", str(REPO_ROOT), "id-hazard-scan", "--all-files"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "bad.py:6:5: IDK001" in done.stdout and "reader.py:5:12" in done.stdout, done.stdout


def test_sarif_names_a_file_outside_the_base_by_an_absolute_file_uri(tmp_path, capsys, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(FIXTURE, outside / "fp8.py")
    base = tmp_path / "base"
    base.mkdir()
    monkeypatch.chdir(base)
    log = _sarif(capsys, str(outside / "fp8.py"))
    _validate(log)
    artifact = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": (outside / "fp8.py").as_uri()}


def test_exclude_on_the_command_line_is_relative_to_the_current_directory(tmp_path, capsys, monkeypatch):
    root = _project(tmp_path, "")
    monkeypatch.chdir(root)
    assert main(["src"]) == 1                              # bad.py is scanned
    assert "Tracker.seen" in capsys.readouterr().out
    assert main(["--exclude", "src/vendored/*", "src"]) == 0
    assert "in 1 file(s)" in capsys.readouterr().err
