"""The hazards of part B of the seventh blind census (docs/log/2026-12-07-scan-blind-census-7-b.md), reproduced.

Five true hazards, one test each: forced onto the dead object's address, the released code
answers for the dead object; with the first object kept alive (the control) it answers right.
A test runs only against the release the census read and is skipped, naming it, otherwise:

    pip install --target DIR pyannotate==1.2.0           # one directory per release, so the
    pip install --target DIR scoop==0.7.2.0              # census ran them (scoop brings pyzmq
    pip install --target DIR aiomonitor==0.7.1           # and greenlet, aiomonitor aiohttp,
    pip install --target DIR ppft==1.7.8                 # janus and its console stack)
    pip install --target DIR upsonic==0.77.3
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_7_b.py -q

The new object is made by the reproducer in every test (a code object, a function, a task, a
tool), so each test holds the first one in a one-item list and makes the next with ``land``
(through ``_next``, which makes it anywhere for the control). SCOOP runs only under its own
launcher, so its test starts ``python -m scoop`` on a script and reads what the script prints;
the launcher ends the broker and workers it started. ppft's server starts its local worker
processes and the test destroys the server. Everything the library runs is released code,
unchanged.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import textwrap
import types


from cases.blind.pinned import Pins, require
from cases.blind.pinned import next_object as _next
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("pyannotate==1.2.0", "scoop==0.7.2.0", "aiomonitor==0.7.1", "ppft==1.7.8", "upsonic==0.77.3")

# Two function bodies of one bytecode length, so their code objects share a size class.
_HELPER = "def helper(x):\n    return x + 1\n"
_USER = "def user_fn(x):\n    return x * 2\n"


def test_pyannotate_never_samples_a_function_born_on_a_dead_code_objects_address(tmp_path):
    """pyannotate_runtime/collect_types.py:736-738 keeps ``sampling_counters`` keyed by
    ``id(code)`` for the whole collection, without the code objects; ``_trace_dispatch`` stores
    None ("no longer interested", :904-905) for every code object outside the top directory
    and returns at once for a None entry (:836-839). Code made at run time outside the top
    directory dies with its None entry; a user function whose code object is born on that
    address is never sampled and gets no signature."""
    collect_types = PINS.need("pyannotate", "pyannotate_runtime.collect_types")
    elsewhere = os.path.join(str(tmp_path), "elsewhere", "generated.py")
    mine = os.path.join(collect_types.TOP_DIR, "user_module.py")

    def user_code():
        return compile(_USER, mine, "exec").co_consts[0]

    def collected(reuse: bool) -> list:
        for table in (collect_types.collected_args, collect_types.collected_signatures,
                      collect_types.num_samples):
            table.clear()
        collect_types.init_types_collection()
        try:
            with collect_types.collect():
                helper = types.FunctionType(compile(_HELPER, elsewhere, "exec").co_consts[0], {})
                helper(1)                                   # sampled out: a None entry
                box = [helper.__code__]
                del helper
                alive = box[0] if not reuse else None
                with quiet_allocator():
                    code, held = _next(box, user_code, reuse)
                    types.FunctionType(code, {})(3)         # the user's function, called once
                    del held, alive
        finally:
            collect_types.stop_types_collection()
        return [entry["func_name"] for entry in json.loads(collect_types.dumps_stats())]

    assert "user_fn" not in collected(reuse=True)   # released: never sampled
    assert "user_fn" in collected(reuse=False)      # control


_SCOOP_SCRIPT = """
import json, sys
from scoop import futures
from cases.blind.test_blind_census_7_b import _next
from harness.idreuse.morgue import quiet_allocator


def times_ten():
    return lambda x: x * 10


def main():
    reuse = sys.argv[1] == "reuse"
    box = [lambda x: x + 1]
    first = list(futures.map(box[0], [1, 2]))       # shared under an id-based name
    alive = box[0] if not reuse else None
    with quiet_allocator():
        later, held = _next(box, times_ten, reuse)
        second = list(futures.map(later, [1, 2]))
        del held, alive
    print("RESULT " + json.dumps([first, second]))


if __name__ == "__main__":
    main()
