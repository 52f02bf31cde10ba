"""The hazards of part B of the sixth blind census (docs/log/2026-12-07-scan-blind-census-6-b.md), reproduced.

Part B of the census found seven true hazards, one test each, in the form of
``test_blind_census_5.py`` (forced reuse answers for the dead object; the control, with the
first object kept alive, answers right). A test is skipped, naming the package and the version,
unless the release the census read is the one installed:

    pip install --target DIR 'praisonaiagents[llm]==1.7.17'    # one directory per release:
    pip install --target DIR langroid==0.69.16                   # so the census ran them
    pip install --target DIR traitsui==8.0.0 pyface==8.0.0 PySide6-Essentials
    pip install --target DIR fugue==0.9.7 pyspark
    pip install --target DIR cognee==1.6.5
    pip install --target DIR sqlmesh==0.236.4
    uv pip install --target DIR langflow-base==1.13.0           # pip's resolver does not finish
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_6_b.py -q

The fugue test starts a local Spark session and needs a Java runtime (it is skipped without
one); the traitsui test draws on Qt's offscreen platform. langroid builds a tiktoken encoding
when it is imported, which tiktoken would download: the test gives tiktoken an offline stand-in
first (langroid's own code runs unchanged). Where the library makes the new object itself
(traitsui's choice adapters, made by ``HasTraits``' own ``__new__``), the test calls the
released code until the object lands, with ``land``; where it is made by ``object.__new__``,
with ``born_on_death_of``.
"""

from __future__ import annotations

import gc
import os
import shutil
import uuid
from types import SimpleNamespace

import pytest

from cases.blind.pinned import Pins, require
from harness.idreuse.landing import born_on_death_of, land, seed_pools
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("praisonaiagents==1.7.17", "langroid==0.69.16", "traitsui==8.0.0", "fugue==0.9.7",
            "cognee==1.6.5", "sqlmesh==0.236.4", "langflow-base==1.13.0")


def test_praisonai_offers_a_dead_tools_schema():
    """llm/llm.py:3026-3056 keys LLM._formatted_tools_cache (:846, read :3078-3080, written
    :3165) by a string that names a callable tool without ``__name__`` (a BaseTool subclass
    instance) as ``other:{id(tool)}``; the cached schema does not hold the tool: a tool passed for
    one call and dropped, and another tool born on its address, is offered to the model with the
    dead tool's schema."""
    llm_module = PINS.need("praisonaiagents", "praisonaiagents.llm.llm")
    from praisonaiagents.tools.base import BaseTool

    class Weather(BaseTool):
        name = "get_weather"
        description = "The weather in a city"

        def run(self, city: str) -> str:
            return "sunny"

    class Stock(BaseTool):
        name = "get_stock_price"
        description = "The price of a ticker"

        def run(self, ticker: str) -> str:
            return "1.0"

    def offered(reuse: bool) -> list:
        llm = llm_module.LLM(model="openai/gpt-4o-mini", api_key="not-used")
        kept = seed_pools(lambda: object.__new__(Weather))
        box = [Weather()]                                   # a tool given for one call
        llm._format_tools_for_litellm([box[0]])
        alive = box[0] if not reuse else None
        with quiet_allocator(), born_on_death_of(Stock, box):
            later = Stock()
        names = [tool["function"]["name"] for tool in llm._format_tools_for_litellm([later])]
        del alive, kept
        return names

    assert offered(reuse=True) == ["get_weather"]        # released: the dead tool's schema
    assert offered(reuse=False) == ["get_stock_price"]   # control


class _OfflineEncoding:
    """Stands in for the tiktoken encoding langroid builds at import (tiktoken would fetch it)."""

    name = "offline"

    def encode(self, text, **kwargs):
        return list(text.encode())

    def decode(self, tokens, **kwargs):
        return bytes(tokens).decode(errors="ignore")


