"""The hazards of the fifth blind census (docs/log/2026-12-07-scan-blind-census-5.md), reproduced.

Each test works as those of ``test_blind_census_4.py`` do: the released code, with the dead
object's address given back by force, answers for the dead object, and answers right when the
first object is kept alive (the control). The census found five true hazards; each has its
test here.

Each package is pinned to the release the census read; a test is skipped, naming the package
and the version, when that release is not installed:

    pip install --target DIR iree-base-compiler==3.13.0 prefect==3.9.1 langgraph==1.2.24 \
        guardrails-ai==0.11.0
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_5.py -q

Where the dead object is made inside the released code (langgraph's failing node, a
guardrails ``Iteration``), the test holds it in a one-item list and makes the next one with
``reborn`` or ``born_on_death_of``; everything the library runs is released code, unchanged.
A ``GraphModule`` is made by a ``__new__`` of its own that builds a class per instance (which
takes the dead module's block first), so the iree test makes the next module with that class
and ``GraphModule.__init__``, as ``GraphModule(root, graph)`` does after its ``__new__``.
"""

from __future__ import annotations

import gc
import operator
import uuid
from typing import Annotated, TypedDict

from cases.blind.pinned import Pins, reborn
from harness.idreuse.landing import born_on_death_of, seed_pools
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("iree-base-compiler==3.13.0", "prefect==3.9.1", "langgraph==1.2.24",
            "guardrails-ai==0.11.0")


def test_iree_emits_a_dead_tensors_data_as_a_new_literal():
    """iree/compiler/extras/fx_importer.py:2749-2762 keeps RefTracker._refs[id(tensor)] with a
    weak reference it never checks (the finalizer that dropped entries is commented out), and
    _make_vtensor_literal_op (:2554-2624) reuses the attribute made for the first tensor: a
    literal tensor of a later import, born on a dead literal's address, is emitted with the
    dead tensor's data."""
    fx_importer = PINS.need("iree-base-compiler", "iree.compiler.extras.fx_importer")
    from iree.compiler import ir
    import torch

    def literal(reuse: bool) -> str:
        importer = fx_importer.FxImporter()
        tracker = importer._py_attr_tracker          # one per importer, as the importer makes it
        with importer._c, ir.Location.unknown(), ir.InsertionPoint(importer._m.body):
            first, second = torch.tensor([1.5]), torch.tensor([7.25])
            kept = seed_pools(first.clone)                # the victim's pool must outlive it
            box = [first.clone()]
            fx_importer._make_vtensor_literal_op(
                box[0], importer._cc.tensor_to_vtensor_type(box[0]), tracker)
            alive = box[0] if not reuse else None
            # clone() makes the tensor and nothing else of its size class on the way
            later = reborn(box, second.clone) if reuse else second.clone()
            op = fx_importer._make_vtensor_literal_op(
                later, importer._cc.tensor_to_vtensor_type(later), tracker)
            del alive, kept
            return str(op.attributes["value"])

    assert literal(reuse=True) == "dense<1.500000e+00> : tensor<1xf32>"    # released: dead data
    assert literal(reuse=False) == "dense<7.250000e+00> : tensor<1xf32>"   # control


def test_iree_imports_a_new_graph_module_under_a_dead_ones_name():
    """fx_importer.py:1037-1047 keeps FxImporter._graph_module_to_func_name[id(gm)] for every
    module imported, never pruned, and answers "already imported" with the recorded name (read
    again for higher-order ops' bodies at :1782-1783, :1988-2008): a GraphModule born on a dead
    imported module's address is imported under the dead module's function name."""
    fx_importer = PINS.need("iree-base-compiler", "iree.compiler.extras.fx_importer")
    import torch

    class Twice(torch.nn.Module):
        def forward(self, x):
            return x * 2

    class Thrice(torch.nn.Module):
        def forward(self, x):
            return x * 3

    def names(reuse: bool) -> list:
        importer = fx_importer.FxImporter()
        args = (torch.ones(2),)
        first = torch.export.export(Twice(), args).graph_module
        later = torch.export.export(Thrice(), args).graph_module
        impl = type(first)                          # the class GraphModule.__new__ made for it
        kept = seed_pools(lambda: object.__new__(impl))
        box = [first]
        del first
        importer.import_graph_module(box[0], func_name="first")
        box[0]._graph._owning_module = None         # the graph points back at its module:
        alive = box[0] if not reuse else None       # let the module go with box
        gc.collect()
        second = reborn(box, lambda: object.__new__(impl)) if reuse else object.__new__(impl)
        torch.fx.GraphModule.__init__(second, later, later.graph)
        importer.import_graph_module(second, func_name="second")
        del alive, kept
        return sorted(str(op.attributes["sym_name"]) for op in importer.module.body.operations)

    assert names(reuse=True) == ['"first"', '"first_0"']    # released: the dead module's name
    assert names(reuse=False) == ['"first"', '"second"']    # control


