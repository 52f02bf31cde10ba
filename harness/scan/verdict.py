"""What the lifetime judge says of a container: how long it lives (:class:`Lifetime`), whether
it provably dies with the function that fills it, why, and which registry it is across files
(:class:`Verdict`). :mod:`harness.scan.lifetime` makes verdicts; the analyzer, the registry
judgement and the confidence read them."""

from __future__ import annotations

import dataclasses
import enum
from typing import Optional


class Lifetime(enum.Enum):
    TEMPORARY = "temporary"
    LOCAL = "local"
    PARAM = "parameter"
    CLOSURE = "closure"
    MODULE = "module"
    CLASS = "class"
    INSTANCE = "instance"
    GLOBAL_OBJECT = "global object"
    RETURNED = "returned"
    UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a container provably dies with the function, and why (or why not).

    ``identity`` names the container across functions and files (``Class.attr``,
    ``path::name``) so that reads can be judged by how every store into it behaves.
    """

    lifetime: Lifetime
    safe: bool
    reason: str
    identity: Optional[str] = None
