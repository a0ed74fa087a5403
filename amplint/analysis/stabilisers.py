"""How ``x + eps`` is used, for AMP102: a typed record, not message text."""
from __future__ import annotations

import ast
import dataclasses
from typing import Optional

_STAB_FUNCS = ("log", "log2", "log10", "sqrt", "rsqrt", "reciprocal", "div", "true_divide", "divide")
_STAB_METHODS = ("log", "log2", "log10", "sqrt", "rsqrt", "reciprocal", "log_", "sqrt_", "rsqrt_", "reciprocal_")
#: qualified-name prefixes of numbers that are not tensors
NON_TORCH = ("numpy.", "math.", "scipy.", "jax.", "tensorflow.")


@dataclasses.dataclass(frozen=True)
class Stabiliser:
    """How ``x + eps`` is used where it needs eps > 0: ``why`` is the message's clause;
    ``rooted``: under a root or a negative power (a norm's denominator: fixed by computing
    the norm in fp32); ``op``: a stabilising function or method (``log``, ``sqrt``), not
    an operator -- outside model code only such a call marks a tensor."""

    why: str
    rooted: bool = False
    op: bool = False


#: functions and methods whose result is never negative (in every dtype)
_NON_NEGATIVE = ("abs", "square", "exp", "relu", "sigmoid", "softplus", "norm", "cosh")


def _call_name(ctx, expr: ast.AST) -> Optional[str]:
    """``torch.cosh(x)`` / ``x.cosh()`` -> ``"cosh"`` (torch or a tensor method only)."""
    if not isinstance(expr, ast.Call):
        return None
    func = expr.func
    qn = ctx.qualname(func)
    if qn is not None:
        return qn.rsplit(".", 1)[-1] if qn.startswith("torch.") else None
    return func.attr if isinstance(func, ast.Attribute) else None


def _non_negative(ctx, expr: ast.AST) -> bool:
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Pow):
        exponent = ctx.evaluate(expr.right)
        return exponent is not None and exponent.value == 2
    name = _call_name(ctx, expr)
    if name == "pow" and isinstance(expr, ast.Call) and expr.args:
        exponent = ctx.evaluate(expr.args[-1])
        return exponent is not None and exponent.value == 2
    return name in _NON_NEGATIVE


def at_least_one(ctx, expr: ast.AST) -> bool:
    """Whether ``expr`` is >= 1 whatever its inputs: ``cosh(x)`` (auraloss's log-cosh
    loss), ``1 + x ** 2``, ``1.0 + t.abs()``.  An eps added to it changes nothing even in
    fp32, so its vanishing in half is harmless."""
    if _call_name(ctx, expr) == "cosh":
        return True
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        for const, other in ((expr.left, expr.right), (expr.right, expr.left)):
            value = ctx.evaluate(const)
            if value is not None and isinstance(value.value, (int, float)) and value.value >= 1 and _non_negative(ctx, other):
                return True
    return False


def discarded(ctx, node: ast.AST) -> bool:
    """Whether ``node`` only reaches an expression statement whose value is thrown away:
    ``input * torch.rsqrt(ms + self.eps)`` on a line of its own (transformers' MegaRMSNorm)
    has no effect, unless the statement is a call or runs an in-place method (``add_``)."""
    stmt = ctx.enclosing_statement(node)
    if not isinstance(stmt, ast.Expr) or isinstance(stmt.value, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom)):
        return False
    return not any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.endswith("_")
                   for n in ast.walk(stmt.value))


def stabiliser_use(ctx, node: ast.BinOp) -> Optional[Stabiliser]:
    """How ``node`` (``x + eps``) is used, when that use needs eps > 0 (None also when its
    value is discarded)."""
    if discarded(ctx, node):
        return None
    child, parent = node, ctx.parent(node)
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Pow) and parent.left is child:
        exponent = ctx.evaluate(parent.right)
        if exponent is not None and exponent.value < 0:
            return Stabiliser("a negative power of 0 is inf", rooted=True)
        child, parent = parent, ctx.parent(parent)
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Div, ast.FloorDiv)) and parent.right is child:
        return Stabiliser("the denominator is 0 where the other term is, so the division gives inf")
    if isinstance(parent, ast.Call) and child in parent.args:
        name = parent.func.attr if isinstance(parent.func, ast.Attribute) else getattr(parent.func, "id", "")
        qn = ctx.qualname(parent.func)
        if qn is not None and qn.startswith(NON_TORCH):
            return None
        if name in _STAB_FUNCS and (name not in ("div", "true_divide", "divide") or parent.args.index(child) == 1 or isinstance(parent.func, ast.Attribute) and qn is None):
            return Stabiliser(f"`{name}` of 0 is {'-inf' if name.startswith('log') else 'inf' if name != 'sqrt' else '0, and its gradient inf'}",
                              rooted="sqrt" in name, op=True)
    if isinstance(parent, ast.Attribute) and parent.value is child and parent.attr in _STAB_METHODS:
        call = ctx.parent(parent)
        if isinstance(call, ast.Call) and call.func is parent:
            return Stabiliser(f"`.{parent.attr}()` of 0 is {'-inf' if parent.attr.startswith('log') else 'inf' if 'sqrt' != parent.attr.rstrip('_') else '0, and its gradient inf'}",
                              rooted="sqrt" in parent.attr, op=True)
    if isinstance(parent, ast.Attribute) and parent.value is child and parent.attr == "pow":
        call = ctx.parent(parent)
        if isinstance(call, ast.Call) and call.args:
            exponent = ctx.evaluate(call.args[0])
            if exponent is not None and exponent.value < 0:
                return Stabiliser("a negative power of 0 is inf", rooted=True)
    return None
