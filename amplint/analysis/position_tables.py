"""Where AMP602 looks: outer products of positions and frequencies, the sin/cos that
consume them, and whether autocast or a cast already puts them in half.  Kept apart from
the rule file, which holds the docs, examples and the fix."""
from __future__ import annotations

import ast
import re
from typing import Optional

from amplint.amp import policy
from amplint.analysis import positions
from amplint.dtypes import autocast_disabled

#: ``i,j->ij`` (also ``..., f -> ... f``): an outer product, no index summed
OUTER_SPEC = re.compile(r"^\s*(\.\.\.)?\s*([a-z])?\s*,\s*([a-z])\s*->\s*(\.\.\.)?\s*([a-z])?\s*([a-z])\s*$")
TRIG = frozenset({"sin", "cos"})
CASTS = frozenset({"to", "type", "type_as", "half", "bfloat16", "float"})


def outer_operands(ctx, node: ast.AST) -> Optional[tuple[str, ast.AST, ast.AST]]:
    """(kind, positions-or-first, second) for a product of two tensors."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.MatMult)):
        return ("matmul" if isinstance(node.op, ast.MatMult) else "mul"), node.left, node.right
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.BinOp) \
            and isinstance(node.right.op, ast.Pow):
        return "mul", node.left, node.right  # pos / 10000 ** (2i / d): positions times the inverse frequencies
    if isinstance(node, ast.Call):
        qn = ctx.qualname(node.func) or ""
        if qn in ("torch.outer", "torch.ger") and len(node.args) == 2:
            return "outer", node.args[0], node.args[1]
        if qn == "torch.einsum" and len(node.args) == 3 and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and OUTER_SPEC.match(node.args[0].value):
            return "einsum", node.args[1], node.args[2]
        if qn == "torch.matmul" and len(node.args) == 2:
            return "matmul", node.args[0], node.args[1]
    return None


def in_table_code(ctx, node: ast.AST) -> bool:
    """Inside a class or function named for position encodings, or a function computing
    both ``sin`` and ``cos``."""
    if positions.in_table_scope(ctx, node):
        return True
    func = ctx.enclosing_function(node)
    if func is None:
        return False
    seen = set()
    for n in ast.walk(func):
        if isinstance(n, ast.Call):
            name = n.func.attr if isinstance(n.func, ast.Attribute) else None
            if name in TRIG:
                seen.add(name)
    return seen == TRIG


def autocast_half(ctx, node: ast.AST, kind: str) -> bool:
    """Whether the selected policy runs this product in half under O1 even on fp32 operands."""
    if ctx.settings.opt_level != "O1" or autocast_disabled(ctx, node):
        return False
    if policy.op_family("torch." + kind) != policy.GEMM:
        return False
    qualname = "torch." + kind
    devices = ("cuda", "cpu") if ctx.settings.device == "any" else (ctx.settings.device,)
    return any(policy.cast_of(qualname, ctx.settings.engine, d) == policy.HALF for d in devices)


def derived_names(ctx, func: ast.AST, stmt: ast.stmt) -> set:
    """Names assigned from the product's statement and, transitively, from them."""
    names = set()
    if isinstance(stmt, ast.Assign):
        names |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    if not names:
        return names
    changed = True
    while changed:
        changed = False
        for n in ast.walk(func):
            if isinstance(n, ast.Assign) and n.lineno > stmt.lineno:
                used = {m.id for m in ast.walk(n.value) if isinstance(m, ast.Name)}
                if used & names:
                    new = {t.id for t in n.targets if isinstance(t, ast.Name)} - names
                    if new:
                        names |= new
                        changed = True
    return names


def trig_consumers(ctx, node: ast.AST) -> list[ast.Call]:
    """The ``sin`` / ``cos`` calls of the same function that read the product."""
    func = ctx.enclosing_function(node)
    if func is None:
        return []
    stmt = ctx.enclosing_statement(node)
    names = derived_names(ctx, func, stmt)
    out = []
    for n in ast.walk(func):
        if not isinstance(n, ast.Call):
            continue
        if isinstance(n.func, ast.Attribute) and n.func.attr in TRIG and not n.args:
            arg = n.func.value
        elif (ctx.qualname(n.func) or "") in ("torch.sin", "torch.cos") and n.args:
            arg = n.args[0]
        else:
            continue
        inside = any(m is node for m in ast.walk(arg))
        reads = any(isinstance(m, ast.Name) and m.id in names for m in ast.walk(arg))
        if inside or (reads and n.lineno >= stmt.lineno):
            out.append(n)
    return out


def cast_follows(ctx, call: ast.Call) -> bool:
    """Whether the sin/cos result is cast already: ``emb.cos()[None, :].to(dtype)``."""
    node = call
    while True:
        parent = ctx.parent(node)
        if isinstance(parent, ast.Subscript) and parent.value is node:
            node = parent
        elif isinstance(parent, ast.Attribute) and parent.value is node:
            grand = ctx.parent(parent)
            if not isinstance(grand, ast.Call):
                return False
            if parent.attr in CASTS:
                return True
            node = grand
        else:
            return False


def cast_angles(ctx, call: ast.Call) -> Optional[ast.Call]:
    """The cast that puts the angles of a ``sin`` / ``cos`` in half right before it, in
    position-table code: ``freqs = freqs.to(t); t * freqs.cos()`` or
    ``torch.sin(angles.to(x))`` -- an fp32 table rounded to half before the trig, not after."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in TRIG:
        return None
    qualname = ctx.qualname(func) or ""
    if qualname in ("torch.sin", "torch.cos") and len(call.args) == 1:
        operand = call.args[0]
    elif not qualname and not call.args:
        operand = func.value
    else:
        return None
    if isinstance(operand, ast.Name) and ctx.enclosing_function(operand) is not None:
        operand = positions.reaching_value(ctx, operand)
    if not (isinstance(operand, ast.Call) and isinstance(operand.func, ast.Attribute)
            and operand.func.attr in ("to", "type_as", "half", "bfloat16") and not ctx.qualname(operand.func)):
        return None
    before = ctx.precision_of(operand.func.value)
    if before is not None and before.kind in ("half", "int") or not in_table_code(ctx, call):
        return None  # already half (reported where it became so), or integers (AMP601's)
    return operand


def helper_given_activation_dtype(ctx, call: ast.Call) -> Optional[ast.AST]:
    """The function of the file (or method of the class) that ``call`` hands an
    activation's dtype as its ``dtype`` parameter (``dtype=x.dtype``, or ``x.dtype`` in
    that parameter's position), x not known to be fp32; None otherwise."""
    if not any(a.__class__ is ast.Attribute and a.attr == "dtype" for a in (*call.args, *(k.value for k in call.keywords))):
        return None  # cheap: no `x.dtype` passed
    func = call.func
    method = func.__class__ is ast.Attribute and func.value.__class__ is ast.Name and func.value.id == "self"
    cls = ctx.enclosing_class(call) if method else None
    helper = (ctx.functions.get(func.id) if func.__class__ is ast.Name else
              ctx.method(cls, func.attr) if cls is not None else None)
    if helper is None:
        return None
    params = [a.arg for a in helper.args.posonlyargs + helper.args.args][1 if method else 0:]
    passed = next((k.value for k in call.keywords if k.arg == "dtype"), None)
    if passed is None and "dtype" in params and params.index("dtype") < len(call.args):
        passed = call.args[params.index("dtype")]
    if not (passed.__class__ is ast.Attribute and passed.attr == "dtype") or ctx.dtype_of(passed.value).known_not_half:
        return None
    return helper
