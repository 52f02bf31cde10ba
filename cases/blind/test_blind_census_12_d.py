"""The hazards of part D of the twelfth blind census (docs/log/2026-12-07-scan-blind-census-12-d.md), reproduced.

Each test works as those of ``test_blind_census_10_a.py`` do: the released code, with the dead
object's address given back by force, answers for the dead object, and answers right when the
first object is kept alive (the control).

Each package is pinned to the release the census read; a test is skipped, naming the package
and the version, when that release is not installed:

    pip install --target DIR --no-deps pyaria==0.2.0 mdb-singleton==0.1.1 lean-interact==0.11.6 \
        pynerva==0.0.8
    pip install --target DIR z3-solver motor pymongo python-dotenv pydantic filelock rich packaging \
        psutil requests tqdm gitpython six
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_12_d.py -q

(pyaria is installed without its dependencies: its symbolic-abstraction domains need only
z3-solver; the z3-solver 4.12.0 it names imports pkg_resources, which the project's environment
does not have, so a later z3-solver is installed. No Lean toolchain can be installed here, so
lean-interact's test plays the Lean REPL's part -- writing an environment to the pickle file it is
told to, and reading one back -- with a stub; everything else is the released code.) Every
scenario gives the stores that outlive it a key of its own where it can (a domain, a singleton
class, a cache of its own); pynerva's registry is keyed by the function's address alone, so its
scenarios name their constants for the scenario and each asks only for its own.
"""

from __future__ import annotations

import asyncio
import gc
import logging

from cases.blind.pinned import Pins
from cases.blind.test_blind_census_6_a import _answers
from harness.idreuse.landing import born_on_death_of, land, seed_pools
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("pyaria==0.2.0", "mdb-singleton==0.1.1", "lean-interact==0.11.6", "pynerva==0.0.8")


def test_pyaria_domain_abstracts_a_new_formula_as_a_dead_one():
    """aria/symabs/ai_symabs/domains/z3_variables/domain.py:64-95 keeps, per domain, a z3 solver
    with phi1 asserted under id(phi1) (iterative_solvers), holding nothing of the Python formula
    and never pruned; RSY (algorithms/rsy.py:10-30) asks model_and(phi, ...) for each formula it
    abstracts: a formula born on a dead formula's address is abstracted as the dead one."""
    PINS.need("pyaria", "aria")
    interval = PINS.need("pyaria", "aria.symabs.ai_symabs.domains.interval.domain")
    rsy = PINS.need("pyaria", "aria.symabs.ai_symabs.domains.algorithms.rsy")
    import z3

    def bounds(reuse: bool, width: int) -> tuple:
        domain = interval.IntervalDomain(["x"])     # iterative solvers of each scenario's own
        x = domain.z3_variable("x")
        low, high = x >= 10, x <= 10 + width      # the next formula's parts, made before it

        def abstracted(phi) -> tuple:
            found = rsy.RSY(domain, phi).interval_of("x")
            return found.lower, found.upper

        first, result = _answers(abstracted, lambda: z3.And(x >= 0, x <= width),
                                 lambda: z3.And(low, high), lambda: z3.And(low, high), reuse)
        assert first == (0, width)
        return result

    assert bounds(reuse=True, width=1) == (0, 1)      # released: the dead formula's interval
    assert bounds(reuse=False, width=2) == (10, 12)   # control


def test_mdb_singleton_gives_a_new_task_a_dead_tasks_connection():
    """mdb_singleton/singleton.py:117-146 keeps one connection per str(id(current task)) in the
    class-level _connections, never pruned, holding nothing of the task; the connection's
    AsyncIOMotorClient is bound to the loop that made it: a task born on a dead task's address,
    in a new event loop, gets the dead task's connection, bound to the closed loop (every
    operation on it fails: Event loop is closed)."""
    singleton = PINS.need("mdb-singleton", "mdb_singleton.singleton")
    logging.getLogger().setLevel(logging.WARNING)    # the package logs each connection at INFO

    def bound_to_its_loop(reuse: bool) -> bool:
        class Scoped(singleton.MongoDBSingletonAsync):
            _connections: dict = {}                  # a registry of each scenario's own

        chosen: list = []

        async def connect() -> bool | None:
            if chosen and asyncio.current_task() is not chosen[0]:
                return None                          # a landing miss: does nothing
            connection = Scoped()
            return connection.client.get_io_loop() is asyncio.get_running_loop()

        first_loop = asyncio.new_event_loop()
        kept = seed_pools(lambda: asyncio.Task.__new__(asyncio.Task))
        box = [first_loop.create_task(connect())]
        assert first_loop.run_until_complete(box[0]) is True
        first_loop.close()
        alive = box[0] if not reuse else None
        gc.collect()    # only the box may hold the finished task
        later_loop = asyncio.new_event_loop()
        misses: list = []
        try:
            if reuse:
                with quiet_allocator():
                    landing, misses = land(box, lambda: later_loop.create_task(connect()))
                    later = landing.require()
            else:
                later = later_loop.create_task(connect())
            chosen.append(later)
            return later_loop.run_until_complete(later)
        finally:
            later_loop.run_until_complete(asyncio.sleep(0))
            later_loop.close()
            del misses, alive, kept

    assert bound_to_its_loop(reuse=True) is False    # released: the dead task's connection, on the closed loop
    assert bound_to_its_loop(reuse=False) is True    # control


