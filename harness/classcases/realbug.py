"""What every reproducer of a released third-party bug returns, in both of its forms.

A reproducer (one module per bug in :mod:`harness.classcases`) runs the released code twice
over: ``Form.RELEASED`` as installed, ``Form.FIXED`` with the one registry fixed in place
(patched for the scenario only: each entry pruned by ``weakref.finalize`` when its key object
dies, which is what keying it by the object in a ``weakref.WeakKeyDictionary`` gives). In both
forms the harness puts a new object on a dead object's address
(:mod:`harness.idreuse.landing`). ``cases/test_real_bugs.py`` asserts the released form
answers wrong and the fixed form right, N times each.
"""

from __future__ import annotations

import dataclasses
import enum


class Form(enum.Enum):
    RELEASED = "released"
    FIXED = "fixed"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One run of a reproducer.

    ``answer`` is what the third-party code gave the new object, ``truth`` what it should
    have (computed without the registry); ``landed`` whether the new object was born on the
    dead object's address; ``stale`` what the hygiene oracle found in the registry right
    after the death (entries holding the dead object's id).
    """

    answer: object
    truth: object
    landed: bool
    stale: tuple[str, ...]

    @property
    def wrong(self) -> bool:
        return self.answer != self.truth

    def describe(self) -> str:
        return (
            f"answer {self.answer!r}, truth {self.truth!r}, new object on the dead one's address: "
            f"{self.landed}, stale entries: {list(self.stale) or 'none'}"
        )