def test_prefect_links_a_new_result_to_a_dead_results_task():
    """utilities/engine/__init__.py:705-850 links each task result to its task's state in
    FlowRunContext.run_results[id(result)]; a list cannot be weakly referenced, so its entry has
    no reference to check: a list born on a dead result's address is recorded as that task's
    output when it is passed to a later task (collect_task_run_inputs_sync, :219-267)."""
    PINS.need("prefect", "prefect")
    from prefect.context import FlowRunContext
    from prefect.states import Completed
    from prefect.utilities.engine import collect_task_run_inputs_sync, link_state_to_task_run_result

    def upstream(reuse: bool) -> list:
        context = FlowRunContext.model_construct(run_results={})   # the map one flow run keeps
        token = FlowRunContext.__var__.set(context)
        try:
            state = Completed()
            state.state_details.task_run_id = uuid.uuid4()
            kept = seed_pools(lambda: ["x", "y"])
            box = [["alpha", "beta"]]                  # a task's result, dropped by the flow
            link_state_to_task_run_result(state, box[0])
            alive = box[0] if not reuse else None
            later = reborn(box, lambda: ["gamma", "delta"]) if reuse else ["gamma", "delta"]
            found = collect_task_run_inputs_sync(later)
            del alive, kept
            return [run.id == state.state_details.task_run_id for run in found]
        finally:
            FlowRunContext.__var__.reset(token)

    assert upstream(reuse=True) == [True]    # released: the dead result's task as an input
    assert upstream(reuse=False) == []       # control: no upstream task


class _State(TypedDict):
    log: Annotated[list, operator.add]


def test_langgraph_swallows_a_failure_born_on_a_handled_ones_address():
    """pregel/_runner.py:172, :232-245, :611, :636-692 keeps id() of every task exception routed
    to an error handler for the whole run, and skips any failed task whose exception id is in
    it: node b's unhandled exception, born on node a's handled (and dead) exception's address,
    is neither raised nor stops the run."""
    PINS.need("langgraph", "langgraph")
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command

    def run(reuse: bool) -> str:
        handled: list = []
        kept: list = []

        def a(state):
            kept.append(seed_pools(lambda: ValueError()))
            failure = ValueError("a failed")
            handled.append(failure)
            raise failure

        def handler(state):
            return Command(update={"log": ["handled a"]}, goto="b")

        def b(state):
            first = handled[0]
            first.__traceback__ = None          # its traceback holds a's frame, which holds it
            if not reuse:
                kept.append(first)
            del first
            gc.collect()
            if reuse:
                raise reborn(handled, lambda: RuntimeError("b failed"))
            raise RuntimeError("b failed")

        graph = (StateGraph(_State)
                 .add_node("a", a, error_handler=handler)
                 .add_node("b", b)
                 .add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
                 .compile())
        try:
            graph.invoke({"log": []})
        except RuntimeError as error:
            return f"raised {error}"
        return "returned"

    assert run(reuse=True) == "returned"           # released: b's failure swallowed
    assert run(reuse=False) == "raised b failed"   # control


def test_guardrails_shows_a_dead_iterations_logs():
    """logger.py:11-40 keeps every log record under scope str(id(iteration)) in a process-wide
    handler (run/runner.py:231 sets the scope), never pruned; Iteration.logs
    (classes/history/iteration.py:58-63) reads that scope: an iteration born on a dead one's
    address (a guard keeps ten calls) shows the dead iteration's log records."""
    PINS.need("guardrails-ai", "guardrails")
    from guardrails.classes.history.iteration import Iteration
    from guardrails.logger import logger, set_scope

    def logs(reuse: bool) -> list:
        kept = seed_pools(lambda: object.__new__(Iteration))
        box = [Iteration(call_id="first-call", index=0)]
        set_scope(str(id(box[0])))                  # what Runner.step does for each iteration
        logger.warning("a record of the first iteration")
        set_scope()
        alive = box[0] if not reuse else None
        with quiet_allocator(), born_on_death_of(Iteration, box):
            second = Iteration(call_id="second-call", index=0)
        del alive, kept
        return list(second.logs)

    assert logs(reuse=True) == ["a record of the first iteration"]   # released
    assert logs(reuse=False) == []                                    # control