def test_lean_interact_pickle_cache_reloads_a_dead_requests_file_as_an_earlier_state(tmp_path):
    """lean_interact/sessioncache.py:331-371 names the pickle file of each cached state after
    sha256(f"request_{type}_{id(request)}") and the process id, holding nothing of the request:
    a request born on a dead request's address is pickled into the earlier state's file, and
    reload (:383-415, run when AutoLeanServer restarts its REPL) gives the earlier state the later
    state's environment."""
    sessioncache = PINS.need("lean-interact", "lean_interact.sessioncache")
    interface = PINS.need("lean-interact", "lean_interact.interface")

    class StubREPL:
        """The Lean REPL's part: a pickle writes the environment into the file, an unpickle reads it."""

        def run(self, request, verbose=False, timeout=None):
            if isinstance(request, interface.PickleEnvironment):
                with open(request.pickle_to, "w", encoding="utf-8") as pickled:
                    pickled.write(str(request.env))
                return interface.CommandResponse(env=request.env)
            with open(request.unpickle_env_from, encoding="utf-8") as pickled:
                return interface.CommandResponse(env=int(pickled.read()))

    def first_state_reloaded(reuse: bool, directory) -> int:
        cache = sessioncache.PickleSessionCache(working_dir=directory)   # a cache of each scenario's own
        server = StubREPL()
        states: list = []

        def add(request) -> int:
            env = len(states) + 1
            states.append(cache.add(server, request, interface.CommandResponse(env=env)))
            return env

        first, second = _answers(add, lambda: interface.Command(cmd="def a := 1"),
                                 lambda: interface.Command(cmd="def b := 2"),
                                 lambda: object.__new__(interface.Command), reuse)
        assert (first, second) == (1, 2)
        cache.reload(server, timeout_per_state=None)
        return cache.get_repl_id(states[0], server)

    assert first_state_reloaded(reuse=True, directory=tmp_path / "forced") == 2    # released: the later state's environment
    assert first_state_reloaded(reuse=False, directory=tmp_path / "control") == 1  # control


def test_pynerva_function_emits_a_dead_functions_constants():
    """nervapy/constant_data.py:28-48 registers each ConstantData under id(active function) in the
    class-level ConstantData._function_constants, holding nothing of the function and cleared only
    by install_constant_data_support's patched __exit__; the ARM Function's assembly
    (arm/function.py:308-330, :420) emits the registered constants of id(self): a function born on
    a dead function's address emits the dead function's constants in its .data section."""
    arm = PINS.need("pynerva", "nervapy.arm")
    function = PINS.need("pynerva", "nervapy.arm.function")
    abi = PINS.need("pynerva", "nervapy.arm.abi")
    constant_data = PINS.need("pynerva", "nervapy.constant_data")

    def emits_first_constant(reuse: bool, scenario: str) -> bool:
        names = iter([f"{scenario}_first", f"{scenario}_second"])

        def assembled(func) -> str:
            with func:
                constant_data.ConstantData.uint32(7, name=next(names))
                arm.RETURN()
            return func.assembly

        def made(name: str):
            return function.Function(name, (), abi=abi.arm_gnueabi, report_generation=False)

        kept = seed_pools(lambda: object.__new__(function.Function))
        box = [made(f"{scenario}_f")]
        assert f"{scenario}_first:" in assembled(box[0])
        alive = box[0] if not reuse else None
        if reuse:
            # Function.__init__ allocates objects of the function's size class, one of which can
            # take the freed block before a new function is allocated: the next Function is placed
            # as it is allocated, on the dead function's address.
            with quiet_allocator(), born_on_death_of(function.Function, box) as landing:
                later = made(f"{scenario}_g")
            assert landing.require() is later
        else:
            later = made(f"{scenario}_g")
        result = f"{scenario}_first:" in assembled(later)
        del alive, kept
        return result

    assert emits_first_constant(reuse=True, scenario="forced") is True      # released: the dead function's constant
    assert emits_first_constant(reuse=False, scenario="control") is False   # control
