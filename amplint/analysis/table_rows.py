"""Sums of looked-up table rows: ``self.field_embedding(ids).sum(1)`` and
``torch.cat(field_terms, dim=1).sum(1)``.

Recommender and graph models embed each categorical field (or atom feature, or codebook)
and add the fields' rows up: ``torch.sum(self.fc(x), dim=1)`` (torchfm's linear term),
``self.atom_encoder(nodes).sum(-2)`` (Graphormer), ``F.embedding(codes, table).sum(0)``
(vocos' codebooks), ``torch.cat(fields, dim=1).sum(1)`` over a Python list of per-field
results.  The summed values are rows of a learned table (initialised at std 1e-4..1), not
activations grown by matmuls, and the summed dimension is the number of fields (a few
to a few dozen): like ``a + b + c``, far from fp16's 65504.  What does overflow is
the square of such a sum (a factorisation machine's ``sum(x) ** 2``), so a sum whose result
is then squared is not cleared here.

:class:`TableRows` is built once per file through ``ctx.get`` and memoised by node.
"""
from __future__ import annotations

import ast
from typing import Optional

from amplint.analysis.calls import argument
from amplint.dtypes import Assignments, reaching_value
from amplint.semantic.layers import torch_layer

_TABLES = frozenset({"Embedding"})
_EMBEDDING_FUNCTIONS = frozenset({"torch.nn.functional.embedding", "torch.embedding"})
#: layout changes after which the values are still the table's rows
_LAYOUT = frozenset({"view", "reshape", "permute", "transpose", "unsqueeze", "squeeze", "contiguous", "flatten"})


class TableRows:
    """``of(expr)``: whether ``expr`` holds rows looked up in an embedding table (an
    ``nn.Embedding`` the class builds, called; ``F.embedding``; a module of the file whose
    ``forward`` returns such rows), through names and layout changes."""

    def __init__(self, ctx):
        self.ctx = ctx
        self._memo: dict[int, bool] = {}

    def of(self, expr: Optional[ast.AST], depth: int = 0) -> bool:
        if expr is None or depth > 6:
            return False
        key = id(expr)
        if key not in self._memo:
            self._memo[key] = False  # a cycle is not a lookup
            self._memo[key] = self._rows(expr, depth)
        return self._memo[key]

    def _rows(self, expr: ast.AST, depth: int) -> bool:
        ctx = self.ctx
        if expr.__class__ is ast.Name:
            return self.of(reaching_value(ctx, expr), depth + 1)
        if expr.__class__ is not ast.Call:
            return False
        func = expr.func
        qualname = ctx.qualname(func)
        if qualname in _EMBEDDING_FUNCTIONS:
            return True
        if func.__class__ is ast.Attribute and not qualname and func.attr in _LAYOUT:
            return self.of(func.value, depth + 1)
        if func.__class__ is ast.Attribute and func.value.__class__ is ast.Name and func.value.id == "self":
            return self._table_module(expr, func.attr, depth)
        return False

    def _table_module(self, node: ast.AST, attr: str, depth: int) -> bool:
        """``self.<attr>`` is, in every assignment the class makes, an ``nn.Embedding``
        or a module class of this file whose ``forward`` returns table rows."""
        ctx = self.ctx
        cls = ctx.enclosing_class(node)
        if cls is None:
            return False
        values = [a.value for klass in (cls, *ctx.base_classes(cls)) for stmt in klass.body
                  if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for a in ctx.self_assignments(stmt).get(attr, ())]
        if not values:
            return False
        for value in values:
            if value.__class__ is not ast.Call:
                return False
            if torch_layer(ctx, value) in _TABLES:
                continue
            built = ctx.classes.get(value.func.id) if value.func.__class__ is ast.Name else None
            forward = ctx.method(built, "forward") if built is not None else None
            returns = [n.value for n in ast.walk(forward) if n.__class__ is ast.Return] if forward else []
            if not returns or not all(self.of(r, depth + 1) for r in returns):
                return False
        return True


