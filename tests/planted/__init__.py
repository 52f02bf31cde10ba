"""Copies of the emulated stack with one bug each, loadable with ``--sut tests.planted.MODULE:STACK``.

Each module plants one bug the harness must catch (its test is named in the module's docstring).
"""


def cleared(*stacks):
    """A fixture's body: the stacks' registries and the morgue cleared before the test and after it
    (``yield from cleared(STACK, ...)``), the morgue left forcing nothing."""
    from harness.idreuse.morgue import MORGUE, ReusePolicy

    for stack in stacks:
        stack.reset()
    MORGUE.clear()
    yield
    for stack in stacks:
        stack.reset()
    MORGUE.configure(ReusePolicy.parse("natural"), 0)
    MORGUE.clear()
