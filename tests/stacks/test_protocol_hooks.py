"""The stack protocol's two halves are declared once: the required members derived from the
``Stack`` protocol, the optional hooks from ``Traits``; the README lists both, the harness asks a
stack what it has in one place only."""

from __future__ import annotations

import dataclasses
import os
import re

from harness.stacks.hooks import OPTIONAL, Traits, traits
from harness.stacks.protocol import REQUIRED

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = re.compile(r"\b(getattr|hasattr)\(\s*(self\.|state\.|run\.state\.|backend\.)*(_?stack|sut)\b")


def _readme_list(opening: str) -> list[str]:
    """The backquoted names of the README paragraph that starts with ``opening``, up to its end."""
    text = open(os.path.join(REPO, "README.md")).read()
    start = text.index(opening)
    paragraph = text[start:text.index("\n\n", start)]
    return re.findall(r"`(\w+)`", paragraph.split(":", 1)[1])


def test_the_readme_lists_the_required_members_of_the_protocol():
    assert _readme_list("The required members") == list(REQUIRED)


def test_the_readme_lists_the_optional_hooks_of_the_protocol():
    listed = [name for name in _readme_list("The optional hooks") if name != "Traits"]
    assert listed == list(OPTIONAL)


def test_every_optional_hook_says_what_it_is_and_its_default():
    for field in dataclasses.fields(Traits):
        doc = field.metadata.get("doc", "")
        assert doc.startswith(field.name) and "Default" in doc, field.name


def test_only_the_resolver_asks_a_stack_what_it_has():
    found = []
    for folder, _, files in os.walk(os.path.join(REPO, "harness")):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path.endswith(os.path.join("stacks", "hooks.py")):
                continue
            for number, line in enumerate(open(path), 1):
                if PROBE.search(line):
                    found.append(f"{os.path.relpath(path, REPO)}:{number}: {line.strip()}")
    assert found == [], "\n".join(found)


def test_the_probe_pattern_finds_a_probe():
    assert PROBE.search('hook = getattr(stack, "needs_one_host", None)')
    assert PROBE.search('if hasattr(state.stack, "model_objects")')
    assert not PROBE.search('getattr(module, "x", None)')


def test_traits_reads_what_a_stack_has_and_none_for_the_rest():
    class Partial:
        capabilities = None

        def gpu_count(self):
            return 3

    resolved = traits(Partial())
    assert resolved.gpu_count() == 3 and resolved.preload is None and resolved.model_objects_of(object()) == []
    assert traits(None) == Traits()
