"""``--sut torchao``: torchao's float8 training (``convert_to_float8_training``, emulated GEMMs) on CPU.

A real stack, not a model of one: the layers are torchao's ``Float8Linear``, the casts and GEMMs
are torchao's own code. The adapter adds only what the harness needs around it.

One concept per file:

* :mod:`.stack` -- the :class:`harness.stacks.protocol.Stack` object and ``load()``;
* :mod:`.model` -- building the model (fresh weight Parameters, conversion), gradient sync, SGD;
* :mod:`.capture` -- reading every float8 cast of a step at torchao's cast function;
* :mod:`.reference` -- the expected state of every cast, from :mod:`harness.fp8.dynamic_scaling`;
* :mod:`.cases` -- torchao's case catalogue;
* :mod:`.id_hook` -- ``--inject id-hook``: an id()-keyed weight-update hook added on purpose
  (torchao has no such state), so the oracles can be checked against a real stack.

Every module imports without torchao (torchao is imported where it is used, and by ``load()``,
which turns its absence into a one-line :class:`harness.errors.SetupError`); the reference
never uses it.
"""
