"""TE's Userbuffers cases on two GPUs: patched TE passes, the re-introduced bug fails with a named
oracle (cross-rank with the collective precheck; with it off, liveness naming the rank, the
communicator and the chunk), nothing stays on the GPUs, and a world larger than the GPUs is refused.

Skipped, with the reason, without Transformer Engine, without CUDA, or with fewer than two GPUs
(TE's Userbuffers need one GPU per rank and at least two ranks). The CPU-side parts are in
``test_te_userbuffers_cpu.py``.
"""

from __future__ import annotations

import subprocess

import pytest

from harness.stacks.te import availability
from harness.stacks.te_common import gpus

MISSING = availability.missing_reason()
GPUS = [] if MISSING else gpus.visible_gpus()
pytestmark = pytest.mark.skipif(MISSING is not None or len(GPUS) < 2,
                                reason=MISSING or f"TE's Userbuffers need 2 GPUs; {len(GPUS)} visible here")


@pytest.fixture(autouse=True)
def _no_multicast(monkeypatch):
    monkeypatch.setenv("UB_SKIPMC", "1")       # the stack sets it too; a test must not depend on that


def _run(sut: str, names: list[str], reuse: str = "natural", deadline: float = 60.0, isolation: bool = True,
         precheck: bool = True):
    from harness.runner.config import RunConfig
    from harness.runner.session import run
    from harness.stacks.te.ub_cases import builtin_cases

    cases = tuple(c for c in builtin_cases() if c.name in names)
    assert [c.name for c in cases] == names
    cfg = RunConfig(sut=sut, launcher="spawn", world_size=2, isolation=isolation, cases=cases, reuse=reuse,
                    deadline_s=deadline, precheck=precheck)
    return run(cfg)


def _our_gpu_processes() -> list[str]:
    """Processes on the GPUs that a harness group started (their environment names a run folder)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=60).stdout
    ours = []
    for line in out.splitlines():
        pid = line.split(",")[0].strip()
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if b"HARNESS_RUN_DIR=" in fh.read():
                    ours.append(line.strip())
        except OSError:
            continue
    return ours


def test_patched_te_passes_column_row_and_no_overlap():
    names = ["userbuffers/column", "userbuffers/row-bias-frozen", "userbuffers/column-no-overlap"]
    report = _run("te", names)
    for case in report.cases:
        assert case.outcome == "passed", f"{case.name}: {case.detail}"
        assert case.steps_compared == 2 * case_steps(case.name), case.name
    assert _our_gpu_processes() == []


def case_steps(name: str) -> int:
    from harness.stacks.te.ub_cases import builtin_cases

    case = next(c for c in builtin_cases() if c.name == name)
    return case.steps * case.models


def test_buggy_te_with_asymmetric_reuse_fails_cross_rank_at_the_precheck():
    report = _run("te-buggy", ["userbuffers/column"], reuse="asymmetric", deadline=30.0, isolation=False)
    case = report.cases[0]
    assert case.outcome == "failed" and case.oracle == "cross-rank", case.detail
    assert "CollectiveMismatch" in case.detail and "harness/stacks/te/id_hook.py" in case.detail, case.detail
    assert "transformer_engine/pytorch/quantization.py" in case.detail, case.detail
    assert _our_gpu_processes() == []


def test_with_the_precheck_off_liveness_names_rank_communicator_and_chunk():
    report = _run("te-buggy", ["userbuffers/column"], reuse="asymmetric", deadline=30.0, isolation=False,
                  precheck=False)
    case = report.cases[0]
    assert case.outcome == "failed" and "liveness" in case.oracles, case.detail
    text = "\n".join(f.detail for f in case.failures)
    assert "userbuffers 'qkv_fprop' ring-exchange all-gather" in text, text
    assert "in progress: rank 1 waiting for chunk 0 from rank 0" in text, text
    assert "nccl flight recorder" in text, text
    assert _our_gpu_processes() == []


def test_more_ranks_than_gpus_is_refused_in_one_line(capsys):
    from harness.cli import main

    world = len(GPUS) + 1
    assert main(["run", "--sut", "te", "--world-size", str(world)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--world-size {world}: {len(GPUS)} GPU(s) visible here" in err[0], err
