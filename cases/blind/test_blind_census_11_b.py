"""The hazards of part B of the eleventh blind census (docs/log/2026-12-07-scan-blind-census-11-b.md), reproduced.

One test per true hazard the census found: forced onto the dead object's address, the released
code answers for the dead object; with the first object kept alive (the control) it answers
right. A test runs only against the release the census read and is skipped, naming it, otherwise:

    pip install --target DIR aws-lambda-powertools==3.37.0 jsonpath-ng
    pip install --target DIR 'cartesia[websockets]==4.2.0'
    pip install --target DIR --no-deps django-task-ferry==0.1.1
    pip install --target DIR pot networkx scipy && pip install --target DIR --no-deps regfgw==0.1.0
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_11_b.py -q

Every object keyed by id here is one the test makes, or one the library makes by calling the
test's own hook, the first one born in pools seeded with ``seed_pools`` so that its death
cannot hand its pool back. Three tests place the next object with ``land`` (through
``next_object``), making the object alone so that nothing else of its size class is allocated
while it is placed: cartesia's handler is a bound method the test passes, regfgw's bulk graph
is a bare ``nx.Graph`` the test then initialises, and the powertools record copies are made by
``dataclasses.asdict`` through the test class's ``__deepcopy__``. task-ferry's child is made by
the library's ``create_child``, whose ``__init__`` allocates blocks of the child's size class,
so its test places it with ``born_on_death_of``. Everything the libraries run is released code, unchanged; regfgw's scoring module is loaded from the release's file, since the package's
``__init__`` imports pymatgen and ase, which scoring does not use.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json

import pytest

from cases.blind.pinned import Pins, only_holder
from cases.blind.pinned import next_object as _next
from harness.idreuse.landing import born_on_death_of, seed_pools
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("aws-lambda-powertools==3.37.0", "cartesia==4.2.0", "django-task-ferry==0.1.1", "regfgw==0.1.0")


class _Secret:
    """A plain object inside a dataclass record; ``dataclasses.asdict`` deep-copies it."""

    scenario: dict = {}

    def __init__(self, password: str):
        self.password = password
        self.user = "u"

    def __deepcopy__(self, memo):
        scenario = _Secret.scenario
        if not scenario["box"]:                   # the first record's copy: its only other holder is the box
            scenario["held"].append(seed_pools(lambda: object.__new__(_Secret)))
            new = object.__new__(_Secret)
            scenario["box"].append(new)
        elif scenario["reuse"]:                   # the next copy, born on the first copy's address
            only_holder(scenario["box"], "the first record's copy")
            with quiet_allocator():
                new, held = _next(scenario["box"], lambda: object.__new__(_Secret), True)
            scenario["held"].append(held)
        else:                                     # control: made anywhere, the first copy kept
            new = object.__new__(_Secret)
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new


def test_powertools_erase_leaves_a_record_unconverted_on_a_dead_copys_address():
    """aws_lambda_powertools/utilities/data_masking/base.py:32-74: ``prepare_data`` keeps the
    ids of every object it visits in a per-call ``_visited`` set, the temporaries it makes
    included (``dataclasses.asdict(x)``, its deep-copied members, ``model_dump()``); they die
    as soon as their record is converted, and a later record's temporary born on such an
    address is taken as visited and returned unconverted. ``DataMasking.erase`` (:186-230)
    then fails on the raw object it was handed."""
    PINS.need("aws-lambda-powertools", "aws_lambda_powertools")
    from aws_lambda_powertools.utilities.data_masking import DataMasking

    @dataclasses.dataclass
    class Record:
        name: str
        inner: _Secret

    def erase(reuse: bool):
        _Secret.scenario = {"box": [], "reuse": reuse, "held": []}
        data = {"records": [Record("first", _Secret("s1")), Record("second", _Secret("s2"))]}
        try:
            return DataMasking().erase(data, fields=["records[*].inner.password"])
        finally:
            _Secret.scenario = {}

    with pytest.raises(TypeError, match="not JSON serializable"):    # released: record 2 left raw
        erase(reuse=True)
    masked = erase(reuse=False)                                       # control
    assert [r["inner"] for r in masked["records"]] == [{"password": "*****", "user": "u"}] * 2


def test_cartesia_treats_a_permanent_handler_on_a_removed_once_handlers_address_as_once():
    """cartesia/_event_handler.py:27-63: ``once()`` adds the handler's id to ``_once_ids``;
    ``off()`` (resources/stt/auto_finalize.py:873-876) removes the stored handler by equality
    but discards the id of the handler it is given, so for a bound method (a new object at
    each attribute access) the stored one dies and its id stays. A handler added with ``on()``
    born on its address is taken as once: called for the first event, then dropped."""
    PINS.need("cartesia", "cartesia")
    from websockets.exceptions import ConnectionClosedOK

    from cartesia.resources.stt.auto_finalize import AutoFinalizeResourceConnection

    class Socket:                  # the websocket: three turn updates, then a normal close
        def __init__(self):
            self.messages = [json.dumps({"type": "turn_update", "transcript": f"t{i}"}).encode() for i in range(3)]

        def recv(self, decode=False):
            if not self.messages:
                raise ConnectionClosedOK(None, None)
            return self.messages.pop(0)

        def close(self):
            pass

    class Listener:
        def __init__(self):
            self.calls = 0

        def handle(self, event):
            self.calls += 1

    kept = []

    def calls(reuse: bool) -> int:
        connection = AutoFinalizeResourceConnection(Socket())
        first, second = Listener(), Listener()
        shells = seed_pools(lambda: first.handle)
        box = [first.handle]
        connection.once("turn_update", box[0])
        connection.off("turn_update", first.handle)        # an equal bound method, not the stored one
        alive = box[0] if not reuse else None
        if reuse:
            only_holder(box, "the removed handler")
        with quiet_allocator():
            handler, held = _next(box, lambda: second.handle, reuse)
        del held, shells
        kept.extend([alive, handler])
        connection.on("turn_update", handler)
        connection.dispatch_events()
        return second.calls

    assert calls(reuse=True) == 1     # released: the permanent handler taken as once
    assert calls(reuse=False) == 3    # control


def _graph(nx, rng, nodes: int, scale: float):
    graph = nx.Graph()
    points = rng.random((nodes, 3)) * scale
    for i in range(nodes):
        graph.add_node(i, feature=rng.random(4) * scale)
    for i in range(nodes):
        for j in range(i + 1, nodes):
            graph.add_edge(i, j, distance=float(((points[i] - points[j]) ** 2).sum() ** 0.5))
    return graph


def _fill(graph, source):
    graph.add_nodes_from(source.nodes(data=True))
    graph.add_edges_from(source.edges(data=True))
    return graph


def test_regfgw_scores_a_bulk_graph_on_a_dead_ones_address_with_its_scales(monkeypatch):
    """regfgw/fgw_metric.py:192, :251-300: ``FGWScorer.norm_cache[id(g_bulk)]`` keeps the
    normalisation scales of the cost matrices (which depend on the interface graph too), never
    pruned, holding nothing of the graph; ``RegistryPriorBO`` drops its bulk graphs for each new
    interface (registry_bo.py:445, :464) while the CLI keeps one scorer (cli/coherent.py:201-240).
    A bulk graph born on a dead one's address is scored with the dead one's scales."""
    path = PINS.file("regfgw", "fgw_metric.py")
    for backend in ("PYTORCH", "JAX", "TENSORFLOW", "CUPY"):     # POT's numpy backend is all scoring uses
        monkeypatch.setenv(f"POT_BACKEND_DISABLE_{backend}", "1")
    import networkx as nx
    import numpy as np

    spec = importlib.util.spec_from_file_location("census11b_fgw_metric", path)
    fgw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fgw)
    params = fgw.FGWScoreParams(n_starts=1)
    kept = []

    def scores(reuse: bool):
        rng = np.random.default_rng(7)
        scorer = fgw.FGWScorer(fgw.FGWBuilder(), params)
        shells = seed_pools(lambda: object.__new__(nx.Graph))
        box = [_graph(nx, rng, 6, 1.0)]
        scorer.one_side_fgw(_graph(nx, rng, 5, 1.0), box[0])
        interface, bulk = _graph(nx, rng, 5, 40.0), _graph(nx, rng, 6, 40.0)
        alive = box[0] if not reuse else None
        with quiet_allocator():     # the graph object alone: nx.Graph's dispatching __new__ allocates first
            later, held = _next(box, lambda: object.__new__(nx.Graph), reuse)
        del held, shells
        later.__init__()
        kept.extend([alive, later])
        _fill(later, bulk)
        fresh = fgw.FGWScorer(fgw.FGWBuilder(), params).one_side_fgw(interface, bulk)
        return scorer.one_side_fgw(interface, later), fresh

    got, fresh = scores(reuse=True)
    assert abs(got - fresh) > 1e-6 * max(1.0, abs(fresh))     # released: the dead graph's scales
    got, fresh = scores(reuse=False)
    assert got == pytest.approx(fresh, rel=1e-9)              # control


def test_task_ferry_child_on_a_dead_childs_address_overwrites_its_progress():
    """task_ferry/progress.py:60-131: a parent keeps each child's contribution in
    ``_child_contribs[id(child)]``, never pruned and holding nothing of the child (the child
    holds its parent). A child made per stage or per item and born on a finished child's address
    overwrites that child's share instead of adding its own: the job's progress falls back."""
    progress = PINS.need("django-task-ferry", "task_ferry.progress")
    kept = []

    def percentage(reuse: bool) -> int:
        root = progress.Progress(total=100)
        shells = seed_pools(lambda: object.__new__(progress.Progress))
        box = [root.create_child(represents=50, total=1)]
        box[0].increment(state="first half")
        assert root.percentage == 50
        alive = box[0] if not reuse else None
        if reuse:
            only_holder(box, "the finished child")
            with quiet_allocator(), born_on_death_of(progress.Progress, box) as landing:
                child = root.create_child(represents=50, total=1)
            landing.require()
        else:
            child = root.create_child(represents=50, total=1)
        del shells
        kept.extend([alive, child])
        child.increment(state="second half")
        return root.percentage

    assert percentage(reuse=True) == 50      # released: the second child took the first one's share
    assert percentage(reuse=False) == 100    # control
