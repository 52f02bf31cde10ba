"""The hazards of part A of the eleventh blind census (docs/log/2026-12-07-scan-blind-census-11-a.md), reproduced.

Each test works as those of ``test_blind_census_10_a.py`` do: the released code, with the dead
object's address given back by force, answers for the dead object, and answers right when the
first object is kept alive (the control).

Each package is pinned to the release the census read; a test is skipped, naming the package
and the version, when that release is not installed:

    pip install --target DIR --no-deps openfisca-core==46.0.1 openfisca-country-template==8.2.0 \
        'StrEnum<0.5' 'dpath<3' numexpr pendulum sortedcontainers awkward0==0.15.5 \
        mlx-vlm==0.7.10 mlx==0.32.4 mlx-cpu==0.32.4 llguidance==1.9.1 transformers==5.25.0 \
        tokenizers==0.23.3 huggingface_hub safetensors regex jinja2 markupsafe pyyaml filelock tqdm \
        typer-slim hf-xet fsspec shellingham click requests urllib3 idna certifi charset-normalizer
    PYTHONPATH=DIR:$PWD .venv/bin/python -m pytest -p no:xdist cases/blind/test_blind_census_11_a.py -q

(mlx runs on the CPU through mlx-cpu; the logits processor's ``__call__`` needs Metal, so the
mlx-vlm test reads the token mask that ``prepare_next_token_mask`` fills on the CPU.) Objects that
die in reference cycles (a tax-benefit system and its entities, a tokenizer) are freed by a
collection at the moment the forcing frees them.
"""

from __future__ import annotations

import gc
import sys

import numpy as np

from cases.blind.pinned import Pins
from harness.idreuse.landing import born_on_death_of, seed_pools
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("openfisca-core==46.0.1", "openfisca-country-template==8.2.0", "awkward0==0.15.5",
            "mlx-vlm==0.7.10")


class _Box(list):
    """The dead object's only reference; emptying it also collects, for objects that die in cycles.

    Call :func:`_collected` before the forcing, so that this collection frees the dead object's
    cycle and little else (garbage freed with it would put free blocks ahead of its own)."""

    def clear(self):
        super().clear()
        gc.collect()


def _collected() -> None:
    """Free the cyclic garbage made so far, while the object to be freed is still referenced."""
    gc.collect()
    gc.collect()


class _Shell:
    """A plain instance of the size class of a class whose own instances cannot die bare."""


def _system_fails(test_runner, system, path) -> int:
    return test_runner.run_tests(system, str(path), {})


def _openfisca_second_system_result(tmp_path, monkeypatch, reuse: bool) -> tuple:
    """run_tests for a default system, then for a system with an income tax rate of 0.5, born on
    the first one's address (``reuse``) or made while the first is kept alive (the control)."""
    test_runner = PINS.need("openfisca-core", "openfisca_core.tools.test_runner")
    periods = PINS.need("openfisca-core", "openfisca_core.periods")
    template = PINS.need("openfisca-country-template", "openfisca_country_template")
    system_class = template.CountryTaxBenefitSystem
    monkeypatch.setattr(test_runner, "_tax_benefit_system_cache", {})    # the store of this scenario alone
    tmp_path.mkdir()
    default, raised = tmp_path / "default.yaml", tmp_path / "raised.yaml"
    for path, expected in ((default, 1500), (raised, 5000)):
        path.write_text(f"- name: income tax {expected}\n  period: 2017-01\n  input:\n    salary: 10000\n"
                        f"  output:\n    income_tax: {expected}\n")
    kept = seed_pools(lambda: object.__new__(system_class))
    box = _Box([system_class()])
    first = _system_fails(test_runner, box[0], default)
    alive = None if reuse else box[0]
    if reuse:
        _collected()
        with quiet_allocator(), born_on_death_of(system_class, box) as landing:
            second = system_class()
        assert landing.require() is second
    else:
        second = system_class()
    second.parameters.taxes.income_tax_rate.update(start=periods.instant("2017-01-01"), value=0.5)
    result = _system_fails(test_runner, second, raised)
    del alive, kept
    return first, result


