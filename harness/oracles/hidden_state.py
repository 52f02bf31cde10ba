"""Hidden state beside the symptom: the stack's containers whose contents differ where a
``reference`` or ``isolation`` finding shows a wrong tensor.

A rank summarises every container the stack has (its declared registries and every container
found by name in its modules, :func:`harness.oracles.hygiene.undeclared_containers`) as its case
begins and after each model died (:func:`container_summary`: per container its key count, entry
sizes and a digest of key shapes, ids blanked). The judge then names, beside the finding
(:func:`hidden_state_line`), the containers that differ

* between the run alone (a fresh process) and the run after other cases, as the case began:
  state an earlier case left (an arena that survives ``reset()``, a stale cache);
* in the run after other cases, between the case's beginning and the end of the model the
  finding is in: state the case itself carried from model to model.

Registries a stack keeps on purpose (``retained_on_purpose``) differ in every shared run and are
left out.
"""

from __future__ import annotations

from harness.collectives.registry_digest import registry_summary
from harness.oracles.findings import Oracle
from harness.oracles.hygiene import undeclared_containers
from harness.stacks.hooks import traits

NAMED = 4      # containers named in one line, at most


def container_summary(stack, found: dict | None = None) -> dict[str, list]:
    """``{name: [keys, entries, digest]}`` of every container of the stack not kept on purpose
    (``found``: those a hygiene scan just walked, by name, where it walked any)."""
    on_purpose = traits(stack).kept_on_purpose()
    if not found:
        declared = stack.registries()
        found = {**declared, **undeclared_containers(stack, declared)}
    return registry_summary({k: v for k, v in found.items() if k not in on_purpose})


def _differ(a: dict, b: dict, how: str) -> list[str]:
    """The containers summarised in both whose summaries differ (one that only one run has is a
    module the other had not imported yet: nothing was in it)."""
    return [f"{name} ({how.format(a[name][0], b[name][0])})" for name in sorted(set(a) & set(b)) if a[name] != b[name]]


def hidden_state_line(shared, alone, model: int | None) -> str:
    """The containers that differ (module docstring), in one line; "" when none does or nothing
    was summarised. ``shared``, ``alone``: the rank's results after other cases and alone (None
    when the case was not re-run alone); ``model``: the finding's model (None: the last)."""
    parts = []
    if alone is not None and alone.start_containers and shared.start_containers:
        found = _differ(alone.start_containers, shared.start_containers, "{} keys alone, {} after other cases")
        if found:
            parts.append(f"as the case began, alone and after other cases: {', '.join(found[:NAMED])}")
    after = shared.model_containers
    if after and shared.start_containers:
        m = len(after) - 1 if model is None else min(model, len(after) - 1)
        found = _differ(shared.start_containers, after[m], "{} -> {} keys")
        if found:
            parts.append(f"from the case's beginning to model {m}'s end: {', '.join(found[:NAMED])}")
    return f"hidden state, containers whose contents differ: {'; '.join(parts)}" if parts else ""


def name_hidden_state(failures: list, results: dict, isolated: dict | None) -> None:
    """Beside each rank's first ``reference`` or ``isolation`` finding, the line of
    :func:`hidden_state_line` (added to its detail, where it names anything)."""
    for r in sorted(results):
        first = next((f for f in failures if f.rank == r and f.oracle in (Oracle.REFERENCE, Oracle.ISOLATION)), None)
        if first is None:
            continue
        line = hidden_state_line(results[r], (isolated or {}).get(r), first.model)
        if line and line not in first.detail:
            first.detail = f"{first.detail}\n  {line}"
