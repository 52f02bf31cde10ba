"""pytest options for the harness: --sut, --launcher, --world-size, --reuse, --seed, --deadline.

Each test in ``cases/`` is one case sent to a persistent rank group; see harness/pytest_plugin.py.
"""

pytest_plugins = ["harness.pytest_plugin"]


def pytest_addoption(parser):
    from harness.pytest_plugin import add_options

    add_options(parser)
