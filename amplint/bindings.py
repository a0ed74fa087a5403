"""Name bindings and parent links on ``ast`` nodes: the few syntax facts both the
shared context (:mod:`amplint.context`) and the constant evaluator
(:mod:`amplint.evaluate`) need, kept here so that neither imports the other's module
at load time."""
from __future__ import annotations

import ast
from typing import Optional

#: fields that never hold a node: identifiers, numbers, strings, constants (Python's ast
#: grammar), and the shared Load / Store contexts and operators (``ctx``, ``op``, ``ops``)
_LEAF_FIELDS = frozenset(("ctx", "op", "ops", "id", "attr", "kind", "type_comment", "name", "asname", "module",
                          "level", "arg", "conversion", "is_async", "simple", "kwd_attrs", "rest", "tag", "lineno"))
#: fields that never hold a node in these classes only
_LEAF_FIELDS_OF = {ast.Constant: ("value",), ast.MatchSingleton: ("value",), ast.Global: ("names",),
                   ast.Nonlocal: ("names",)}


def node_fields(cls: type) -> tuple[str, ...]:
    """The fields of the ast class ``cls`` that may hold child nodes, in field order: what a
    walk reads (a ``Name`` has none; ``Attribute`` only ``value``)."""
    leaves = _LEAF_FIELDS_OF.get(cls, ())
    return tuple(f for f in cls._fields if f not in _LEAF_FIELDS and f not in leaves)


_FIELDS_OF: dict[type, tuple[str, ...]] = {}


def subtree(node: ast.AST) -> list[ast.AST]:
    """``node`` and every node below it, in :func:`ast.walk`'s order (breadth first),
    without the shared context and operator singletons (``Load``, ``Add``...): a list
    built in one loop, for a reader that looks at every node of a function (~3 times
    cheaper than the ``ast.walk`` generator)."""
    found = [node]
    fields_of, AST = _FIELDS_OF, ast.AST
    for current in found:  # the list grows while it is read: a queue, as ast.walk's
        cls = current.__class__
        fields = fields_of.get(cls)
        if fields is None:
            fields = fields_of[cls] = node_fields(cls)
        for field in fields:
            value = getattr(current, field, None)
            if value.__class__ is list:
                for child in value:
                    if isinstance(child, AST):
                        found.append(child)
            elif isinstance(value, AST):
                found.append(value)
    return found


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
