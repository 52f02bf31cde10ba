"""Every built-in case of the stack under test, one test each, on a persistent rank group.

    pytest cases/                                           # emulated-patched, spawn, 2 ranks
    pytest cases/ --sut emulated-buggy --reuse asymmetric   # per-case failures naming oracle and rank
    pytest cases/ --launcher torchrun -k repro
"""

from __future__ import annotations

from harness.pytest_plugin import check_case


def pytest_generate_tests(metafunc):
    if "catalog_case" in metafunc.fixturenames:
        from harness.pytest_plugin import config_from
        from harness.runner.cases import resolve_cases
        from harness.stacks import load_stack

        cfg = config_from(metafunc.config)
        stack = load_stack(cfg.sut, cfg.sut_options())
        # The Userbuffers family has a module of its own (cases/test_userbuffers.py).
        cases = [c for c in resolve_cases(None, None, stack) if not c.model.userbuffers]
        metafunc.parametrize("catalog_case", cases, ids=[c.name for c in cases])


def test_case(catalog_case, run_case):
    check_case(run_case(catalog_case))
