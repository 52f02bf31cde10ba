"""What an entry's id was the id of, when the entry is older than the model whose dead object
now has its int as id.

Known bad: a table keyed by the ids of activations the harness never sees (a later layer's
input) keeps model 0's entries; model 1's weight is born at one of those addresses and dies
with its model. The entry was never that weight's id: naming it "the id of a weight" blames the
wrong object (it is what reuse does to the table, not what the table stored).
"""

from __future__ import annotations

from harness.oracles.hygiene import EntryOrigins, scan_registries

OLD, SEEN = 0x7F0000001000, 0x7F0000002000


def scans(table: dict) -> list[str]:
    origins = EntryOrigins()
    # model 0 dies: OLD is no dead object's id (an activation the harness never saw); SEEN was
    # the input the harness handed in, an activation it logged
    scan_registries(object(), {"cache.ROWS": table}, {SEEN: "input of step 0"}, origins, "c", 0,
                    {SEEN: "the id of an activation"})
    # model 1 dies: its weights had both addresses, long after the entries were stored
    dead = {OLD: "model.layers[0].weight (Tensor float32[4, 4])", SEEN: "model.layers[1].weight (Tensor float32[4, 4])"}
    ids_of = {OLD: "the id of a weight", SEEN: "the id of a weight"}
    return [f.line for f in scan_registries(object(), {"cache.ROWS": table}, dead, origins, "c", 1, ids_of).failures]


def test_an_entry_older_than_the_model_is_never_named_as_the_id_of_its_object():
    lines = scans({OLD: 8, SEEN: 8})
    assert len(lines) == 2 and not any("the id of a weight" in line for line in lines), lines
    old = next(line for line in lines if f"{OLD:#x}" in line)
    assert "what it was the id of is not known: the entry is older than model 1" in old, old
    assert "stored for an object in case c, model 0" in old, old


def test_an_older_entry_whose_first_scan_knew_its_object_keeps_that_name():
    seen = next(line for line in scans({SEEN: 8}) if f"{SEEN:#x}" in line)
    assert "the id of an activation, stored for input of step 0 in case c, model 0" in seen, seen


def test_an_entry_of_the_model_itself_is_named_as_its_object():
    origins = EntryOrigins()
    scan = scan_registries(object(), {"cache.ROWS": {OLD: 8}}, {OLD: "model.layers[0].weight"}, origins, "c", 0,
                           {OLD: "the id of a weight"})
    assert [f.line for f in scan.failures] == [
        f"cache.ROWS key holds id {OLD:#x} of dead model.layers[0].weight, the id of a weight, stored in case c, model 0"]
