"""A regression harness for id()-keyed state in FP8 training stacks.

Public surface:

* :mod:`harness.fp8` -- FP8 formats, the saturating cast, delayed scaling, bit comparison.
* :mod:`harness.reference` -- the stateless reference of every FP8 tensor after every step.
* :mod:`harness.stacks` -- the stack protocol and the built-in emulated stacks.
* :mod:`harness.runner` -- in-process and multi-process runners.
* ``python -m harness`` -- the command line (run, stress, bench, report, scan).
"""

__version__ = "0.1.0"
