"""Under torchrun, a rank removes the empty folders the agent made for it under --log-dir."""

from __future__ import annotations

from harness.runner.spmd_env import remove_empty_agent_folders


def _tree(root, ranks):
    attempt = root / "agent" / "run-id_abc" / "attempt_0"
    for r in ranks:
        (attempt / str(r)).mkdir(parents=True)
    return attempt


def test_the_last_rank_to_end_leaves_nothing(tmp_path):
    attempt = _tree(tmp_path, (0, 1))
    remove_empty_agent_folders({"TORCHELASTIC_ERROR_FILE": str(attempt / "0" / "error.json")})
    assert sorted(p.name for p in attempt.iterdir()) == ["1"]          # rank 1's is still there
    remove_empty_agent_folders({"TORCHELASTIC_ERROR_FILE": str(attempt / "1" / "error.json")})
    assert list(tmp_path.iterdir()) == []


def test_a_folder_with_evidence_stays(tmp_path):
    attempt = _tree(tmp_path, (0,))
    (attempt / "0" / "error.json").write_text("{}")
    remove_empty_agent_folders({"TORCHELASTIC_ERROR_FILE": str(attempt / "0" / "error.json")})
    assert (attempt / "0" / "error.json").exists()


def test_outside_torchrun_nothing_is_touched(tmp_path):
    _tree(tmp_path, (0,))
    remove_empty_agent_folders({})
    assert (tmp_path / "agent" / "run-id_abc" / "attempt_0" / "0").is_dir()