def test_langroid_writes_a_tasks_log_through_a_dead_tasks_logger(monkeypatch, tmp_path):
    """agent/task.py:693-718 names each task's TSV logger ``tsv_logger.{name}.{id(task)}`` and
    adds a FileHandler to it (utils/logging.py:75-96); nothing removes the logger or its handler
    (close_loggers, :2514, leaves it): a task of the same name born on a dead task's address gets
    the dead task's logger, and every record it logs is written by both handlers."""
    require("langroid", PINS.versions["langroid"])
    import tiktoken
    monkeypatch.setattr(tiktoken, "get_encoding", lambda *a, **k: _OfflineEncoding())
    monkeypatch.setattr(tiktoken, "encoding_for_model", lambda *a, **k: _OfflineEncoding())
    import langroid as lr
    from langroid.agent.task import Task
    from langroid.language_models.mock_lm import MockLMConfig

    def task() -> Task:
        agent = lr.ChatAgent(lr.ChatAgentConfig(llm=MockLMConfig(default_response="ok"), name="Bot"))
        return Task(agent, name="Bot", interactive=False, config=lr.TaskConfig(logs_dir=str(tmp_path)))

    loggers = []

    def handlers(reuse: bool) -> int:
        kept = seed_pools(lambda: object.__new__(Task))
        box = [task()]
        box[0].init()                                        # opens logs/Bot.tsv through its logger
        loggers.append(box[0].tsv_logger)
        alive = box[0] if not reuse else None
        with quiet_allocator(), born_on_death_of(Task, box):
            later = task()
        later.init()
        loggers.append(later.tsv_logger)
        del alive, kept
        return len(later.tsv_logger.handlers)

    try:
        assert handlers(reuse=True) == 2    # released: the dead task's handler writes too
        assert handlers(reuse=False) == 1   # control
    finally:
        for logger in loggers:
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
                handler.close()


def test_traitsui_selects_a_dead_choices_object():
    """qt/instance_editor.py:99-102, :246-258 caches each chosen object in
    ``_object_cache[id(item)]``, never cleared until dispose (:348); the items are adapters that
    ``_get_items`` (:167-195) makes anew whenever the choice list changes (``rebuild_items``,
    :197): picking a choice whose new adapter was born on a dead adapter's address sets the
    trait to the object cached for the dead one."""
    PINS.need("traitsui", "traitsui")
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("ETS_TOOLKIT", "qt")
    from pyface.qt import QtGui
    from traits.api import HasTraits, Instance, List, Str
    from traitsui.api import InstanceEditor, Item, View

    QtGui.QApplication.instance() or QtGui.QApplication([])

    class Thing(HasTraits):
        name = Str()

    class Holder(HasTraits):
        choices = List(Instance(Thing))
        value = Instance(Thing)
        traits_view = View(Item("value", editor=InstanceEditor(name="choices", selectable=True,
                                                               editable=False)))

    def picked(reuse: bool) -> str:
        holder = Holder(choices=[Thing(name="first"), Thing(name="second")])
        ui = holder.edit_traits(kind="live")
        try:
            editor = ui.get_editors("value")[0]
            editor.update_object(0)                       # "first", cached under its adapter
            box = [editor.items[0]]
            holder.choices.insert(0, Thing(name="new"))   # rebuild_items drops the old adapters
            alive = box[0] if not reuse else None

            def rebuilt():                                # what rebuild_items does first
                editor._items = None
                return editor.items[0]

            with quiet_allocator():
                if reuse:
                    landing, held = land(box, rebuilt)
                    landing.require()
                else:
                    held = [rebuilt()]
                editor.update_object(0)                   # the user picks "new"
                del held, alive
            return holder.value.name
        finally:
            ui.dispose()

    assert picked(reuse=True) == "first"   # released: the dead adapter's object
    assert picked(reuse=False) == "new"    # control


def test_fugue_returns_a_dead_frames_broadcast():
    """fugue_spark/execution_engine.py:365-366 keeps broadcast results in a triad RunOnce keyed by
    ``id(args[0])``, for the engine's life, without the argument; broadcast (:478-481) passes
    ``self._to_spark_df(df)``, a SparkDataFrame made for the call and dropped after it: a later
    frame's wrapper born on that address gets the first frame's broadcast."""
    engine_module = PINS.need("fugue", "fugue_spark.execution_engine")
    if shutil.which("java") is None:
        pytest.skip("fugue's Spark engine needs a Java runtime")
    from fugue import ArrayDataFrame
    from fugue_spark import SparkDataFrame
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .getOrCreate())

    def second(reuse: bool) -> list:
        engine = engine_module.SparkExecutionEngine(spark)
        kept = seed_pools(lambda: object.__new__(SparkDataFrame))
        box = [engine._to_spark_df(ArrayDataFrame([[1]], "a:int"))]   # what broadcast() makes
        engine._broadcast_func(box[0])                                 # and hands to the cache
        alive = box[0] if not reuse else None
        later = ArrayDataFrame([[2]], "a:int")
        with quiet_allocator(), born_on_death_of(SparkDataFrame, box):
            result = engine.broadcast(later)
        del alive, kept
        return result.as_array()

    try:
        assert second(reuse=True) == [[1]]    # released: the first frame's broadcast
        assert second(reuse=False) == [[2]]   # control
    finally:
        spark.stop()


