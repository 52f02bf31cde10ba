"""Retention: registries that grow while dead models' state stays alive; a stack's declaration of
what it keeps on purpose.

Known bad: a stack that declares nothing (the patched emulated stack without its
``retained_on_purpose``): its amax buffers' growth is a warning, and a failure under ``--strict``.
The patched stack's declared growth is a note under ``--strict`` too; a stack that prunes has none.
"""

from __future__ import annotations

import torch

from harness.stacks import load_stack
from harness.stacks.emulated.stack import EmulatedStack
from tests.test_oracles import fresh_registries, one_thread, probe_case, run  # noqa: F401 (its fixtures too)


class DeclaresNothingStack(EmulatedStack):
    """The patched stack without its declaration that the amax buffers are kept on purpose."""

    retained_on_purpose: dict = {}


def test_retention_is_a_warning_by_default_and_a_failure_under_strict():
    # Fresh registries, 3 models of 2 layers (16 -> 32 -> 16), history 16.
    # Every layer appends its forward and backward meta to the global buffers and nothing prunes:
    #   buffers: 2 keys (fwd, bwd) + 2 * 3 models * 2 layers = 12 metas          -> +14 entries
    #   one meta: amax_history [16, 2] + scale [2] + scale_inv [2] + scaled_max [2] = 38 floats = 152 B
    #   12 metas -> 1824 B; autocast_arguments: 1 key (recipe, group), no tensors -> +1 entries, +0 B
    #   retained: 4 tensors per meta -> 48 tensors, 1824 B.
    # Known bad: a stack that does not declare that growth (the patched one does: a note).
    expected = ("48 tensors (1824 B) of this case's dead models stay alive; registries grew by: "
                "amax_buffers.buffers +14 entries (+1824 B), amax_buffers.autocast_arguments +1 entries (+0 B)")
    case = probe_case(models=3)
    stack = DeclaresNothingStack(buggy=False)
    stack.reset()
    relaxed = run(case, stack)
    assert relaxed.failures == []
    assert relaxed.warnings == [f"retention: {expected}"]

    stack.reset()
    strict = run(case, stack, strict=True)
    assert [(f.oracle, f.detail, f.registry) for f in strict.failures] == \
        [("retention", expected, "amax_buffers.autocast_arguments")]
    assert strict.warnings == []

    # The same case again in the same process: the keys exist, the buffers grow by 12 metas more.
    again = run(case, stack, strict=True)
    assert [(f.oracle, f.detail) for f in again.failures] == [(
        "retention", "48 tensors (1824 B) of this case's dead models stay alive; registries grew by: "
                     "amax_buffers.buffers +12 entries (+1824 B)")]

    # The patched stack keeps both on purpose: a note, under --strict too.
    patched = load_stack("emulated-patched")
    patched.reset()
    noted = run(case, patched, strict=True)
    assert noted.failures == [] and noted.warnings == [f"retention: {expected} (kept on purpose by the stack)"]


def test_growth_beside_what_a_stack_keeps_on_purpose_fails_under_strict():
    from harness.oracles.retention import describe_growth, split_growth

    grew = {"amax_buffers.buffers": {"entries": 2, "bytes": 8}, "mine.CACHE": {"entries": 1, "bytes": 4}}
    kept, other = split_growth(grew, EmulatedStack.retained_on_purpose)
    assert list(kept) == ["amax_buffers.buffers"] and list(other) == ["mine.CACHE"]
    assert describe_growth(other) == "mine.CACHE +1 entries (+4 B)"


def test_registry_sizes_reuse_known_bytes_only_where_the_entry_count_is_unchanged():
    from harness.oracles.retention import registry_sizes

    regs = {"a": {"k": [torch.zeros(4)]}, "b": [torch.zeros(2)]}
    first = registry_sizes(regs)
    assert first == {"a": {"entries": 2, "bytes": 16}, "b": {"entries": 1, "bytes": 8}}
    regs["a"]["k"].append(torch.zeros(8))           # "a" grew: walked again
    regs["b"][0] = torch.zeros(100)                  # "b" has the count it had: its known bytes stand
    assert registry_sizes(regs, known=first) == {"a": {"entries": 3, "bytes": 48}, "b": {"entries": 1, "bytes": 8}}
    assert registry_sizes(regs)["b"] == {"entries": 1, "bytes": 400}


class PruningStack(EmulatedStack):
    """The patched stack plus what TE does not do: destroy() drops the model's metas from the buffers."""

    def destroy(self, model):
        from harness.stacks.emulated.amax_buffers import GLOBAL_AMAX_BUFFERS

        mine = {id(meta) for layer in model.layers for meta in (layer.meta_fwd, layer.meta_bwd)}
        buffers = GLOBAL_AMAX_BUFFERS.buffers
        for key in list(buffers):
            buffers[key] = [meta for meta in buffers[key] if id(meta) not in mine]
            if not buffers[key]:
                del buffers[key]
        live = {key[-1] for key in buffers}
        for akey in list(GLOBAL_AMAX_BUFFERS.autocast_arguments):
            if akey not in live:
                del GLOBAL_AMAX_BUFFERS.autocast_arguments[akey]


def test_retention_passes_on_a_stack_that_prunes():
    result = run(probe_case(models=3), PruningStack(buggy=False), strict=True)
    assert result.failures == [] and result.warnings == []
    assert result.retention == {"growth": {}, "retained_tensors": 0, "retained_bytes": 0}


