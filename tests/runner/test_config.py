"""The run configuration: frozen, validated once, every default in one place, options declared once."""

from __future__ import annotations

import dataclasses
import math
import pathlib
import re

import pytest

from harness.errors import UsageError
from harness.idreuse.morgue import ReuseMode, ReusePolicy
from harness.runner.config import DEFAULT_WORLD_SIZE, Launcher, RunConfig
from harness.runner.options import OPTIONS, Front, Kind, config_from_values, options_for
from harness.runner.rank.settings import RankSettings


def test_defaults_and_the_world_size_each_launcher_implies():
    cfg = RunConfig()
    assert cfg.launcher is Launcher.SPAWN and cfg.world_size == DEFAULT_WORLD_SIZE
    assert cfg.reuse.mode is ReuseMode.NATURAL and cfg.deadline_s == 10.0 and cfg.isolation and cfg.precheck
    assert RunConfig(launcher="inproc").world_size == 1


def test_it_is_frozen_and_replace_validates_again():
    cfg = RunConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.world_size = 4
    with pytest.raises(UsageError, match="inproc"):
        cfg.replace(launcher="inproc", world_size=2)


@pytest.mark.parametrize("changes, message", [
    ({"launcher": "slurm"}, "unknown launcher 'slurm'"),
    ({"world_size": 0}, "--world-size must be an integer >= 1"),
    ({"world_size": True}, "--world-size must be an integer >= 1"),
    ({"deadline_s": 0}, "--deadline must be > 0"),
    ({"deadline_s": math.nan}, "--deadline must be > 0"),
    ({"deadline_s": math.inf}, "--deadline must be > 0"),
    ({"reuse": "asymmetric:2"}, "ranks must be < world size 2"),
    ({"reuse": "sometimes"}, "expected one of off, natural"),
    ({"ub_link_gbps": -1.0}, "positive"),
    ({"faults": True, "case_file": "x.json"}, "give one of them"),
])
def test_bad_fields_are_one_line_usage_errors(changes, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")) as exc:
        RunConfig(**changes)
    assert "\n" not in str(exc.value)


def test_rank_settings_carry_every_rank_relevant_field_and_round_trip():
    cfg = RunConfig(sut="emulated-buggy", inject=None, seed=7, reuse="asymmetric:1", strict=True, deadline_s=3.5,
                    precheck=False, ub_link_gbps=0.5, reset_between_cases=True, check_reference=False)
    settings = cfg.rank_settings()
    assert settings == RankSettings.from_dict(settings.to_dict())
    assert (settings.seed, settings.reuse, settings.deadline_s, settings.precheck, settings.ub_link_gbps) == \
        (7, ReusePolicy(ReuseMode.ASYMMETRIC, (1,)), 3.5, False, 0.5)
    # Every setting a rank gets comes from the configuration: none has a default of its own.
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(RankSettings))


def test_every_option_sets_a_real_field_and_no_field_is_declared_twice():
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    assert {o.field for o in OPTIONS} <= fields
    for front in Front:
        flags = [o.flag_for(front) for o in options_for(front)]
        assert len(flags) == len(set(flags))
    assert len({o.field for o in OPTIONS}) == len(OPTIONS)


def test_an_option_left_out_leaves_the_default_of_the_configuration():
    values = {o.field: None for o in options_for(Front.RUN)}
    assert config_from_values(values, Front.RUN) == RunConfig()
    values.update(deadline_s=3.0, isolation=False, reuse=ReusePolicy.parse("symmetric"))
    cfg = config_from_values(values, Front.RUN)
    assert (cfg.deadline_s, cfg.isolation, cfg.reuse.mode) == (3.0, False, ReuseMode.SYMMETRIC)


def test_the_stress_seed_is_todays_date_unless_given():
    import datetime

    stress = config_from_values({}, Front.STRESS)
    assert stress.seed == int(datetime.date.today().strftime("%Y%m%d"))
    assert config_from_values({}, Front.RUN).seed == 0
    assert config_from_values({"seed": 5}, Front.STRESS).seed == 5


def test_the_link_comes_from_the_environment_when_no_option_sets_it(monkeypatch):
    monkeypatch.setenv("HARNESS_UB_LINK_GBPS", "0.25")
    assert config_from_values({}, Front.RUN).ub_link_gbps == 0.25
    assert config_from_values({"ub_link_gbps": 2.0}, Front.RUN).ub_link_gbps == 2.0
    monkeypatch.setenv("HARNESS_UB_LINK_GBPS", "fast")
    with pytest.raises(UsageError, match="HARNESS_UB_LINK_GBPS='fast'"):
        config_from_values({}, Front.RUN)


def test_front_ends_parse_the_same_option_the_same_way():
    import argparse

    from harness.runner.options import add_to_argparse

    parser = argparse.ArgumentParser()
    add_to_argparse(parser, Front.STRESS)
    args = parser.parse_args(["--reuse", "asymmetric:1", "--deadline", "4", "--no-precheck", "--strict"])
    assert args.reuse == ReusePolicy.parse("asymmetric:1") and args.deadline_s == 4.0
    assert args.precheck is False and args.strict is True and args.world_size is None
    assert parser.parse_args(["--no-isolation"]).isolation is False
    with pytest.raises(SystemExit):
        parser.parse_args(["--reset-between-cases"])   # a run-only option: stress draws its own cases
    assert {o.kind for o in OPTIONS} == set(Kind)


def unread_options(options, sources: str) -> list[str]:
    """The flags of ``options`` whose field no code reads (``.field`` or ``"field"``)."""
    return [o.flag for o in options if not re.search(rf"(\.{o.field}\b|[\"']{o.field}[\"'])", sources)]


def test_every_option_is_read_beyond_its_declaration():
    root = pathlib.Path(__file__).resolve().parents[2] / "harness"
    declared = {root / "runner" / "options.py", root / "runner" / "config.py"}
    sources = "\n".join(p.read_text() for p in sorted(root.rglob("*.py")) if p not in declared)
    assert unread_options(OPTIONS, sources) == []
    # an option declared and read nowhere is found
    assert unread_options([dataclasses.replace(OPTIONS[0], field="nowhere_dir")], sources) == [OPTIONS[0].flag]
