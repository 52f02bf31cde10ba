"""What code under test sees of ``id`` while the sentinel watches: what it sees of the builtin.

A suite that inspects, pickles or copies ``id`` must pass or fail the same with the sentinel and
without it (joblib's own ``Memory(...).cache(id)(0)`` failed with "Too many arguments for
id(obj, /)" when the stand-in was a Python function: joblib reads the signature of functions and
passes builtins through untouched).
"""

from __future__ import annotations

import builtins
import copy
import inspect
import pickle

import pytest

from harness.sentinel.id_hook import IdWatch

_real_id = builtins.id


class Weight:
    pass


@pytest.fixture
def watch():
    ids = IdWatch(lambda address: [])
    ids.reset("test_id_stand_in")
    ids.start()
    try:
        yield ids
    finally:
        ids.stop()


def test_the_stand_in_is_installed_and_answers_like_the_builtin(watch):
    weight = Weight()
    assert builtins.id is not _real_id
    assert builtins.id(weight) == _real_id(weight)
    assert _real_id(weight) in watch.witnesses


def test_introspection_sees_no_python_function(watch):
    stand_in = builtins.id
    assert not inspect.isfunction(stand_in)
    assert not inspect.ismethod(stand_in)
    assert str(inspect.signature(stand_in)) == str(inspect.signature(_real_id)) == "(obj, /)"
    assert (stand_in.__name__, stand_in.__qualname__, stand_in.__module__) == ("id", "id", "builtins")
    assert stand_in.__doc__ == _real_id.__doc__
    assert stand_in.__self__ is _real_id.__self__
    assert repr(stand_in) == repr(_real_id)


def test_it_pickles_and_copies_as_the_global_builtins_id(watch):
    stand_in = builtins.id
    assert pickle.loads(pickle.dumps(stand_in)) is builtins.id
    assert copy.copy(stand_in) is stand_in
    assert copy.deepcopy({"key": stand_in})["key"] is stand_in
    dumped = pickle.dumps(stand_in)
    watch.stop()
    assert pickle.loads(dumped) is _real_id     # loaded where no sentinel runs


def test_stop_puts_the_builtin_back(watch):
    watch.stop()
    assert builtins.id is _real_id
