"""Benchmarks of the harness itself: ``python -m harness bench [--json PATH] [--quick]``.

One job per file: :mod:`~harness.bench.cli` (options, order, table and JSON),
:mod:`~harness.bench.figures` (a figure: median, spread, target, verdict),
:mod:`~harness.bench.workload` (the bench's cases and the model work without the harness),
:mod:`~harness.bench.bare` and :mod:`~harness.bench.bare_worker` (the bare loop's processes),
:mod:`~harness.bench.harnessed` (a persistent harness group, timed per case), and one module
per figure: :mod:`~harness.bench.launch` (amortization, overhead), :mod:`~harness.bench.red`
(time to red), :mod:`~harness.bench.throughput`, :mod:`~harness.bench.oracle_cost`,
:mod:`~harness.bench.memory` (RSS slopes), :mod:`~harness.bench.overlap`.
"""
