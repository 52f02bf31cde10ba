"""The CI definitions only call scripts: every job runs ./scripts/<name>, which exists and is executable."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest

yaml = pytest.importorskip("yaml", reason="the package pyyaml is not installed (it is in the test extra: ./scripts/test)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GITHUB = os.path.join(ROOT, "ci", "github-actions.yml")
GITLAB = os.path.join(ROOT, "ci", "gitlab-ci.yml")
# Keys at the top of a GitLab CI file that are not jobs.
GITLAB_KEYWORDS = {"default", "include", "stages", "variables", "workflow", "image", "services", "cache",
                   "before_script", "after_script", "spec"}
EXPECTED_JOBS = {"pytest", "torchrun", "mpirun", "nightly-stress", "nightly-stress-te", "nightly-stress-shard",
                 "nightly-stress-merge"}


def _load(path: str) -> dict:
    with open(path) as fh:
        data = yaml.safe_load(fh)
    assert isinstance(data, dict), f"{path} is not a YAML mapping"
    return data


def github_jobs() -> dict[str, list[str]]:
    """Job name -> its ``run:`` commands."""
    return {name: [step["run"] for step in job.get("steps", []) if "run" in step]
            for name, job in _load(GITHUB)["jobs"].items()}


def gitlab_jobs() -> dict[str, list[str]]:
    """Job name -> its script lines (before_script and after_script included)."""
    out = {}
    for name, job in _load(GITLAB).items():
        if name in GITLAB_KEYWORDS or name.startswith(".") or not isinstance(job, dict):
            continue
        lines = []
        for key in ("before_script", "script", "after_script"):
            value = job.get(key, [])
            lines += [value] if isinstance(value, str) else list(value)
        out[name] = lines
    return out


def _script_of(command: str) -> str:
    """The script a command line calls; a command that is more than one script call fails here."""
    assert "\n" not in command.strip(), f"more than one command: {command!r}"
    assert not re.search(r"[;&|`$<>]", command), f"shell logic in CI definition: {command!r}"
    words = shlex.split(command)
    assert words and words[0].startswith("./scripts/"), f"does not call a script from scripts/: {command!r}"
    return words[0]


@pytest.mark.parametrize("jobs", [github_jobs, gitlab_jobs], ids=["github-actions", "gitlab-ci"])
def test_every_job_calls_an_executable_script(jobs):
    found = jobs()
    assert set(found) == EXPECTED_JOBS
    for name, commands in found.items():
        assert commands, f"job {name} runs nothing"
        for command in commands:
            script = os.path.join(ROOT, _script_of(command))
            assert os.path.isfile(script), f"job {name}: {script} does not exist"
            assert os.access(script, os.X_OK), f"job {name}: {script} is not executable"
            with open(script) as fh:
                text = fh.read()
            assert text.startswith("#!"), f"{script} has no #! line"
            assert 'source "$(dirname "$0")/_venv.sh"' in text, f"{script} does not set up .venv"


def test_github_triggers_and_nightly_artifact():
    data = _load(GITHUB)
    triggers = data.get("on", data.get(True))     # YAML 1.1 reads a bare `on` as true
    assert {"push", "pull_request", "schedule"} <= set(triggers)
    jobs = data["jobs"]
    for name in ("pytest", "torchrun", "mpirun"):
        assert "schedule" not in jobs[name]["if"]
    assert "schedule" in jobs["nightly-stress"]["if"]
    uploads = [s for s in jobs["nightly-stress"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert uploads and "results/stress-*" in uploads[0]["with"]["path"]


def test_gitlab_nightly_is_scheduled_and_keeps_its_report():
    data = _load(GITLAB)
    nightly = data["nightly-stress"]
    assert any("schedule" in r.get("if", "") for r in nightly["rules"])
    assert "results/stress-*/" in nightly["artifacts"]["paths"]
    assert nightly["artifacts"]["when"] == "always"
    for name in ("pytest", "torchrun", "mpirun"):
        rules = data[name].get("rules") or data[data[name]["extends"]]["rules"]
        assert not any("schedule" in r.get("if", "") for r in rules)


def test_the_gpu_nightly_is_off_by_default_and_runs_on_a_labelled_runner():
    job = _load(GITHUB)["jobs"]["nightly-stress-te"]
    assert job["if"].startswith("vars.TE_STRESS == 'true' && ") and "schedule" in job["if"]
    assert "self-hosted" in job["runs-on"] and "fp8-gpu" in job["runs-on"]
    uploads = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["if"] == "always()" and "results/te/stress-*/" in uploads[0]["with"]["path"]

    job = _load(GITLAB)["nightly-stress-te"]
    assert job["tags"] == ["fp8-gpu"]
    assert job["rules"] and all(r["if"].startswith('$TE_STRESS == "true" && ') for r in job["rules"])
    assert job["artifacts"]["when"] == "always" and "results/te/stress-*/" in job["artifacts"]["paths"]


def test_the_gpu_nightly_script_stresses_te_in_a_venv_that_sees_the_runners_te():
    with open(os.path.join(ROOT, "scripts", "nightly-stress-te")) as fh:
        text = fh.read()
    assert "HARNESS_VENV_SYSTEM_SITE=1" in text and 'RESULTS_DIR="${RESULTS_DIR:-results/te}"' in text
    assert '--sut "${TE_SUT:-te}" --world-size "${WORLD_SIZE:-1}"' in text
    assert text.index("HARNESS_VENV_SYSTEM_SITE=1") < text.index("_venv.sh")    # set before the venv is made


def test_the_sharded_nightly_is_a_matrix_of_one_seed_then_a_merge_that_always_runs():
    jobs = _load(GITHUB)["jobs"]
    shard, merge = jobs["nightly-stress-shard"], jobs["nightly-stress-merge"]
    assert "schedule" in shard["if"] and shard["strategy"]["fail-fast"] is False
    assert shard["strategy"]["matrix"]["shard"] == [0, 1, 2, 3]
    assert shard["env"]["SHARD_INDEX"] == "${{ matrix.shard }}"
    assert shard["env"]["SHARD_COUNT"] == "${{ strategy.job-total }}"
    assert "matrix" not in shard["env"]["STRESS_SEED"] and shard["env"]["STRESS_SEED"].startswith("${{ github.")
    [upload] = [s for s in shard["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert upload["if"] == "always()" and "matrix.shard" in upload["with"]["name"]
    assert upload["with"]["path"] == "results/shards/"
    assert merge["needs"] == "nightly-stress-shard" and merge["if"].startswith("always() && ")
    [download] = [s for s in merge["steps"] if s.get("uses", "").startswith("actions/download-artifact")]
    assert download["with"]["pattern"] == "stress-shard-*" and download["with"]["merge-multiple"] is True
    assert download["with"]["path"] == "results/shards/"

    data = _load(GITLAB)
    shard, merge = data["nightly-stress-shard"], data["nightly-stress-merge"]
    assert shard["parallel"] == 4 and shard["variables"]["STRESS_SEED"] == "$CI_PIPELINE_ID"
    assert any("schedule" in r["if"] for r in shard["rules"])
    assert shard["artifacts"]["when"] == "always" and "results/shards/" in shard["artifacts"]["paths"]
    assert merge["needs"] == [{"job": "nightly-stress-shard", "artifacts": True}]
    assert [r.get("when") for r in merge["rules"] if "schedule" in r["if"]] == ["always"]
    assert merge["artifacts"]["when"] == "always" and "results/sharded/stress-*/" in merge["artifacts"]["paths"]


def _shard_command(env: dict) -> subprocess.CompletedProcess:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("CI_NODE_", "SHARD_", "STRESS_"))}
    return subprocess.run([os.path.join(ROOT, "scripts", "nightly-stress-shard")], env={**keep, "DRY_RUN": "1", **env},
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("env,shard", [
    ({"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "4"}, "0/4"),        # GitLab counts from 1
    ({"CI_NODE_INDEX": "4", "CI_NODE_TOTAL": "4"}, "3/4"),
    ({"SHARD_INDEX": "0", "SHARD_COUNT": "4"}, "0/4"),            # the GitHub matrix counts from 0
    ({"SHARD_INDEX": "2", "SHARD_COUNT": "4"}, "2/4"),
])
def test_the_shard_script_maps_each_index_and_passes_the_seed(env, shard):
    done = _shard_command({**env, "STRESS_SEED": "123456"})
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    assert words[words.index("--shard") + 1] == shard and words[words.index("--seed") + 1] == "123456"
    assert words[words.index("--out") + 1] == f"results/shards/shard-{shard.replace('/', '-of-')}"


def test_the_shard_script_refuses_to_run_without_a_seed_or_a_shard():
    done = _shard_command({"SHARD_INDEX": "0", "SHARD_COUNT": "4"})
    assert done.returncode == 2 and "STRESS_SEED" in done.stderr and not done.stdout
    done = _shard_command({"STRESS_SEED": "1"})
    assert done.returncode == 2 and "SHARD_INDEX" in done.stderr and not done.stdout
