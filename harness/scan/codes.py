"""The finding codes of the id-hazard scan, one per kind of id-derived state.

The analyzer picks a code from what the key is made of and where it is used; the report
prints the code and its title. Codes are stable: tests, suppressions and CI logs refer to them.
"""

from __future__ import annotations

import enum


class Code(enum.Enum):
    """A finding code and the one-line title the report prints after it."""

    DICT_KEYED_BY_ID = ("IDK001", "dict keyed by id()")
    COLLECTION_OF_IDS = ("IDK002", "set or list of id() values")
    MEMBERSHIP_BY_ID = ("IDK003", "membership test on id()")
    KEY_BUILT_FROM_ID = ("IDK004", "key built from id()")
    KEY_FROM_IDENTITY_HASH = ("IDK005", "key from hash() of an identity-hashed object")
    ID_SAVED_IN_STATE = ("IDK006", "id() saved in long-lived state")
    FILE_NOT_PARSED = ("IDK010", "file could not be parsed")
    SUPPRESSION_WITHOUT_REASON = ("IDK011", "suppression without a reason")

    def __init__(self, label: str, title: str):
        self.label = label
        self.title = title

    @classmethod
    def from_label(cls, label: str) -> "Code":
        """The code spelled ``label`` (``"IDK001"``); ValueError names the known labels."""
        for code in cls:
            if code.label == label:
                return code
        known = ", ".join(code.label for code in cls)
        raise ValueError(f"unknown finding code {label!r}; known codes: {known}")
