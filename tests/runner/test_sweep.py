"""What a controller killed outright leaves (its run folder, its segments, ranks that outlived it)
is removed by the next group that starts, and nothing of a live run is touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from harness.runner.cleanup import (OWNER_FILE, process_start, processes_with_env, sweep_abandoned,
                                    write_owner)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_CONTROLLER = """
import sys
from harness.runner.config import RunConfig
from harness.runner.group import RankGroup
group = RankGroup(RunConfig(sut="emulated-patched", launcher="spawn", world_size=2)).start()
open("/dev/shm/" + group.shm_prefix + "probe", "wb").close()     # a segment of this group's
print(group.run_dir, group.shm_prefix, flush=True)
sys.stdin.read()                                                   # until killed
"""


def _folder(tmp_path, name, owner):
    path = tmp_path / name
    path.mkdir()
    if owner is not None:
        (path / OWNER_FILE).write_text(json.dumps(owner))
    return path


def test_a_folder_is_swept_only_when_its_owner_is_dead(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    me = os.getpid()
    gone = _folder(tmp_path, "fp8h-run-dead", {"pid": dead_pid, "start": "1", "shm_prefix": ""})
    # This process's pid, but another process's start time: a recycled pid is not the owner.
    recycled = _folder(tmp_path, "fp8h-run-recycled", {"pid": me, "start": "1", "shm_prefix": ""})
    live = tmp_path / "fp8h-run-live"
    live.mkdir()
    write_owner(str(live))
    unowned = _folder(tmp_path, "fp8h-run-unowned", None)
    other = _folder(tmp_path, "not-ours", {"pid": dead_pid, "start": "1"})
    assert json.loads((live / OWNER_FILE).read_text())["start"] == process_start(me)
    assert sorted(sweep_abandoned(str(tmp_path))) == sorted([str(gone), str(recycled)])
    assert not gone.exists() and not recycled.exists()
    assert live.exists() and unowned.exists() and other.exists()


def test_the_next_run_sweeps_what_a_sigkilled_controller_left(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=REPO)
    ctl = subprocess.Popen([sys.executable, "-c", _CONTROLLER], cwd=REPO, env=env, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        run_dir, prefix = ctl.stdout.readline().split()
    finally:
        ctl.kill()
        ctl.wait(timeout=30)
    try:
        assert os.path.isdir(run_dir) and os.path.exists(f"/dev/shm/{prefix}probe")
        proc = subprocess.run([sys.executable, "-m", "harness", "run", "--cases", "repro/hygiene"], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert not os.path.exists(run_dir), os.listdir(tmp_path)
        assert not os.path.exists(f"/dev/shm/{prefix}probe")
        assert processes_with_env("HARNESS_RUN_DIR", run_dir) == []
        assert [n for n in os.listdir(tmp_path) if n.startswith("fp8h-")] == []
    finally:
        sweep_abandoned(str(tmp_path))      # so that a failure here leaves nothing behind either
