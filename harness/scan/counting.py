"""Registries that only count: ``n[id(x)] += 1``, ``n[k] = n.get(k, 0) + 1``. A stale entry
makes a new object's count start where a dead one's stopped, and changes nothing else -- as
long as no decision reads the count (such a read is a use of its own, and keeps the hazard)
and the module reads the container nowhere else but to log it."""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.hits import Hit, Use
from harness.scan.syntax import callee_name, render, root_of


class Counting:
    """The part of :class:`~harness.scan.analyzer.ModuleAnalyzer` that marks counting uses
    (it reads the analyzer's ``hits`` and ``module``)."""

    def _mark_count(self, store: Hit, target: ast.Subscript, value: Optional[ast.expr]) -> None:
        """``d[k] = d.get(k, 0) + 1``: the store, and the read it adds to, only count."""
        if not (isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Sub))):
            return
        sides = [value.left, value.right]
        if not any(is_number(side) for side in sides):
            return
        read = next((side for side in sides if not is_number(side)), None)
        if read is None or not (isinstance(read, (ast.Subscript, ast.Call)) and render(root_of(read)[0]) == render(root_of(target)[0])):
            return
        if not self._only_counted(target.value, self.module.parents.get(value)):
            return
        inside = set(ast.walk(value))
        for hit in self.hits:
            if hit is store or (hit.node in inside and hit.use is Use.READ):
                hit.count = True

    def _only_counted(self, container: ast.expr, statement: Optional[ast.AST]) -> bool:
        """Whether the module reads ``container`` nowhere but in ``statement`` and in
        statements that count or log (``len(counts)`` returned is a use of its own)."""
        shown = render(container)
        inside = set(ast.walk(statement)) if statement is not None else set()
        for node in ast.walk(self.module.tree):
            if node in inside or not isinstance(node, (ast.Name, ast.Attribute)) or not isinstance(node.ctx, ast.Load):
                continue
            if (node.id if isinstance(node, ast.Name) else node.attr) != (shown.rsplit(".", 1)[-1]):
                continue
            if render(node) != shown:
                continue
            statement_of = self._statement_of(node)
            if isinstance(statement_of, ast.AugAssign) or _logs(statement_of):
                continue
            return False
        return True


def _logs(statement: ast.AST) -> bool:
    """A statement that only prints or logs (``logger.info(...)``, ``print(...)``)."""
    if not isinstance(statement, ast.Expr) or not isinstance(statement.value, ast.Call):
        return False
    name = callee_name(statement.value) or ""
    return name in ("print", "info", "debug", "warning", "warn", "log", "error", "record", "add_scalar")


def is_number(node: Optional[ast.AST]) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
