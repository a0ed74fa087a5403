"""Dtype literals and the dtype checks that keep code out of half.

``torch.float16`` / ``torch.half`` / ``from torch import half`` name the same dtype
(:func:`dtype_literal`); ``if x.dtype == torch.float16: ... else: ...`` and
``-1e4 if x.dtype == torch.half else -1e9`` decide which branch runs in half
(:func:`dtype_branch`, also ``ctx.branch_runs_in_half``).  Depends on nothing but
:mod:`ast`, so the shared context and every rule family can use it.
"""
from __future__ import annotations

import ast
from typing import Optional

#: torch dtype attribute -> canonical name
DTYPE_ALIASES = {
    "float16": "float16", "half": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32", "float": "float32",
    "float64": "float64", "double": "float64",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
    "float8_e4m3fnuz": "float8_e4m3fn", "float8_e5m2fnuz": "float8_e5m2",
    "int8": "int8", "uint8": "uint8", "int16": "int16", "int32": "int32", "int": "int32",
    "int64": "int64", "long": "int64", "bool": "bool",
}
#: the dtypes a settings target means
TARGET_DTYPES = {
    "fp16": frozenset({"float16"}),
    "bf16": frozenset({"bfloat16"}),
    "fp8": frozenset({"float8_e4m3fn", "float8_e5m2"}),
    "int8": frozenset({"int8"}),
}
FP32_DTYPES = frozenset({"float32", "float64"})


def dtype_literal(ctx, expr: ast.AST) -> Optional[str]:
    """``torch.float16`` / ``torch.half`` (any torch alias) -> ``"float16"``; else None."""
    if isinstance(expr, ast.Attribute) and expr.attr in DTYPE_ALIASES:
        qn = ctx.qualname(expr)
        if qn is not None and qn.startswith("torch.") and qn.count(".") == 1:
            return DTYPE_ALIASES[expr.attr]
        if isinstance(expr.value, ast.Name) and expr.value.id == "torch":
            return DTYPE_ALIASES[expr.attr]
    if isinstance(expr, ast.Name):
        qn = ctx.imports.get(expr.id)
        if qn and qn.startswith("torch.") and qn[6:] in DTYPE_ALIASES:
            return DTYPE_ALIASES[qn[6:]]
    return None


def _dtype_set(ctx, expr: ast.AST) -> Optional[frozenset]:
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        names = [dtype_literal(ctx, e) for e in expr.elts]
        return None if any(n is None for n in names) else frozenset(names)
    name = dtype_literal(ctx, expr)
    return None if name is None else frozenset({name})


def is_dtype_probe(expr: ast.AST) -> bool:
    """``x.dtype``, ``self.weight.dtype``, ``dtype``, ``hidden_dtype``."""
    if isinstance(expr, ast.Attribute):
        return expr.attr == "dtype"
    if isinstance(expr, ast.Name):
        return expr.id == "dtype" or expr.id.endswith("_dtype")
    return False


def _test_truth(ctx, test: ast.AST, dtypes: frozenset) -> Optional[bool]:
    """Whether ``test`` is true when the probed tensor has one of ``dtypes`` (the
    target), or None when the test is not a dtype check / cannot tell."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _test_truth(ctx, test.operand, dtypes)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        parts = [_test_truth(ctx, v, dtypes) for v in test.values]
        if isinstance(test.op, ast.And):
            if any(p is False for p in parts):
                return False
            return True if all(p is True for p in parts) else None
        if any(p is True for p in parts):
            return True
        return False if all(p is False for p in parts) else None
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if is_dtype_probe(right) and not is_dtype_probe(left):
        left, right = right, left
    if not is_dtype_probe(left):
        return None
    wanted = _dtype_set(ctx, right)
    if wanted is None:
        return None
    hit = bool(wanted & dtypes)
    if hit and not dtypes <= wanted and isinstance(op, (ast.Eq, ast.Is, ast.In)):
        return None  # fp8 target, only one fp8 flavour checked
    if isinstance(op, (ast.Eq, ast.Is, ast.In)):
        return hit
    if isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)):
        return not hit
    return None


def dtype_branch(ctx, node: ast.AST, target: Optional[str] = None) -> Optional[bool]:
    """Whether ``node`` runs when tensors have the ``target`` dtype (default: the
    settings' target), judged from enclosing dtype checks::

        if x.dtype == torch.float16:
            fill = -1e4          # True: runs only in half
        else:
            fill = -1e9          # False: never runs in half
        fill = -1e4 if scores.dtype == torch.half else -1e9

    None: no enclosing dtype check decides it."""
    dtypes = TARGET_DTYPES.get(target or ctx.settings.target)
    if dtypes is None:
        return None
    result: Optional[bool] = None
    child = node
    for anc in ctx.ancestors(node):
        branch = None
        if isinstance(anc, ast.If):
            if any(s is child for s in anc.body):
                branch = True
            elif any(s is child for s in anc.orelse):
                branch = False
        elif isinstance(anc, ast.IfExp):
            if anc.body is child:
                branch = True
            elif anc.orelse is child:
                branch = False
        elif isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            break
        if branch is not None:
            truth = _test_truth(ctx, anc.test, dtypes)
            if truth is not None:
                if truth != branch:
                    return False
                result = True
        child = anc
    return result
