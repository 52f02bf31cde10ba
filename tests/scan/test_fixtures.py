"""The scan against hand-labelled fixtures: every ``# expect:`` comment must be found, and
nothing else.

A fixture line that must be flagged ends with ``# expect: CODE`` (a hazard), ``# expect:
CODE safe`` (a finding judged safe), or several of those separated by commas. Lines without
the comment must produce no finding at all.
"""

from __future__ import annotations

import collections
import pathlib
import re

import pytest

from harness.scan.codes import Code
from harness.scan.finding import Severity
from harness.scan.scanner import scan_paths

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
_EXPECT = re.compile(r"#\s*expect:\s*(?P<items>[A-Za-z0-9 ,]+)\s*$")
_DEFAULT_SEVERITY = {
    Code.FILE_NOT_PARSED: Severity.ERROR,
    Code.SUPPRESSION_WITHOUT_REASON: Severity.ERROR,
}

Label = tuple[str, int, str, str]  # file name, line, code label, severity


def expected_labels(path: pathlib.Path) -> collections.Counter:
    labels: collections.Counter = collections.Counter()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = _EXPECT.search(line)
        if match is None:
            continue
        for item in match.group("items").split(","):
            words = item.split()
            code = Code.from_label(words[0])
            severity = Severity(words[1]) if len(words) > 1 else _DEFAULT_SEVERITY.get(code, Severity.HAZARD)
            labels[(path.name, number, code.label, severity.value)] += 1
    return labels


def found_labels(findings) -> collections.Counter:
    return collections.Counter(
        (pathlib.Path(f.path).name, f.line, f.code.label, f.severity.value) for f in findings
    )


@pytest.fixture(scope="module")
def fixture_scan():
    return scan_paths([str(FIXTURES)])


def _precision_recall(expected: collections.Counter, found: collections.Counter) -> tuple[float, float]:
    true_positives = sum((expected & found).values())
    precision = true_positives / sum(found.values()) if found else 1.0
    recall = true_positives / sum(expected.values()) if expected else 1.0
    return precision, recall


def test_every_fixture_has_labels_or_is_a_pure_negative():
    files = sorted(FIXTURES.glob("*.py"))
    assert len(files) >= 10
    negatives = [f.name for f in files if not expected_labels(f)]
    assert set(negatives) >= {"negatives.py", "te_post_fix.py", "shadowed_id.py"}


def test_findings_equal_expectations(fixture_scan):
    expected: collections.Counter = collections.Counter()
    for path in sorted(FIXTURES.glob("*.py")):
        expected += expected_labels(path)
    found = found_labels(fixture_scan.findings)
    missing = sorted((expected - found).elements())
    unexpected = sorted((found - expected).elements())
    messages = {
        (pathlib.Path(f.path).name, f.line, f.code.label, f.severity.value): f.message for f in fixture_scan.findings
    }

    precision, recall = _precision_recall(expected, found)
    hazard_expected = collections.Counter({k: v for k, v in expected.items() if k[3] != "safe"})
    hazard_found = collections.Counter({k: v for k, v in found.items() if k[3] != "safe"})
    hazard_precision, hazard_recall = _precision_recall(hazard_expected, hazard_found)
    print(
        f"\nfixture set: {sum(expected.values())} labelled findings in {len(list(FIXTURES.glob('*.py')))} files; "
        f"precision {precision:.3f}, recall {recall:.3f} (code and severity must both match); "
        f"failing findings only: precision {hazard_precision:.3f}, recall {hazard_recall:.3f}"
    )
    assert not missing and not unexpected, (
        "missing: " + repr(missing) + "\nunexpected: " + "\n".join(f"{u}: {messages.get(u)}" for u in unexpected)
    )
    assert precision == 1.0 and recall == 1.0
    assert hazard_precision == 1.0 and hazard_recall == 1.0


def test_suppression_with_reason_is_counted(fixture_scan):
    assert fixture_scan.suppressed == 1


def test_te_shaped_fixtures_flag_the_pre_fix_registries(fixture_scan):
    by_file = collections.defaultdict(set)
    for finding in fixture_scan.findings:
        if finding.severity is Severity.HAZARD:
            by_file[pathlib.Path(finding.path).name].add(finding.code.label)
    assert by_file["te_pre_fix_registry.py"] == {"IDK001", "IDK002"}
    assert by_file["te_post_cast_hook.py"] == {"IDK001", "IDK002", "IDK003"}
    assert "te_post_fix.py" not in by_file


def test_safe_findings_say_why(fixture_scan):
    for finding in fixture_scan.findings:
        if finding.severity is Severity.SAFE:
            assert finding.message.endswith("(safe)")
            reason = finding.detail.split(": ", 1)[1]
            assert any(word in reason for word in (
                "holds", "dies", "temporary", "memo", "finalize", "every", "belongs", "finally", "whole process",
                "removes", "empties", "made without", "passed in", "checks", "new container", "drop it", "overwrites",
            )), reason


# The false-alarm patterns met on large codebases, one fixture each, every safe case beside a
# hazard that differs from it in the one respect the rule looks at (pattern 6, one finding
# per registry, is tested in test_cli.py).
FALSE_ALARM_PATTERNS = {
    "used_at_once.py": "maps that live for one call but escape on paper",
    "never_die.py": "ids of objects that never die",
    "holders.py": "a holder connected to the registry",
    "bounded.py": "lifetimes bounded by a free or a context exit",
    "finalize_indirect.py": "weakref pruning through indirection",
    "lost_rules.py": "a functools-cached container is one registry; reg[id(x)].append(v) is a store",
    "stores_unseen.py": "stores through dict.update and through a method, beside stores that hold their object",
    "transient_closures.py": "a function handed out only while its call runs",
    "rebound_attributes.py": "an attribute of an imported module that something replaces",
    "file_names.py": "an id written into a file name",
    "counts.py": "a registry that only counts",
    "owners.py": "an entry made with the object; a wrapper that sets the object once and owns the registry",
    "held_entries.py": "an entry that is the object handed back, a class chosen for it, or holds the keyed item",
}


@pytest.mark.parametrize("name", sorted(FALSE_ALARM_PATTERNS))
def test_false_alarm_pattern_is_safe_and_its_contrast_a_hazard(fixture_scan, name):
    expected = expected_labels(FIXTURES / name)
    found = found_labels(f for f in fixture_scan.findings if pathlib.Path(f.path).name == name)
    assert found == expected, FALSE_ALARM_PATTERNS[name]
    severities = {label[3] for label in expected}
    assert severities == {"safe", "hazard"}, f"{name} needs both safe cases and a hazard contrast"
