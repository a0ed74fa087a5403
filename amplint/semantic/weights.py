"""Normalised weights: tensors the file shows are non-negative and sum to 1 along a
dimension (``ctx.get(NormalisedWeights).of(expr)``).

A sum of ``weights * values`` along the weights' dimension is a convex combination: its
magnitude is at most the largest ``|value|``, so it cannot overflow where the values do
not (attention pooling, softmax-gated mixtures of experts).  The facts:

* ``softmax`` / ``gumbel_softmax`` calls (functional, method, ``torch.``), and a call of an
  ``nn.Softmax`` submodule (``self.softmax = nn.Softmax(dim=1)``);
* ``mask / lengths`` (a masked mean's uniform weights) and ``x / x.sum(...)`` (through ``.float()``, ``.clamp(...)``, ``+ eps`` and names: ``mask /
  total`` with ``total = mask.sum(2, keepdim=True)``);
* layout changes and dropout of such a tensor, names through their reaching assignment,
  elements of a list every append to which is one (``w += [F.softmax(e, dim=1)]``), a
  helper's parameter every call site of the file passes one, a call of a function or
  method of the file, or of a submodule whose class (in the file) returns one from
  ``forward``.

Which dimension the weights sum along is not followed: a sum of a weighted product along
another dimension than the softmax's is rare in model code.
"""
from __future__ import annotations

import ast
import re
from typing import Optional

from amplint.dtypes import _dominates as dominates, reaching_value

#: names of sequence lengths (the count of valid positions a mask keeps)
_LENGTHS = re.compile(r"(^|_)(lengths?|lens?)$")
_SOFTMAX = frozenset({"softmax", "gumbel_softmax"})
#: methods / torch functions that keep a tensor's elements (or scale them by a constant)
_LAYOUT = frozenset({
    "view", "reshape", "transpose", "permute", "contiguous", "clone", "detach", "unsqueeze",
    "squeeze", "flatten", "expand", "expand_as", "repeat", "t", "flip", "roll", "rearrange",
    "repeat_interleave", "narrow", "select", "gather", "index_select", "float", "half", "to",
    "type", "type_as", "dropout", "cat", "stack", "chunk", "split", "unbind",
})
#: what a denominator may wrap around the sum it divides by
_DENOMINATOR_WRAPPERS = frozenset({"float", "half", "to", "type_as", "clamp", "clamp_min", "clip", "unsqueeze",
                                   "view", "expand_as", "detach"})


