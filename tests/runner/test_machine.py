"""A run that cannot fit on this machine is refused before any rank starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.errors import UsageError
from harness.runner.machine import MAX_RANKS_PER_CORE, RANK_MEMORY_BYTES, check_capacity

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_capacity_is_ranks_times_the_memory_of_one_against_what_is_available():
    gib = 2**30
    check_capacity(2, memory=24 * gib, ncores=2)
    with pytest.raises(UsageError, match=r"--world-size 1000 needs about 180\.7 GiB .* but 24\.0 GiB is available"):
        check_capacity(1000, memory=24 * gib, ncores=2)
    fits = (24 * gib) // RANK_MEMORY_BYTES
    check_capacity(min(fits, MAX_RANKS_PER_CORE * 64), memory=24 * gib, ncores=64)
    with pytest.raises(UsageError, match="needs about"):
        check_capacity(fits + 1, memory=24 * gib, ncores=64)


def test_at_most_eight_ranks_per_core():
    check_capacity(16, memory=2**50, ncores=2)
    with pytest.raises(UsageError, match="more than 8 ranks per core on this 2-core machine"):
        check_capacity(17, memory=2**50, ncores=2)


def _run(args, tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=REPO)
    return subprocess.run([sys.executable, "-m", "harness", "run", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_world_size_1000_is_refused_at_once_and_nothing_starts(tmp_path):
    """Refused before anything starts: how long that takes is the bench's to measure, not a test's
    (load stretches it); what must hold is that no rank, no run folder, nothing was made."""
    proc = _run(["--world-size", "1000"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --world-size 1000 needs about"), proc.stderr
    assert "--oversubscribe" in lines[0]
    # Nothing was started: a group makes its run folder first of all, in the temp folder.
    assert os.listdir(tmp_path) == []


def test_oversubscribe_lets_a_user_who_means_it_go_ahead(tmp_path):
    proc = _run(["--world-size", "1000", "--oversubscribe", "--cases", "repro/hygiene", "--list"], tmp_path)
    assert proc.returncode == 0 and proc.stdout.split() == ["repro/hygiene"], proc.stderr
    assert os.listdir(tmp_path) == []
