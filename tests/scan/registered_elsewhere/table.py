"""A process-wide table a getter hands out, filled by two module-level functions: register()
is called only in other files, each time with a module-level function (low: those live for
the process); note() is called elsewhere with objects made at run time (high)."""

_TABLE = None
_NOTES = {}


def _get_table():
    global _TABLE
    if _TABLE is None:
        _TABLE = {}
    return _TABLE


def _get_notes():
    return _NOTES


def register(fn, op):
    _get_table()[id(fn)] = op


def note(obj, text):
    _get_notes()[id(obj)] = text