"""


def test_scoop_runs_a_dead_lambdas_code_for_a_new_lambda(tmp_path):
    """scoop/shared.py:140-166: every lambda given to ``futures.map``/``submit`` (futures.py:274-283)
    is shared under ``str(worker) + str(id(f)) + str(hash(f))``; the shared constant holds the
    marshalled code, not the function, and is never removed, and an existing name is not shared
    again: a lambda born on a dead lambda's address runs the dead lambda's code."""
    require("scoop", PINS.versions["scoop"])
    script = tmp_path / "maps.py"
    script.write_text(textwrap.dedent(_SCOOP_SCRIPT))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))

    def results(mode: str) -> list:
        done = subprocess.run([sys.executable, "-m", "scoop", "-n", "1", str(script), mode],
                              cwd=str(tmp_path), env=env, capture_output=True, text=True,
                              timeout=240, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        assert lines, f"the SCOOP run printed no result (rc {done.returncode}): {done.stderr[-2000:]}"
        return json.loads(lines[-1][len("RESULT "):])

    assert results("reuse") == [[2, 3], [2, 3]]     # released: the dead lambda's code ran
    assert results("keep") == [[2, 3], [10, 20]]    # control


_TRIES = 2000


async def _worker() -> int:
    await asyncio.sleep(0)
    return 1


def test_aiomonitor_files_two_terminated_tasks_as_one():
    """aiomonitor/task.py:52-57 names a traced task's record ``hash((id(self), name))``;
    monitor.py:596-614 files terminated tasks in ``_terminated_tasks`` under that id: a task of
    the same name born on a finished task's address overwrites the finished task's record."""
    aiomonitor = PINS.need("aiomonitor", "aiomonitor")

    async def records(reuse: bool) -> int:
        loop = asyncio.get_running_loop()
        with aiomonitor.start_monitor(loop, hook_task_factory=True, console_enabled=False,
                                      port=0, console_port=0, webui_port=0) as monitor:
            box = [loop.create_task(_worker(), name="worker")]
            await box[0]
            await asyncio.sleep(0.05)                        # its done callbacks have run
            alive = box[0] if not reuse else None
            # A coroutine is of a task's size class: made first, the next coroutine would take
            # the dead task's block, so the tries wrap coroutines made before the task dies.
            coroutines = [_worker() for _ in range(_TRIES)]

            def another():
                return loop.create_task(coroutines.pop(), name="worker")

            with quiet_allocator():
                later, held = _next(box, another, reuse, limit=_TRIES)
            await asyncio.gather(later, *[task for task in held if task is not None])
            for _ in range(50):                              # the monitor's thread files them
                await asyncio.sleep(0.02)
                if len(monitor._terminated_history) >= 2 + sum(task is not None for task in held):
                    break
            for unused in coroutines:
                unused.close()
            ours = {later.get_trace_id()} | ({alive.get_trace_id()} if alive is not None else set())
            filed = sum(1 for trace_id in monitor._terminated_tasks if trace_id in ours)
            del held, alive, later
            gc.collect()
            return filed

    assert asyncio.run(records(reuse=True)) == 1    # released: two tasks, one record
    assert asyncio.run(records(reuse=False)) == 2   # control


def _plus_one():
    def plus_one(x):
        return x + 1
    return plus_one


def _times_ten():
    def times_ten(x):
        return x * 10
    return times_ten


def test_ppft_ships_a_dead_functions_source_for_a_new_function():
    """ppft/_pp.py:653-661 and :720-725 keep the pickled source of each submitted function in
    ``__sfuncHM[hash(funcs + modules)]`` and ``__sourcesHM[hash(func)]`` on the server, never
    pruned and without the functions: a function born on a dead submitted function's address is
    shipped as the dead function's source and name, and the worker runs the dead function."""
    pp = PINS.need("ppft", "ppft")
    server = pp.Server(ncpus=1)
    try:
        def second_result(reuse: bool) -> int:
            box = [_plus_one()]
            assert server.submit(box[0], (1,))() == 2
            alive = box[0] if not reuse else None
            with quiet_allocator():
                later, held = _next(box, _times_ten, reuse)
                result = server.submit(later, (1,))()
                del held, alive
            return result

        assert second_result(reuse=True) == 2     # released: the dead function ran
        assert second_result(reuse=False) == 10   # control
    finally:
        server.destroy()


def _tool(k: int):
    def tool(x: int) -> int:
        """A tool."""
        return x + k
    tool.__name__ = f"tool_{k}"
    return tool


def test_upsonic_silently_skips_a_tool_born_on_a_removed_tools_address():
    """upsonic/tools/normalizer.py:77-86 skips any tool whose ``id()`` is in the registry's
    ``raw_object_ids`` (registry.py:32, :99); removing a function tool (registry.py:298-345,
    ``Agent.remove_tools``) deletes its registration but leaves its id in that set (only MCP
    handlers and class instances are discarded): a function born on a removed tool's address is
    taken as already registered, and ``register_tools`` adds nothing."""
    tools = PINS.need("upsonic", "upsonic.tools")

    def registered(reuse: bool) -> list:
        manager = tools.ToolManager()
        box = [_tool(1)]
        assert list(manager.register_tools([box[0]])) == ["tool_1"]
        manager.remove_tools([box[0]])                  # the agent no longer offers it
        alive = box[0] if not reuse else None
        with quiet_allocator():
            later, held = _next(box, lambda: _tool(2), reuse)
            names = list(manager.register_tools([later]))
            del held, alive
        return names

    assert registered(reuse=True) == []             # released: silently not registered
    assert registered(reuse=False) == ["tool_2"]    # control
