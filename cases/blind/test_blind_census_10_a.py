"""The hazards of part A of the tenth blind census (docs/log/2026-12-07-scan-blind-census-10-a.md), reproduced.

Each test works as those of ``test_blind_census_9_a.py`` do: the released code, with the dead
object's address given back by force, answers for the dead object, and answers right when the
first object is kept alive (the control). qwix's test is the exception, as autodiffx's was in the
ninth census: the library makes and drops the activations itself, inside one forward, so its test
compares the released call with the same call while every activation is kept alive.

Each package is pinned to the release the census read; a test is skipped, naming the package
and the version, when that release is not installed:

    pip install --target DIR --no-deps saklas==5.3.0 'transformers>=5.10' tokenizers safetensors regex
    pip install --target DIR --no-deps python-doctr==1.1.0 scipy shapely h5py onnx rapidfuzz \
        validators pypdfium2 pyclipper langdetect anyascii six opencv-python-headless
    pip install --target DIR torch==2.14.1 torchvision==0.29.1
    pip install --target DIR qwix==0.1.8 jax jaxlib flax
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_10_a.py -q

(docTR imports torchvision, and PyPI's torchvision does not import beside the project's torch
2.13 CPU build, so DIR holds torch 2.14.1 and torchvision 0.29.1, which shadow it; the census ran
over jax and jaxlib 0.10.2 and flax 0.12.8.) Every scenario gives the stores that outlive it a key
of its own, so that the control cannot hit an entry of the forced run.
"""

from __future__ import annotations

import itertools


from cases.blind.pinned import Pins
from cases.blind.test_blind_census_6_a import _answers
from cases.blind.test_blind_census_9_a import _page_rendered

PINS = Pins("saklas==5.3.0", "python-doctr==1.1.0", "qwix==0.1.8")


class _Tokenizer:
    """A tokenizer with a chat template, as saklas takes one: its ids start at ``offset``."""

    chat_template = "{{ messages }}"

    def __init__(self, offset: int):
        self.offset = offset

    def apply_chat_template(self, messages, add_generation_prompt=True, return_tensors="pt", **kwargs):
        import torch

        return torch.tensor([[self.offset + len(message["content"]) for message in messages]])


def test_saklas_chat_input_cache_gives_a_new_tokenizer_a_dead_ones_ids():
    """saklas/core/generation.py:615-650 keys rendered chat input ids by (id(tokenizer), prompt,
    chat, flags) in a module-level cache holding only the tensor, and build_chat_input (:712-818)
    returns the cached ids: a tokenizer born on a dead tokenizer's address, given the same chat,
    gets the dead tokenizer's ids."""
    generation = PINS.need("saklas", "saklas.core.generation")
    scenarios = itertools.count()

    def first_id(reuse: bool) -> int:
        messages = [{"role": "user", "content": f"hello {next(scenarios)}"}]    # a key of its own

        def render(tokenizer) -> int:
            return int(generation.build_chat_input(tokenizer, messages)[0, 0])

        first, result = _answers(render, lambda: _Tokenizer(5), lambda: _Tokenizer(70),
                                 lambda: object.__new__(_Tokenizer), reuse)
        assert first == 5 + len(messages[0]["content"])
        return result - len(messages[0]["content"])

    assert first_id(reuse=True) == 5     # released: the dead tokenizer's ids
    assert first_id(reuse=False) == 70   # control


def test_doctr_page_renders_a_dead_blocks_text():
    """doctr/io/exporters.py:92-140 memoises a page's reading order on the page under the
    signature (direction, (id(block), len(block.lines)) ...), and the memo keeps new blocks
    built from the lines, never the page's own: a block born on a replaced block's address,
    with as many lines, renders the dead block's text."""
    elements = PINS.need("python-doctr", "doctr.io.elements")
    assert _page_rendered(elements, reuse=True) == "first"     # released: the dead block's text
    assert _page_rendered(elements, reuse=False) == "second"   # control


def test_qwix_qep_quantizes_ops_with_different_inputs_as_one_stage(monkeypatch):
    """qwix/contrib/calibration.py:124 records id(lhs) of each dot_general's input, holding nothing
    of it, and qep.py:477-515 groups consecutive ops with equal ids into one QEP stage, as ops
    that "share the same input activation object": an activation that dies after its op lends
    its address to the next op's input, so in a residual MLP (ten Dense layers, each reading an
    input of its own) ops with different inputs are quantized as one stage. With every input
    kept alive (the control) each op is a stage of its own. The library makes and drops the
    activations itself inside the forward, so the test is not forced: it compares the released
    call with the same call while every input is kept alive."""
    qep = PINS.need("qwix", "qwix.contrib.qep")
    calibration = PINS.need("qwix", "qwix.contrib.calibration")
    import flax.linen as nn
    import jax

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Dense(32)(nn.LayerNorm()(x))
            return x + nn.Dense(16)(nn.relu(h))

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Dense(16)(x)
            for _ in range(4):
                x = Block()(x)
            return nn.Dense(8)(x)

    model = Model()
    data = [jax.random.normal(jax.random.PRNGKey(0), (16, 16))]
    variables = model.init(jax.random.PRNGKey(1), data[0])
    rules = [qep.QepRule(module_path=".*", weight_qtype="int8")]

    def stages() -> tuple:
        result = qep.quantize(model, data, rules, variables=variables)
        return tuple(stage.module_paths for stage in result.stages)

    released = stages()
    kept = []
    original = calibration.CalibrationProvider.dot_general

    def keeping(self, lhs, rhs, *args, **kwargs):
        kept.append(lhs)    # no input of the forward dies, so no address comes back
        return original(self, lhs, rhs, *args, **kwargs)

    monkeypatch.setattr(calibration.CalibrationProvider, "dot_general", keeping)
    control = stages()
    assert ("Block_0/Dense_0", "Block_0/Dense_1") in released    # released: two inputs, one stage
    assert len(control) == 10                                     # control: a stage per op
    assert all(len(paths) == 1 for paths in control)
