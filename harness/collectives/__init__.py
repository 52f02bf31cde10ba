"""What every rank records and checks about its collectives.

* :mod:`harness.collectives.entry` -- a ledger entry as plain data: what must match across
  ranks (:func:`signature`) and how an entry reads in a report (:func:`format_entry`).
* :mod:`harness.collectives.ledger` -- wraps ``torch.distributed``'s collectives so that each
  one is recorded, with its call site, before it is issued.
* :mod:`harness.collectives.precheck` -- ranks compare each collective's shape before issuing
  it, so a mismatch is a report instead of a crash or a hang.
* :mod:`harness.collectives.exchange` -- how the precheck's messages travel: the group's store,
  or a Unix socket between every two ranks of one host.

The runner installs these on every rank; the oracles read the entries; fault injection wraps the
precheck. None of them imports the runner.
"""

__harness_hidden__ = True