class NormalisedWeights:
    """Per file, cached by node."""

    def __init__(self, ctx):
        self.ctx = ctx
        self._memo: dict[int, bool] = {}

    def of(self, expr: Optional[ast.AST], depth: int = 0) -> bool:
        if expr is None or depth > 10:
            return False
        key = id(expr)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = False  # a cycle is not a fact
        found = self._of(expr, depth)
        self._memo[key] = found
        return found

    def weighted_product(self, expr: ast.AST, depth: int = 0) -> bool:
        """``expr`` is ``weights * values`` (``*``, ``torch.mul``, ``.mul``) with normalised
        weights, through layout changes and names."""
        ctx = self.ctx
        if depth > 6:
            return False
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
            return self.of(expr.left) or self.of(expr.right)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            attr = expr.func.attr
            qualname = ctx.qualname(expr.func) or ""
            if qualname in ("torch.mul", "torch.multiply") and len(expr.args) >= 2:
                return self.of(expr.args[0]) or self.of(expr.args[1])
            if not qualname and attr in ("mul", "multiply") and expr.args:
                return self.of(expr.func.value) or self.of(expr.args[0])
            if not qualname and attr in _LAYOUT:
                return self.weighted_product(expr.func.value, depth + 1)
        if isinstance(expr, ast.Name):
            value = reaching_value(ctx, expr)
            return value is not None and self.weighted_product(value, depth + 1)
        return False

    # --- the facts -------------------------------------------------------------------

    def _of(self, expr: ast.AST, depth: int) -> bool:
        if isinstance(expr, ast.Subscript):
            return self.of(expr.value, depth + 1)
        if isinstance(expr, ast.Name):
            return self._name(expr, depth)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
            return self._divided_by_own_sum(expr) or self._mask_over_lengths(expr)
        if isinstance(expr, (ast.List, ast.Tuple)):
            return bool(expr.elts) and all(self.of(e, depth + 1) for e in expr.elts)
        if isinstance(expr, ast.Call):
            return self._call(expr, depth)
        return False

    def _call(self, call: ast.Call, depth: int) -> bool:
        ctx = self.ctx
        func = call.func
        qualname = ctx.qualname(func) or ""
        name = qualname.rsplit(".", 1)[-1] if qualname else func.attr if isinstance(func, ast.Attribute) else None
        is_method = isinstance(func, ast.Attribute) and not qualname
        if name in _SOFTMAX and (is_method or qualname.startswith("torch.")):
            return True
        if qualname in ("torch.nn.Softmax",):
            return False  # the module itself, not its output
        if name in _LAYOUT and (is_method or qualname.startswith("torch.") or qualname.startswith("einops.")):
            operand = func.value if is_method else (call.args[0] if call.args else None)
            return self.of(operand, depth + 1)
        if name in ("masked_fill", "masked_fill_") and is_method:  # zero where masked: still sums to <= 1
            fill = call.args[1] if len(call.args) > 1 else None
            value = ctx.evaluate(fill) if fill is not None else None
            return value is not None and value.value == 0 and self.of(func.value, depth + 1)
        if isinstance(func, ast.Name) and func.id in ctx.functions:
            return self._returns(ctx.functions[func.id], depth)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            cls = ctx.enclosing_class(call)
            if cls is None:
                return False
            method = ctx.method(cls, func.attr)
            if method is not None:
                return self._returns(method, depth)
            return self._submodule(cls, func.attr, depth)
        return False

    def _submodule(self, cls: ast.ClassDef, attr: str, depth: int) -> bool:
        """``self.attr(...)`` where every ``self.attr = ...`` of the class builds an
        ``nn.Softmax`` or a class of this file whose ``forward`` returns weights."""
        ctx = self.ctx
        values = []
        for klass in (cls, *ctx.base_classes(cls)):
            for stmt in klass.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    values += [a.value for a in ctx.self_assignments(stmt).get(attr, ()) if a.value is not None]
        if not values:
            return False
        for value in values:
            if not isinstance(value, ast.Call):
                return False
            qualname = ctx.qualname(value.func) or ""
            if qualname in ("torch.nn.Softmax", "torch.nn.modules.activation.Softmax"):
                continue
            built = ctx.classes.get(value.func.id) if isinstance(value.func, ast.Name) else None
            forward = ctx.method(built, "forward") if built is not None else None
            if forward is None or not self._returns(forward, depth):
                return False
        return True

    def _returns(self, func: ast.AST, depth: int) -> bool:
        returns = [n.value for n in ast.walk(func) if isinstance(n, ast.Return)]
        if not returns or any(r is None for r in returns):
            return False
        nested = [n for n in ast.walk(func) if n is not func and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        if nested:  # a return of a nested def is not this function's
            inner = {id(r) for f in nested for r in ast.walk(f)}
            returns = [r for r in returns if id(r) not in inner]
        return bool(returns) and all(self.of(r, depth + 1) for r in returns)

    def _name(self, name: ast.Name, depth: int) -> bool:
        ctx = self.ctx
        func = ctx.enclosing_function(name)
        if func is None:
            return False
        appended = self._list_elements(name, func)
        if appended is not None:
            return bool(appended) and all(self.of(e, depth + 1) for e in appended)
        value = reaching_value(ctx, name)
        if value is not None:
            return all(self.of(v, depth + 1) for v in self._reaching_values(name, func, value))
        params = func.args.posonlyargs + func.args.args + func.args.kwonlyargs
        if not any(p.arg == name.id for p in params) or func.name in ("forward", "__init__", "__call__"):
            return False
        passed = ctx.dtype_flow.passed_arguments(func, name.id)
        return bool(passed) and all(self.of(arg, depth + 1) for arg in passed)

    def _reaching_values(self, name: ast.Name, func: ast.AST, last: ast.AST) -> list:
        """The values that may reach ``name``: the last assignment before the use and, while
        that one is conditional (``if self.use_softmax: w = w.softmax(-1)``), the ones before
        (None: a path on which no assignment of the function reaches)."""
        ctx = self.ctx
        use = ctx.enclosing_statement(name)
        assigns = sorted((n for n in ast.walk(func) if isinstance(n, ast.Assign) and n.lineno <= use.lineno
                          and any(isinstance(t, ast.Name) and t.id == name.id for t in n.targets)),
                         key=lambda n: (n.lineno, n.col_offset))
        index = next((i for i, a in enumerate(assigns) if a.value is last), None)
        if index is None:
            return [last]
        values = []
        for stmt in reversed(assigns[: index + 1]):
            values.append(stmt.value)
            if dominates(ctx, stmt, use):
                return values
        return values + [None]

    def _list_elements(self, name: ast.Name, func: ast.AST) -> Optional[list]:
        """The elements put in a list ``name`` built empty and grown by ``+= [...]`` /
        ``.append(...)`` in ``func``; None when ``name`` is not such a list."""
        built_empty, elements = False, []
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name.id for t in node.targets):
                if not (isinstance(node.value, ast.List) and not node.value.elts):
                    return None
                built_empty = True
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name.id:
                if not isinstance(node.value, ast.List):
                    return None
                elements += node.value.elts
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
                  and isinstance(node.func.value, ast.Name) and node.func.value.id == name.id and node.args):
                elements.append(node.args[0])
        return elements if built_empty else None

    def _mask_over_lengths(self, expr: ast.BinOp) -> bool:
        """``mask / lengths``: a 0/1 padding mask divided by the number of valid positions,
        the uniform weights of a masked mean."""
        def names(node):
            return [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
                    if isinstance(n, (ast.Name, ast.Attribute))]
        left = names(expr.left)
        return (any("mask" in n.lower() for n in left) and not any(_LENGTHS.search(n) for n in left)
                and any(_LENGTHS.search(n) for n in names(expr.right)))

    def _divided_by_own_sum(self, expr: ast.BinOp) -> bool:
        """``x / x.sum(...)``, the denominator through names, casts, a clamp and ``+ eps``."""
        ctx = self.ctx
        numerator = ast.dump(expr.left)
        denominator = expr.right
        for _ in range(8):
            if isinstance(denominator, ast.Name):
                value = reaching_value(ctx, denominator)
                if value is None:
                    return False
                denominator = value
            elif isinstance(denominator, ast.BinOp) and isinstance(denominator.op, ast.Add):
                left_const = ctx.evaluate(denominator.left) is not None
                denominator = denominator.right if left_const else denominator.left
            elif isinstance(denominator, ast.Call) and isinstance(denominator.func, ast.Attribute):
                attr = denominator.func.attr
                qualname = ctx.qualname(denominator.func) or ""
                if attr in ("sum", "nansum"):
                    summed = denominator.func.value if not qualname else (denominator.args[0] if denominator.args else None)
                    return summed is not None and ast.dump(summed) == numerator
                if attr in _DENOMINATOR_WRAPPERS and not qualname:
                    denominator = denominator.func.value
                elif qualname in ("torch.clamp", "torch.clip") and denominator.args:
                    denominator = denominator.args[0]
                else:
                    return False
            else:
                return False
        return False
