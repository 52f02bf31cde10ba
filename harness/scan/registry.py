"""The whole-scan judgement of every use, and the grouping of uses into one finding per
registry.

:func:`judge` runs once every module has been walked (:func:`~harness.scan.analyzer.analyze`),
because a use's severity can depend on other files: a read is safe exactly when every store
into the same state keeps its object alive, a store is bounded when another function frees
its entries or a context exit clears them (:mod:`harness.scan.resets`), and a store guarded
by ``assert key in other`` is safe when ``other`` holds its objects. The scanner then applies
suppressions to the per-line records and calls :func:`group`: one
:class:`~harness.scan.finding.RegistryFinding` per registry and severity, with its stores and
reads, why it is a hazard and the fix (:mod:`harness.scan.advice`).
"""

from __future__ import annotations

import ast
import collections
import dataclasses
from typing import Optional

from harness.scan import advice
from harness.scan.analyzer import Hit, Use
from harness.scan.confidence import assess, bound_param, loop_source
from harness.scan.pins import find_pins
from harness.scan.finding import Finding, RegistryFinding, Severity
from harness.scan.verdict import Lifetime
from harness.scan.resets import Clear, Prune, bounding
from harness.scan.syntax import render, root_of

_ROLE = {Use.STORE: "store", Use.READ: "read", Use.SAVED: "saved", Use.CACHED: "cached"}


@dataclasses.dataclass(frozen=True)
class Judged:
    hit: Hit
    severity: Severity
    reason: str


def judge(hits: list[Hit], prunes: list[Prune], clears: list[Clear]) -> list[Judged]:
    """Every hit with its severity and the reason for it."""
    prunes_by = _by_identity(prunes)
    clears_by = _by_identity(clears)
    holding: dict[str, list[bool]] = collections.defaultdict(list)
    for hit in hits:
        if hit.use is Use.STORE and hit.verdict.identity:
            holding[hit.verdict.identity].append(hit.kept_alive is not None)

    judged_stores: dict[Hit, Judged] = {}
    for hit in hits:
        if hit.use in (Use.STORE, Use.SAVED):
            judged_stores[hit] = _judge_store(hit, prunes_by, clears_by, holding)
    by_identity: dict[str, list[bool]] = collections.defaultdict(list)
    by_attribute: dict[str, list[bool]] = collections.defaultdict(list)
    for hit, verdict in judged_stores.items():
        if hit.use is not Use.STORE:
            continue
        safe = verdict.severity is Severity.SAFE
        if hit.verdict.identity:
            by_identity[hit.verdict.identity].append(safe)
        if hit.attribute:
            by_attribute[hit.attribute].append(safe)

    results = []
    for hit in hits:
        if hit in judged_stores:
            results.append(judged_stores[hit])
        else:
            results.append(_judge_read(hit, by_identity, by_attribute, clears_by))
    return _counts_only(results)


def _counts_only(results: list[Judged]) -> list[Judged]:
    """A registry every use of which adds to a count kept per key (``n[id(x)] += 1``) can
    change nothing but that count: a stale entry makes a new object's count start high,
    and no decision reads it (a read that decides is a use of its own, and keeps the hazard)."""
    uses: dict[str, list[Hit]] = collections.defaultdict(list)
    for item in results:
        uses[registry_key(item.hit)[0]].append(item.hit)
    counted = {key for key, hits in uses.items() if all(hit.count for hit in hits)}
    return [
        Judged(item.hit, Severity.SAFE, (
            f"every use of {registry_key(item.hit)[1]} adds to a count kept per key: a stale entry can "
            "change nothing but that count"
        )) if item.severity is Severity.HAZARD and registry_key(item.hit)[0] in counted else item
        for item in results
    ]


def _by_identity(items) -> dict[str, list]:
    found: dict[str, list] = collections.defaultdict(list)
    for item in items:
        found[item.identity].append(item)
    return found


def _judge_store(hit: Hit, prunes: dict, clears: dict, holding: dict) -> Judged:
    if hit.kept_alive:
        return Judged(hit, Severity.SAFE, hit.kept_alive)
    if hit.verdict.safe:
        return Judged(hit, Severity.SAFE, hit.verdict.reason)
    bound = bounding(hit.verdict.identity, hit.where, prunes, clears, hit.allocated)
    if bound:
        return Judged(hit, Severity.SAFE, bound)
    for identity, line in hit.guards:
        if holding.get(identity) and all(holding[identity]):
            return Judged(hit, Severity.SAFE, (
                f"line {line} checks the key is in {_short(identity)}, every store into which holds its object: "
                "the object is alive while the key is in use (an invariant spanning two registries)"
            ))
    return Judged(hit, Severity.HAZARD, f"{hit.verdict.reason}; {hit.use.value}")