def test_cognee_leaves_a_datapoint_born_on_a_stamped_ones_address_unstamped():
    """modules/pipelines/operations/run_tasks_base.py:33-110, :205-224 stamp provenance on every
    DataPoint a task yields, skipping ids in ``ctx._provenance_visited``
    (models/PipelineContext.py:32), a set kept for the whole pipeline run without the DataPoints:
    a DataPoint of a later batch born on a stamped, dropped one's address is taken as stamped and
    keeps no provenance."""
    base = PINS.need("cognee", "cognee.modules.pipelines.operations.run_tasks_base")
    from cognee.infrastructure.engine import DataPoint
    from cognee.modules.pipelines.models.PipelineContext import PipelineContext

    class Chunk(DataPoint):
        text: str = ""

    def source_task(reuse: bool):
        context = PipelineContext(pipeline_name="cognify")
        kept = seed_pools(lambda: object.__new__(Chunk))
        box = [Chunk(text="a chunk of the first batch")]
        base._stamp_provenance(box[0], "cognify", "extract_chunks",
                               visited=context._provenance_visited, task_index=1)
        alive = box[0] if not reuse else None
        with quiet_allocator(), born_on_death_of(Chunk, box):
            later = Chunk(text="a chunk of the second batch")
        base._stamp_provenance(later, "cognify", "extract_chunks",
                               visited=context._provenance_visited, task_index=1)
        del alive, kept
        return later.source_task

    assert source_task(reuse=True) is None              # released: left unstamped
    assert source_task(reuse=False) == "extract_chunks"  # control


def test_sqlmesh_answers_column_lineage_from_a_dead_models_query():
    """core/lineage.py:19-61 keeps ``CACHE[model.name] = (id(model), query, scope)`` and reuses
    the query when ``id(model)`` matches, without the model: a model of the same name born on a
    dead model's address (a context reload) gets lineage of the dead model's SQL."""
    lineage = PINS.need("sqlmesh", "sqlmesh.core.lineage")
    from sqlglot import parse
    from sqlmesh.core.model import load_sql_based_model
    from sqlmesh.core.model.definition import SqlModel

    def model(sql: str):
        return load_sql_based_model(parse(f"MODEL (name db.m, kind FULL); {sql}", read="duckdb"))

    def source(reuse: bool) -> str:
        lineage.CACHE.clear()
        kept = seed_pools(lambda: object.__new__(SqlModel))
        box = [model("SELECT a AS x FROM db.first_table")]
        lineage.lineage("x", box[0])
        vars(box[0])["_query_renderer"]._model = None   # the renderer points back at its model:
        gc.collect()                                     # let the model go with box
        alive = box[0] if not reuse else None
        with quiet_allocator(), born_on_death_of(SqlModel, box):
            later = model("SELECT b AS x FROM db.second_table")
        found = lineage.lineage("x", later).source.sql()
        del alive, kept
        return found

    assert "first_table" in source(reuse=True)    # released: the dead model's query
    assert "second_table" in source(reuse=False)  # control


def test_langflow_gives_a_new_mcp_connection_a_dead_ones_session_namespace():
    """api/v1/mcp_utils.py:71-82 (used at :417-420) names an anonymous public MCP caller's session
    namespace after ``id(mcp_session)`` when the SDK's session has no ``session_id`` (mcp 1.x has
    none); the namespace (api/utils/flow_utils.py:231-256) is what keeps one anonymous caller out
    of another's sessions: a later connection whose session is born on a closed one's address
    gets the same namespace, so the same session id reaches the closed connection's session."""
    mcp_utils = PINS.need("langflow-base", "langflow.api.v1.mcp_utils")
    from langflow.api.utils.flow_utils import scope_session_to_namespace
    from mcp.server.session import ServerSession

    project, flow = uuid.uuid4(), uuid.uuid4()

    def session() -> ServerSession:
        # the session's own constructor builds a cycle (it frees only at a collection): a bare
        # instance of the class stands in, which is all the namespace reads (its id)
        return ServerSession.__new__(ServerSession)

    def scoped(current) -> str:
        server = SimpleNamespace(request_context=SimpleNamespace(session=current))
        namespace = mcp_utils._public_mcp_session_namespace(server, project, flow)
        return scope_session_to_namespace("chat", namespace) or namespace

    def same_session(reuse: bool) -> bool:
        kept = seed_pools(lambda: object.__new__(ServerSession))
        box = [session()]                              # one client's connection
        first = scoped(box[0])
        alive = box[0] if not reuse else None
        with quiet_allocator(), born_on_death_of(ServerSession, box):
            later = session()                          # another client's, after the first closed
        second = scoped(later)
        del alive, kept
        return first == second

    assert same_session(reuse=True)          # released: the closed connection's session
    assert not same_session(reuse=False)     # control
