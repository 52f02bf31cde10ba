"""An id written into a file name leaves the objects' lifetimes behind.

``self.path = os.path.join(root, f"state_{id(self)}.pt")`` keeps the id in ``self``, which
dies with the object -- but the file does not: a new object at the same address builds the
same name and finds the dead one's file. "The container belongs to the object" is then no
reason the key is safe (:meth:`~harness.scan.keepalive.KeepAlive._kept_alive`).
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from harness.scan.syntax import callee_name, dotted

# Calls that make or open a path from their arguments.
_PATH_CALLS = {"Path", "PurePath", "open", "makedirs", "mkdir", "mkdtemp", "mkstemp", "NamedTemporaryFile", "save", "load"}
# Target names that hold a path.
_PATH_NAME = re.compile(r"(path|file|dir|folder)", re.IGNORECASE)
# A string part that reads as a path: a separator, or a file extension at its end.
_PATH_TEXT = re.compile(r"[/\\]|\.[A-Za-z][A-Za-z0-9]{0,4}$")


def names_a_file(expr: Optional[ast.expr], target: Optional[ast.expr] = None, function: Optional[ast.AST] = None) -> bool:
    """Whether ``expr`` (an id-derived key or the value holding it) builds a file name, or
    is stored in a ``target`` named as a path, or (with ``function``, the code around it)
    that target is handed to a call that makes, opens or registers something by that name."""
    if expr is None:
        return False
    if function is not None and target is not None and _handed_to_namer(target, function):
        return True
    if target is not None and _PATH_NAME.search(_last_name(target)):
        return isinstance(expr, (ast.JoinedStr, ast.BinOp, ast.Call))
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            name = callee_name(node) or ""
            if name in _PATH_CALLS or (dotted(node.func) or "").endswith("path.join"):
                return True
        if isinstance(node, ast.JoinedStr):
            texts = [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            if any(_PATH_TEXT.search(text) for text in texts):
                return True
    return False


# Calls that make, open or register something under a name they are given.
_NAMERS = re.compile(r"(register|define|open|save|makedirs|mkdir|write|export|dump|create)", re.IGNORECASE)


# Calls that make an identifier of the mapping they are given (a config id, a hash, a
# digest, a cache key): an id in that mapping goes into something that outlives the mapping.
_IDENTIFIER_MAKERS = re.compile(r"(_id$|_id_|hash|fingerprint|digest|_key$)", re.IGNORECASE)


def _handed_to_namer(target: ast.expr, function: ast.AST) -> bool:
    """``self.name = f"op_{id(self)}"`` then ``lib.define(self.name, ...)``: the name leaves
    the object for a namespace of the process (or the disk) that outlives it. Also
    ``kwargs["con"] = id(con)`` then ``create_config_id(kwargs)``: the id goes into the
    identifier made of the whole mapping (a cache directory's name, a digest)."""
    shown = ast.unparse(target)
    holder = ast.unparse(target.value) if isinstance(target, ast.Subscript) else None
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        name = callee_name(node) or ""
        arguments = [ast.unparse(argument) for argument in [*node.args, *(k.value for k in node.keywords)]]
        if _NAMERS.search(name) and shown in arguments:
            return True
        if holder is not None and _IDENTIFIER_MAKERS.search(name) and holder in arguments:
            return True
    return False


def _last_name(target: ast.expr) -> str:
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Subscript):
        return _last_name(target.value)
    return ""
