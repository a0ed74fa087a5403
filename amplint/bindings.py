"""Name bindings and parent links on ``ast`` nodes: the few syntax facts both the
shared context (:mod:`amplint.context`) and the constant evaluator
(:mod:`amplint.evaluate`) need, kept here so that neither imports the other's module
at load time."""
from __future__ import annotations

import ast
from typing import Optional

#: statements and expressions that bind names (the evaluator's local-variable tables)
BINDING_NAMES = frozenset(("Assign", "AnnAssign", "AugAssign", "For", "AsyncFor", "With", "AsyncWith", "NamedExpr"))


def bound_names(node: ast.AST) -> list[str]:
    """Names a binding statement or expression binds (targets of =, for, with, :=)."""
    cls = node.__class__
    if cls is ast.Assign:
        targets = node.targets
    elif cls is ast.With or cls is ast.AsyncWith:
        targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
    elif cls in (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.NamedExpr):
        targets = [node.target]
    else:
        return []
    out: list[str] = []
    stack = list(targets)
    while stack:  # names inside tuple / list / starred targets; attributes and subscripts bind none
        target = stack.pop()
        cls = target.__class__
        if cls is ast.Name:
            out.append(target.id)
        elif cls is ast.Tuple or cls is ast.List:
            stack.extend(target.elts)
        elif cls is ast.Starred:
            stack.append(target.value)
    return out


def parent_of(node: ast.AST) -> Optional[ast.AST]:
    return getattr(node, "amplint_parent", None)
