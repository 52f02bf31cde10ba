"""The Userbuffers family: tensor-parallel FP8 layers with comm-GEMM overlap, one test per case.

    pytest cases/test_userbuffers.py                                  # patched: all pass
    pytest cases/test_userbuffers.py --sut emulated-buggy --reuse asymmetric
"""

from __future__ import annotations

import pytest

from harness.case.catalog import userbuffers_cases
from harness.pytest_plugin import check_case


@pytest.mark.parametrize("ub_case", userbuffers_cases(), ids=lambda c: c.name)
def test_userbuffers_case(ub_case, run_case, harness_config):
    if harness_config.world_size < 2 or harness_config.launcher == "inproc":
        pytest.skip("Userbuffers cases need a group of at least 2 ranks")
    check_case(run_case(ub_case))
