"""What the analysis walk records at each sink: the :class:`Hit` (where, what is keyed, how
the key is used, the container's verdict and what keeps the objects alive) and the finding
code a key and a sink make (:func:`code_for`). :func:`harness.scan.registry.judge` judges the
hits once every module has been walked."""

from __future__ import annotations

import ast
import dataclasses
import enum
from typing import Optional

from harness.scan.codes import Code
from harness.scan.facts import ModuleFacts
from harness.scan.keys import KeyFacts, KeyKind
from harness.scan.syntax import root_of
from harness.scan.verdict import Verdict


class Use(enum.Enum):
    """What the code does with the id-derived key at a sink, and what goes wrong if stale."""

    STORE = "when the object dies the entry stays, and a new object that gets the address matches it"
    READ = "a new object that gets a dead object's address finds the dead object's entry"
    SAVED = "a new object that gets the same address compares equal to the saved id"
    CACHED = "the cache keeps results for dead objects and hands them to new objects at the same address"


@dataclasses.dataclass(eq=False)
class Hit:
    """One sink, before the whole-scan judgement of reads."""

    module: ModuleFacts
    node: ast.AST
    code: Code
    subject: str
    use: Use
    verdict: Verdict
    kept_alive: Optional[str] = None
    container: Optional[ast.expr] = None
    key: Optional[KeyFacts] = None
    where: str = ""                                      # qualified name of the function
    guards: tuple[tuple[str, int], ...] = ()             # registries checked to hold the key
    sink: str = "mapping"                                # mapping, element, membership, saved, cached
    allocated: bool = False                              # the key's objects are made by this function
    file_name: bool = False                              # the id is written into a file or registered name
    count: bool = False                                  # the use only adds to a count kept per key

    @property
    def attribute(self) -> Optional[str]:
        """The last attribute naming the container (``_external_params`` for
        ``module._external_params[k]``): stores and reads are matched by it when the object
        the attribute belongs to cannot be told."""
        if self.container is None:
            return None
        _, parts = root_of(self.container)
        parts = parts[: parts.index("[]")] if "[]" in parts else parts
        return parts[-1] if parts else None

    @property
    def key_node(self) -> Optional[ast.expr]:
        """The key as written at the sink: ``k`` of ``d[k]`` or of ``d.add(k)``, ``d.get(k)``."""
        if isinstance(self.node, ast.Subscript):
            return self.node.slice
        if isinstance(self.node, ast.Call) and self.node.args:
            return self.node.args[0]
        return None


def code_for(key: KeyFacts, sink: str) -> Code:
    """The finding code for an id-derived ``key`` used as a ``sink`` ("mapping", "element",
    "membership")."""
    if key.kind is KeyKind.HASH:
        return Code.KEY_FROM_IDENTITY_HASH
    if key.kind is KeyKind.COMPOSITE:
        return Code.KEY_BUILT_FROM_ID
    return {
        "mapping": Code.DICT_KEYED_BY_ID,
        "element": Code.COLLECTION_OF_IDS,
        "membership": Code.MEMBERSHIP_BY_ID,
    }[sink]
