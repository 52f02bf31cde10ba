"""The hazards of part D of the eleventh blind census (docs/log/2026-12-07-scan-blind-census-11-d.md), reproduced.

Each test works as those of ``test_blind_census_10_a.py`` do: the released code, with the dead
object's address given back by force, answers for the dead object, and answers right when the
first object is kept alive (the control).

Each package is pinned to the release the census read; a test is skipped, naming the package
and the version, when that release is not installed:

    pip install --target DIR --no-deps meeseeks-singleton==0.4.4 ai-parrot==1.2.4 python-optimizer==1.1.0
    pip install --target DIR rustworkx networkx pydantic pandas scipy numba toml tqdm psutil
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_11_d.py -q

(ai-parrot and python-optimizer are installed without their dependencies: parrot's signals module
needs only rustworkx, networkx, numpy and pydantic, and python-optimizer's package imports pandas,
scipy, numba, toml, tqdm and psutil.) Every scenario gives the stores that outlive it a key of its own
(a class of its own, a graph of its own shape), so that the control cannot hit an entry of the
forced run.
"""

from __future__ import annotations

from cases.blind.pinned import Pins
from cases.blind.test_blind_census_6_a import _answers
from harness.idreuse.landing import born_on_death_of, seed_pools
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("meeseeks-singleton==0.4.4", "ai-parrot==1.2.4", "python-optimizer==1.1.0")


class _Connection:
    """An argument of the plain kind: no __eq__ or __hash__ of its own, so hash() is identity."""

    def __init__(self, name: str):
        self.name = name


def test_meeseeks_only_one_by_args_gives_a_new_argument_a_dead_ones_instance():
    """meeseeks/iam.py:60-125 keeps one instance per hash_generator(*args, **kwargs)
    (src/hash/args_and_kwargs_hash.py:7-15: hash() of a tuple of the arguments, a plain object by
    its identity hash) and holds nothing of the arguments: a connection born on a dead
    connection's address gets the instance built for the dead one."""
    meeseeks = PINS.need("meeseeks-singleton", "meeseeks")

    def label(reuse: bool) -> str:
        @meeseeks.OnlyOne(by_args_hash=True)
        class Service:                      # a class (and so a registry) of each scenario's own
            def __init__(self, connection):
                self.label = connection.name    # reads its argument, keeps none of it

        first, result = _answers(lambda connection: Service(connection).label,
                                 lambda: _Connection("first"), lambda: _Connection("second"),
                                 lambda: object.__new__(_Connection), reuse)
        assert first == "first"
        return result

    assert label(reuse=True) == "first"     # released: the dead connection's instance
    assert label(reuse=False) == "second"   # control


def test_parrot_signals_give_a_new_graph_a_dead_graphs_neighbours():
    """parrot/knowledge/graphindex/signals.py:157-198 keeps an undirected networkx view of each
    rustworkx graph in the module-level _NX_CACHE under id(graph), holding nothing of the graph and
    never pruned (_invalidate_nx_cache has no caller): a graph born on a dead graph's address gets
    the dead graph's view, and its Adamic-Adar signal counts neighbours it does not have."""
    signals = PINS.need("ai-parrot", "parrot.knowledge.graphindex.signals")
    import rustworkx

    def shaped(graph, shared: bool, extra: int):
        a = graph.add_node({"node_id": "a"})
        b = graph.add_node({"node_id": "b"})
        c = graph.add_node({"node_id": "c"})
        for index in range(extra):               # a shape of each scenario's own
            graph.add_node({"node_id": f"x{index}"})
        if shared:
            graph.add_edge(a, c, {})    # a -> c <- b: c is a shared neighbour
            graph.add_edge(b, c, {})
        else:
            graph.add_edge(a, b, {})    # no shared neighbour: Adamic-Adar is 0
        return graph

    def adamic_adar(graph) -> float:
        return signals.compute_pairwise_signals(graph, [], "a", "b")["adamic_adar"]

    # The next graph is placed first, then given its own nodes: no shared neighbour of a and b.
    def run(reuse: bool, extra: int) -> float:
        holder = {}

        def call(graph) -> float:
            if "first" in holder:
                shaped(graph, False, extra)
            holder["first"] = True
            return adamic_adar(graph)

        first, result = _answers(call, lambda: shaped(rustworkx.PyDiGraph(), True, extra),
                                 rustworkx.PyDiGraph, rustworkx.PyDiGraph, reuse)
        assert first > 0.0
        return result

    assert run(reuse=True, extra=1) > 0.0      # released: the dead graph's shared neighbour
    assert run(reuse=False, extra=2) == 0.0    # control


def _prices(seed: int):
    """A DataFrame of 300 closing prices, a random walk of its own seed."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    return pd.DataFrame({"close": 100 + np.cumsum(rng.normal(0, 1, 300))})


def test_python_optimizer_evaluates_a_new_frame_on_a_dead_frames_prices():
    """python_optimizer/jit/jit_fitness_evaluator.py:278-316 caches the arrays prepared from a
    DataFrame in the evaluator's _data_cache under id(data), float64 copies that hold nothing of the
    frame, and evaluate (:318-330) backtests on them: a frame born on a dead frame's address is
    evaluated on the dead frame's prices."""
    jit = PINS.need("python-optimizer", "python_optimizer.jit.jit_fitness_evaluator")
    genetic = PINS.need("python-optimizer", "python_optimizer.genetic.genetic_optimizer")
    import pandas as pd

    genes = {"strategy_type": "ma_crossover", "short_ma": 5, "long_ma": 20}

    def total_return(evaluator, frame) -> float:
        return evaluator.evaluate(genetic.Individual(genes=dict(genes)), frame)["total_return"]

    def fresh(seed: int) -> float:
        return total_return(jit.JITBacktestFitnessEvaluator(), _prices(seed))

    assert fresh(1) != fresh(2)

    def second(reuse: bool) -> float:
        evaluator = jit.JITBacktestFitnessEvaluator()    # a cache of each scenario's own
        kept = seed_pools(lambda: object.__new__(pd.DataFrame))
        box = [_prices(1)]
        first = total_return(evaluator, box[0])
        assert first == fresh(1)
        alive = box[0] if not reuse else None
        # pandas allocates the frame's parts before the frame: the next DataFrame is placed as
        # it is allocated, on the dead frame's address (when reuse).
        with quiet_allocator(), born_on_death_of(pd.DataFrame, box):
            later = _prices(2)
        result = total_return(evaluator, later)
        del alive, kept
        return result

    assert second(reuse=True) == fresh(1)     # released: the dead frame's prices
    assert second(reuse=False) == fresh(2)    # control
