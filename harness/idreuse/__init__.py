"""Id reuse: forcing it through the allocator, and counting it.

See :mod:`harness.idreuse.morgue` (forcing) and :mod:`harness.idreuse.tracker` (counting and
the object records the hygiene oracle uses).
"""

from harness.idreuse.morgue import MORGUE, ReusePolicy, reuse_alloc, reuse_point

__all__ = ["MORGUE", "ReusePolicy", "reuse_alloc", "reuse_point"]
