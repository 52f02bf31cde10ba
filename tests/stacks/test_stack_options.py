"""Options a stack cannot take (``--inject``) are refused in one line, never silently dropped."""

from __future__ import annotations

import sys
import types

import pytest

from harness.errors import UsageError
from harness.stacks import load_stack
from harness.stacks.emulated.stack import PATCHED


def test_a_stack_given_as_an_object_refuses_options():
    with pytest.raises(UsageError, match="--sut 'emulated-buggy' takes no --inject"):
        load_stack("emulated-buggy", {"inject": "id-hook"})


def test_a_factory_gets_only_the_options_it_accepts(monkeypatch):
    module = types.ModuleType("stack_options_probe")
    module.plain = lambda: PATCHED
    module.flexible = lambda **options: PATCHED
    monkeypatch.setitem(sys.modules, "stack_options_probe", module)
    with pytest.raises(UsageError, match="--sut 'stack_options_probe:plain' takes no --inject"):
        load_stack("stack_options_probe:plain", {"inject": "id-hook"})
    assert load_stack("stack_options_probe:flexible", {"inject": "id-hook"}) is PATCHED
    assert load_stack("stack_options_probe:plain") is PATCHED