def test_openfisca_test_runner_runs_a_new_systems_tests_on_a_dead_systems_clone(tmp_path, monkeypatch):
    """openfisca_core/tools/test_runner.py:779-801 caches the system each YAML test runs on in a
    module-level dict under hash((id(baseline), reforms, extensions)), keeping only the baseline's
    clone: a tax-benefit system born on a dead one's address runs its tests on the dead system's
    clone (the second system's raised income tax rate is not seen, and its test fails)."""
    # pytest's assertion-rewriting hook keeps the last nested session, and with it the system, alive
    monkeypatch.setenv("PYTEST_ADDOPTS", "--assert=plain -p no:cacheprovider")
    assert _openfisca_second_system_result(tmp_path / "forced", monkeypatch, reuse=True) == (0, 1)    # released: fails
    assert _openfisca_second_system_result(tmp_path / "control", monkeypatch, reuse=False) == (0, 0)  # control: passes


def _awkward_copy_reads(reuse: bool) -> tuple:
    """What a copy of a materialised VirtualArray reads once the original is dropped and a new
    VirtualArray sharing the cache is materialised: born on the original's address (``reuse``) or
    made while the original is kept alive (the control)."""
    awkward0 = PINS.need("awkward0", "awkward0")
    cache: dict = {}
    kept = seed_pools(_Shell)
    box = [awkward0.VirtualArray(lambda: np.arange(5), cache=cache)]
    box[0].array                                  # materialised under TransientKey(id(original))
    copy = box[0].copy()                          # the copy shares the original's key
    first = copy.array.tolist()
    alive = None if reuse else box[0]

    def generate():
        return np.arange(100, 105)

    if reuse:
        with quiet_allocator(), born_on_death_of(awkward0.VirtualArray, box) as landing:
            new = awkward0.VirtualArray(generate, cache=cache)
        assert landing.require() is new
    else:
        new = awkward0.VirtualArray(generate, cache=cache)
    new.array
    result = copy.array.tolist()
    del alive, kept
    return first, result


def test_awkward0_virtual_array_copy_reads_a_new_arrays_data(monkeypatch):
    """awkward0/array/virtual.py:47-60 gives a copy the original's TransientKey(id(original))
    (:274-278), and the original's __del__ (:350-356) removes only its own entry: a new
    VirtualArray born on the original's address, sharing the cache, materialises under the same
    key, and the copy reads the new array's data."""
    # the forcing's bare probes of VirtualArray run its __del__ on an uninitialised instance
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: None)
    assert _awkward_copy_reads(reuse=True) == ([0, 1, 2, 3, 4], [100, 101, 102, 103, 104])   # released
    assert _awkward_copy_reads(reuse=False) == ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4])            # control


def _first_allowed_token(structured, tokenizer) -> str:
    """The text of the tokens the JSON-schema processor allows first (``{`` for an object)."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    processor = structured.build_json_schema_logits_processor(tokenizer, schema)
    processor.prepare_next_token_mask(0)
    bits = np.unpackbits(np.asarray(processor.bitmask).reshape(-1).astype(np.uint32).view(np.uint8),
                         bitorder="little")
    return tokenizer.decode([i for i in np.nonzero(bits)[0].tolist() if i < len(tokenizer)])


def test_mlx_vlm_structured_output_uses_a_dead_tokenizers_vocabulary(monkeypatch):
    """mlx_vlm/structured.py:259-285 caches the llguidance tokenizer built from a tokenizer in a
    module-level dict under id(tokenizer), holding no reference to it: a tokenizer born on a dead
    one's address gets a matcher over the dead tokenizer's vocabulary, and the first token a JSON
    object may start with is the wrong byte."""
    structured = PINS.need("mlx-vlm", "mlx_vlm.structured")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    class ByteTokenizer(PreTrainedTokenizerFast):
        pass

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())

    def make(reverse: bool):
        vocab = {c: i for i, c in enumerate(alphabet[::-1] if reverse else alphabet)}
        vocab["<eos>"] = len(vocab)
        core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
        core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        core.decoder = decoders.ByteLevel()
        return ByteTokenizer(tokenizer_object=core, eos_token="<eos>")

    def second_first_token(reuse: bool) -> str:
        monkeypatch.setattr(structured, "_llg_tokenizer_cache", {})    # the store of this scenario alone
        kept = seed_pools(lambda: object.__new__(ByteTokenizer))
        box = _Box([make(reverse=False)])
        assert _first_allowed_token(structured, box[0]) == "{"
        alive = None if reuse else box[0]
        if reuse:
            _collected()
            with quiet_allocator(), born_on_death_of(ByteTokenizer, box) as landing:
                second = make(reverse=True)
            assert landing.require() is second
        else:
            second = make(reverse=True)
        result = _first_allowed_token(structured, second)
        del alive, kept
        return result

    assert second_first_token(reuse=True) != "{"    # released: the dead tokenizer's id for "{"
    assert second_first_token(reuse=False) == "{"   # control