def _judge_read(hit: Hit, by_identity: dict, by_attribute: dict, clears: dict) -> Judged:
    if hit.kept_alive:
        return Judged(hit, Severity.SAFE, hit.kept_alive)
    if hit.verdict.safe:
        return Judged(hit, Severity.SAFE, hit.verdict.reason)
    hazard = Judged(hit, Severity.HAZARD, f"{hit.verdict.reason}; {hit.use.value}")
    if hit.use is not Use.READ:
        return hazard
    identity = hit.verdict.identity
    stores = by_identity.get(identity) if identity else None
    if stores:
        if all(stores):
            return Judged(hit, Severity.SAFE, f"every store into {_short(identity)} in the scanned files is safe, so a read finds no stale entry")
        return hazard
    if identity and identity in clears:
        clear = clears[identity][0]
        return Judged(hit, Severity.SAFE, f"{clear.where}() empties {_short(identity)} when the context exits ({clear.path}:{clear.line})")
    attribute = hit.attribute
    if attribute and by_attribute.get(attribute) and (
        hit.verdict.lifetime in (Lifetime.PARAM, Lifetime.UNKNOWN, Lifetime.GLOBAL_OBJECT) or _of_another_object(hit)
    ):
        if all(by_attribute[attribute]):
            return Judged(hit, Severity.SAFE, f"every store into an attribute named {attribute} in the scanned files is safe, so a read finds no stale entry")
        return hazard
    if hit.verdict.lifetime in (Lifetime.PARAM, Lifetime.UNKNOWN) and hit.key is not None and hit.key.objects:
        # The id is taken here, of an object alive here: only a stale entry the caller put
        # in the container could match, and that store is where the hazard would be.
        return Judged(hit, Severity.SAFE, (
            f"it reads {render(hit.container) if hit.container is not None else 'a container'} that is passed in, and no "
            "id-keyed store into it is in the scanned files: a hazard, if any, is where the caller fills it"
        ))
    return hazard


def _of_another_object(hit: Hit) -> bool:
    """``self.manager.components``: the container is an attribute of an object the method's
    own object holds, whose class the scan cannot tell; its stores are matched by name."""
    root, parts = root_of(hit.container)
    attributes = parts[: parts.index("[]")] if "[]" in parts else parts
    scope = hit.module.scope_of(hit.node)
    return isinstance(root, ast.Name) and root.id == bound_param(scope) and len(attributes) >= 2


def _short(identity: str) -> str:
    """``Class.attr``, ``name`` or ``name in f()`` for an identity as :mod:`lifetime` spells it."""
    if "::" not in identity:
        return identity
    _, _, rest = identity.partition("::")
    scope, _, name = rest.rpartition(":")
    if not scope:
        return rest
    if name == "<cached>":
        return f"the container {scope}() returns from its functools cache"
    if name == "<returned>":
        return f"the container {scope}() returns"
    return f"{name} in {scope}()"


def registry_key(hit: Hit) -> tuple[str, str]:
    """``(key, name)``: the uses of one registry share the key; the name is what the report shows."""
    identity = hit.verdict.identity
    if identity:
        return identity, _short(identity)
    shown = render(hit.container) if hit.container is not None else render(hit.node)
    return f"{hit.module.path}::{hit.where}:{shown}", f"{shown} in {hit.where}()"


def to_findings(judged: list[Judged], source_lines: dict[str, list[str]]) -> list[Finding]:
    """One per-line :class:`Finding` per judged hit."""
    findings = []
    for item in judged:
        hit = item.hit
        line = getattr(hit.node, "lineno", 1)
        col = getattr(hit.node, "col_offset", 0) + 1
        lines = source_lines.get(hit.module.path, [])
        snippet = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        key, _ = registry_key(hit)
        findings.append(Finding(
            hit.module.path, line, col, hit.code, item.severity, f"{hit.subject}: {item.reason}", snippet,
            registry=key, role=_ROLE[hit.use], subject=hit.subject,
        ))
    return findings


