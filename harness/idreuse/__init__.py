"""Id reuse: forcing it through the allocator, and counting it.

See :mod:`harness.idreuse.morgue` (forcing) and :mod:`harness.idreuse.tracker` (counting and
the object records the hygiene oracle uses).
"""

from harness.idreuse.morgue import MORGUE, ReuseMode, ReusePolicy, reuse_alloc, reuse_point

__harness_hidden__ = True

__all__ = ["MORGUE", "ReuseMode", "ReusePolicy", "reuse_alloc", "reuse_point"]
