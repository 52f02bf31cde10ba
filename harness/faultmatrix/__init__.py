"""The fault matrix: every injected fault, repeated, under every launcher, measured as a table.

``python -m harness.faultmatrix --repeat 10 --json m.json`` (``./scripts/fault-matrix``). The
faults themselves are in :mod:`harness.faults`; this package drives them through the runner and
counts what was left behind (:mod:`harness.faultmatrix.leaks`).
"""