def group(findings: list[Finding], judged: list[Judged], factory_bases: Optional[dict[str, set[str]]] = None) -> list[RegistryFinding]:
    """One finding per registry, with every use; findings that are not uses of
    a registry (IDK010, IDK011) stand alone. Each hazard gets its confidence
    (:mod:`harness.scan.confidence`); ``factory_bases`` maps a key factory to the factories
    it is built on."""
    pins = find_pins(judged)
    hit_of: dict[tuple, Judged] = {}
    for item in judged:
        hit = item.hit
        # one call can use several registries (``self.set(k, v)`` storing into two of the
        # instance's dicts): a use is known by its place, registry and role
        place = (hit.module.path, getattr(hit.node, "lineno", 1), getattr(hit.node, "col_offset", 0) + 1, hit.code)
        hit_of[(*place, registry_key(hit)[0], _ROLE[hit.use])] = item
    groups: dict[tuple, list[Finding]] = collections.defaultdict(list)
    alone: list[RegistryFinding] = []
    for finding in findings:
        if not finding.registry:
            alone.append(RegistryFinding("", finding.severity, finding.detail, "", (finding,)))
            continue
        groups[finding.registry].append(finding)
    result = list(alone)
    for key, uses in groups.items():
        # one finding per registry: a hazard if any use is one (its safe uses listed with it)
        severity = Severity.HAZARD if any(u.severity is Severity.HAZARD for u in uses) else uses[0].severity
        uses.sort(key=Finding.sort_key)
        items = [hit_of.get((u.path, u.line, u.col, u.code, u.registry, u.role)) for u in uses]
        items = [i for i in items if i is not None]
        name = registry_key(items[0].hit)[1] if items else key
        finding = _registry_finding(name, severity, uses, items)
        if severity is Severity.HAZARD and items:
            assessment = assess([i for i in items if i.severity is Severity.HAZARD], pins, factory_bases or {})
            finding = dataclasses.replace(finding, confidence=assessment.confidence, confidence_reason=assessment.reason)
        result.append(finding)
    result.sort(key=RegistryFinding.sort_key)
    return result


def _registry_finding(name: str, severity: Severity, uses: list[Finding], items: list[Judged]) -> RegistryFinding:
    roles = {use.role for use in uses}
    if severity is not Severity.HAZARD:
        reasons = list(dict.fromkeys(item.reason for item in items))
        return RegistryFinding(name, severity, "; ".join(reasons), "", tuple(uses))
    items = [item for item in items if item.severity is Severity.HAZARD] or items
    uses_wrong = [use for use in uses if use.severity is Severity.HAZARD] or uses
    primary = _primary(items)
    lifetime_reason = primary.hit.verdict.reason if primary is not None else ""
    lifetime = primary.hit.verdict.lifetime if primary is not None else Lifetime.UNKNOWN
    # what is keyed: the keys that name their objects (id(w._data)) before loop variables
    keyed = sorted(
        (item.hit for item in items if item.hit.key is not None),
        key=lambda hit: (not hit.key.objects, hit.use is Use.READ),
    )
    keys = list(dict.fromkeys(hit.key.text for hit in keyed))
    if keyed and keys:
        keys[0] = f"{keys[0]} ({_origin(keyed[0])})"
    return RegistryFinding(
        name, severity, advice.why(lifetime_reason, keys, uses_wrong), advice.fix({u.code for u in uses}, roles, lifetime),
        tuple(uses), lifetime.value,
    )


def _origin(hit: Hit) -> str:
    """Where the keyed objects come from, and so why they can die first: the object the
    method runs on (or what it holds), objects callers pass in (directly or as elements of
    what they pass), or objects found or made at run time."""
    scope = hit.module.scope_of(hit.node)
    while not isinstance(scope.node, (ast.FunctionDef, ast.AsyncFunctionDef)) and scope.parent is not None:
        scope = scope.parent          # a comprehension or lambda: the function around it
    own = bound_param(scope)
    kinds = set()
    for obj in hit.key.objects:
        root, _ = root_of(obj)
        name = root.id if isinstance(root, ast.Name) else ""
        source = loop_source(scope.node, name, near=obj) if name and name not in scope.params else None
        if source is not None:
            base, _ = root_of(source)
            name = base.id if isinstance(base, ast.Name) else ""
        kinds.add("own" if name == own else "param" if name in scope.params else "other")
    if kinds == {"own"}:
        return f"{own} (the object the method runs on) or what it holds, which can be replaced or die while the registry lives"
    if kinds == {"param"}:
        return "objects callers pass in, which they can drop while the registry lives"
    return "objects found or made at run time, which can die while the registry lives"


def _primary(items: list[Judged]) -> Optional[Judged]:
    """The use whose container verdict explains the registry: a store if there is one."""
    for item in items:
        if item.hit.use is Use.STORE:
            return item
    return items[0] if items else None
