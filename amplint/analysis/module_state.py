"""Whether a tensor expression is built from the module's own state only -- ``self.X``
parameters and buffers, fresh ``arange`` / ``ones`` tensors, and arithmetic on those --
with no activation (no tensor parameter of the enclosing function) in its data path.
Mega's EMA kernel ``einsum("dnl,dn->dl", kernel, self.kernel_projection_matrix * self.scale)``
with ``kernel`` from ``sigmoid(self.damping_factor)`` and ``arange(length)``: under O1
its operands are fp32 parameters, so the contraction runs in fp32 with no mixed dtypes."""
from __future__ import annotations

import ast

from amplint.analysis.constants import assignments

#: fresh tensors whose arguments are sizes, not data
_FACTORIES = ("arange", "ones", "zeros", "full", "empty", "eye", "linspace", "logspace", "tensor", "as_tensor")
#: tensor methods whose arguments are shapes, dims or dtypes, not data
_SHAPE_METHODS = ("view", "reshape", "expand", "repeat", "permute", "transpose", "unsqueeze", "squeeze", "flip",
                  "to", "type", "type_as", "float", "double", "half", "contiguous", "clone", "detach", "sum",
                  "mean", "cumsum", "flatten", "narrow", "size", "t", "exp", "log", "sigmoid", "tanh", "sqrt")


def from_module_state(ctx, expr: ast.AST) -> bool:
    """``expr`` depends on ``self`` attributes and fresh tensors only (see the module doc)."""
    func = ctx.enclosing_function(expr)
    if func is None:
        return False
    params = {a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs}
    params.discard("self")
    seen: set[str] = set()
    budget = [60]

    def ok(e: ast.AST, depth: int) -> bool:
        budget[0] -= 1
        if budget[0] < 0 or depth > 10:
            return False
        if isinstance(e, ast.Constant):
            return True
        if isinstance(e, ast.Name):
            if e.id == "self" or e.id in seen:
                return True
            if e.id in params:
                return False  # an argument: an activation as far as we know
            seen.add(e.id)
            values = assignments(ctx, func, e.id)
            return bool(values) and all(ok(v.value, depth + 1) for v in values)
        if isinstance(e, ast.Attribute):
            base = e.value
            while isinstance(base, ast.Attribute):
                base = base.value
            return isinstance(base, ast.Name) and base.id == "self"
        if isinstance(e, ast.Subscript):
            return ok(e.value, depth + 1)
        if isinstance(e, ast.BinOp):
            return ok(e.left, depth + 1) and ok(e.right, depth + 1)
        if isinstance(e, ast.UnaryOp):
            return ok(e.operand, depth + 1)
        if isinstance(e, ast.Call):
            f = e.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in _FACTORIES and not isinstance(f, ast.Attribute) or (
                    isinstance(f, ast.Attribute) and (ctx.qualname(f) or "").startswith("torch.") and name in _FACTORIES):
                return True
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                return all(ok(a, depth + 1) for a in e.args)  # self._coefficients(): module state
            if isinstance(f, ast.Attribute) and ctx.qualname(f) is None:  # a tensor method
                return ok(f.value, depth + 1) and (name in _SHAPE_METHODS or all(ok(a, depth + 1) for a in e.args))
            if (ctx.qualname(f) or "").startswith("torch."):
                return all(ok(a, depth + 1) for a in e.args)
            return False
        return False

    return ok(expr, 0)