def _python_list(ctx, expr: ast.AST) -> bool:
    """A name every binding of which in its function makes a Python list (``[]``, a list
    comprehension, ``+=`` another list): a list of per-field tensors."""
    if expr.__class__ is ast.List or expr.__class__ is ast.ListComp:
        return True
    if expr.__class__ is not ast.Name:
        return False
    func = ctx.enclosing_function(expr)
    entries = ctx.get(Assignments).of(func).get(expr.id, ()) if func is not None else ()
    if not entries:
        return False
    for _line, _col, value, stmt in entries:
        if stmt.__class__ is ast.AugAssign:
            continue
        if value is None or value.__class__ not in (ast.List, ast.ListComp):
            return False
    return True


def _same_dim(ctx, a: ast.AST, b: ast.AST) -> bool:
    if ast.dump(a) == ast.dump(b):
        return True
    x, y = ctx.evaluate(a), ctx.evaluate(b)
    return x is not None and y is not None and x.value == y.value


def _concatenated_fields(ctx, expr: ast.AST, dim: ast.AST, depth: int = 0) -> bool:
    """``torch.cat(fields, dim=d)`` of a Python list, summed along ``d``, through names and
    an elementwise reweighting (``cat * w.unsqueeze(1)``)."""
    if depth > 4:
        return False
    if expr.__class__ is ast.Name:
        value = reaching_value(ctx, expr)
        return value is not None and _concatenated_fields(ctx, value, dim, depth + 1)
    if expr.__class__ is ast.BinOp and expr.op.__class__ is ast.Mult:
        return _concatenated_fields(ctx, expr.left, dim, depth + 1) or _concatenated_fields(ctx, expr.right, dim, depth + 1)
    if expr.__class__ is not ast.Call or ctx.qualname(expr.func) not in ("torch.cat", "torch.concat"):
        return False
    parts = argument(expr, "tensors", 0)
    cat_dim = argument(expr, "dim", 1) or ast.Constant(0)
    return parts is not None and _python_list(ctx, parts) and _same_dim(ctx, cat_dim, dim)


def _squared(ctx, call: ast.Call) -> bool:
    """The sum's result is squared: ``s ** 2``, ``torch.pow(s, 2)``, ``s.pow(2)``,
    ``torch.square(s)`` -- directly or through the one name it is assigned to."""
    def squares(node: ast.AST) -> bool:
        parent = ctx.parent(node)
        if parent.__class__ is ast.BinOp and parent.op.__class__ is ast.Pow and parent.left is node:
            return True
        if parent.__class__ is ast.BinOp and parent.op.__class__ is ast.Mult and ast.dump(parent.left) == ast.dump(parent.right):
            return True
        if parent.__class__ is ast.Attribute and parent.attr in ("pow", "square", "pow_"):
            return True
        return parent.__class__ is ast.Call and (ctx.qualname(parent.func) or "") in ("torch.pow", "torch.square")

    if squares(call):
        return True
    stmt = ctx.parent(call)
    if stmt.__class__ is ast.Assign and len(stmt.targets) == 1 and stmt.targets[0].__class__ is ast.Name:
        func = ctx.enclosing_function(call)
        name = stmt.targets[0].id
        return func is not None and any(
            n.__class__ is ast.Name and n.id == name and n.__class__ is ast.Name and squares(n)
            for n in ast.walk(func) if getattr(n, "lineno", 0) > stmt.lineno)
    return False


def sum_of_table_rows(ctx, call: ast.Call, operand: ast.AST, is_method: bool) -> bool:
    """A sum along given dimensions of looked-up embedding rows, or of a concatenated list
    of per-field terms along the concatenation's dimension, whose result is not squared."""
    dim = argument(call, "dim", 0 if is_method else 1)
    if dim is None:
        return False
    if not (ctx.get(TableRows).of(operand) or _concatenated_fields(ctx, operand, dim)):
        return False
    return not _squared(ctx, call)
