"""Whether a custom ``torch.autograd.Function`` keeps its inputs' dtype: every value its
``forward`` and ``backward`` return is an input (or a saved tensor, or a gradient) passed
through dtype-keeping ops only -- ``masked_fill``, a multiply or divide by a scalar,
views.  Such a Function (DeBERTa's ``XDropout``: ``input.masked_fill(mask, 0) * scale``)
computes in whatever dtype it is given, so being on no cast list costs nothing; one that
calls a softmax or a hand-written kernel does not qualify.
"""
from __future__ import annotations

import ast
from typing import Optional

#: tensor methods whose result has the receiver's dtype and values computed in it exactly
#: (a fill, a view): no rounding, no range hazard
_KEEPING_METHODS = ("masked_fill", "masked_fill_", "clone", "view", "view_as", "reshape", "contiguous",
                    "expand", "expand_as", "squeeze", "unsqueeze", "transpose", "permute", "detach",
                    "mul", "mul_", "div", "div_", "neg", "flatten")
#: methods that take a second tensor operand whose dtype does not matter (the mask)
_OPERAND_FREE = ("masked_fill", "masked_fill_", "view", "view_as", "reshape", "expand", "expand_as",
                 "squeeze", "unsqueeze", "transpose", "permute", "flatten")


def _params(func: ast.FunctionDef) -> tuple[str, set]:
    names = [a.arg for a in func.args.posonlyargs + func.args.args]
    return (names[0] if names else ""), set(names[1:])


def _returns(func: ast.FunctionDef) -> list:
    out = []
    for sub in ast.walk(func):
        if isinstance(sub, ast.Return) and sub.value is not None:
            out.extend(sub.value.elts if isinstance(sub.value, ast.Tuple) else [sub.value])
    return out


class _Judge:
    """Follows one method's returned values back through its local assignments."""

    def __init__(self, func: ast.FunctionDef):
        self.ctx_name, self.inputs = _params(func)
        self.bound: dict[str, list] = {}
        for sub in ast.walk(func):
            if isinstance(sub, ast.Assign):
                for t in sub.targets:
                    for n in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                        if isinstance(n, ast.Name):
                            self.bound.setdefault(n.id, []).append(sub.value)
        self.ops: list[str] = []

    def _scalar(self, expr: ast.AST, depth: int) -> bool:
        """A Python number: a constant, ``ctx.scale``, arithmetic on those."""
        if isinstance(expr, ast.Constant):
            return isinstance(expr.value, (int, float)) and not isinstance(expr.value, bool)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == self.ctx_name:
            return True
        if isinstance(expr, ast.BinOp):
            return self._scalar(expr.left, depth + 1) and self._scalar(expr.right, depth + 1)
        if isinstance(expr, ast.UnaryOp):
            return self._scalar(expr.operand, depth + 1)
        if isinstance(expr, ast.Name) and expr.id not in self.inputs and depth < 4:
            values = self.bound.get(expr.id, ())
            return bool(values) and all(self._scalar(v, depth + 1) for v in values)
        return False

    def keeps(self, expr: ast.AST, depth: int = 0) -> bool:
        if depth > 8:
            return False
        if isinstance(expr, ast.Constant) and expr.value is None:
            return True  # no gradient for a non-tensor input
        if isinstance(expr, ast.Name):
            if expr.id in self.inputs:
                return True
            values = self.bound.get(expr.id, ())
            return bool(values) and all(self.keeps(v, depth + 1) for v in values)
        if isinstance(expr, ast.Attribute) and expr.attr == "saved_tensors":
            return True  # the forward's own (already judged) values
        if isinstance(expr, ast.Subscript):
            return self.keeps(expr.value, depth + 1)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Mult, ast.Div)):
            sides = (expr.left, expr.right) if isinstance(expr.op, ast.Mult) else (expr.left,)
            if any(self.keeps(s, depth + 1) for s in sides) and any(self._scalar(s, depth) for s in (expr.left, expr.right)):
                self.ops.append("a scalar multiply")
                return True
            return False
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _KEEPING_METHODS:
            name = expr.func.attr
            if name not in _OPERAND_FREE and not all(self._scalar(a, depth) for a in expr.args):
                return False  # x.mul(other_tensor): promotes
            self.ops.append(f"`{name.rstrip('_')}`")
            return self.keeps(expr.func.value, depth + 1)
        return False


def dtype_keeping_ops(ctx, cls: ast.ClassDef) -> Optional[list[str]]:
    """The ops of a Function whose ``forward`` and ``backward`` return only their inputs
    passed through dtype-keeping ops (``["`masked_fill`", "a scalar multiply"]``), or None."""
    ops: list[str] = []
    for name in ("forward", "backward"):
        method = ctx.method(cls, name)
        if method is None:
            return None
        judge = _Judge(method)
        returned = _returns(method)
        if not returned or not all(judge.keeps(r) for r in returned):
            return None
        ops += [o for o in judge.ops if o not in ops]
    return ops
