"""Copies of the emulated stack with one bug each, loadable with ``--sut tests.planted.MODULE:STACK``.

Each module plants one bug the harness must catch (its test is named in the module's docstring).
"""
