"""AMP103's evidence that a -inf mask empties a whole row of the scores even when its
mask's name alone says "padding" or nothing: the shapes and the mask arithmetic.

- an outer product of two masks broadcast on different axes whose *union* is filled
  (``~(q_mask[:, :, None] * kv_mask[:, None, :])``, ``a[:, None] | b[None, :]``): a row
  whose query is masked has every key masked (LoFTR's full attention);
- a mask restricted to a sliding window of keys (``as_strided`` / ``unfold`` views, a
  ``triu(k) + tril(-k)`` band) and combined with another mask: a window keeps few keys,
  and a padded query whose whole window is padding keeps none (LightHuBERT);
- a ``triu(-inf, diagonal=0)`` additive mask: it masks the diagonal as well, so the first
  query row is all -inf (fairseq's downsampled attention), unlike the causal
  ``diagonal=1``.

Also follows an additive mask (``bias = zeros.masked_fill(m, -inf); scores += bias``)
into the softmax of the scores it is added to.
"""
from __future__ import annotations

import ast
from typing import Callable, Optional

from amplint.analysis.constants import ATTENTION_CONSUMERS, SOFTMAX_ATTRS, assignments, feeds_softmax

#: views that turn a mask over all keys into one over a sliding window of them
_WINDOW_VIEWS = ("as_strided", "unfold")
#: methods that keep the values of their receiver (a -inf tensor stays -inf)
_SAME_VALUES = ("expand", "expand_as", "clone", "to", "view", "reshape", "unsqueeze", "float", "half", "bfloat16",
                "type_as", "repeat", "contiguous", "cuda", "detach", "type")
#: constructors whose value argument fills the whole tensor
_FILLED = ("new", "new_tensor", "tensor", "full", "new_full", "full_like", "fill_", "fill")


def _name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _values(ctx, expr: ast.AST, limit: int = 3) -> list:
    """``expr`` and, for a local name, the values assigned to it (a few hops)."""
    out, todo, seen = [], [expr], set()
    func = ctx.enclosing_function(expr)
    while todo and len(out) < 12:
        e = todo.pop()
        out.append(e)
        if isinstance(e, ast.Name) and func is not None and e.id not in seen and len(seen) < limit:
            seen.add(e.id)
            todo.extend(a.value for a in assignments(ctx, func, e.id))
    return out


def _calls(ctx, expr: ast.AST) -> set[str]:
    """Names of the calls in ``expr``'s data path (through local names)."""
    names = set()
    for value in _values(ctx, expr):
        for sub in ast.walk(value):
            if isinstance(sub, ast.Call):
                names.add(_name(sub))
            elif isinstance(sub, ast.Name) and sub is not value and sub is not expr:
                for v in _values(ctx, sub, 1)[1:]:
                    names.update(_name(c) for c in ast.walk(v) if isinstance(c, ast.Call))
    return names


# --- outer products -------------------------------------------------------------------

def _broadcast_axes(expr: ast.AST) -> Optional[frozenset]:
    """Positions a mask is broadcast along: ``m[:, :, None]`` -> {2}, ``m.unsqueeze(1)`` -> {1}."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in (
            "bool", "float", "to", "long", "int", "byte", "type_as"):
        expr = expr.func.value
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Tuple):
        axes = frozenset(i for i, e in enumerate(expr.slice.elts) if isinstance(e, ast.Constant) and e.value is None)
        return axes or None
    if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "unsqueeze"
            and len(expr.args) == 1 and isinstance(expr.args[0], ast.Constant) and isinstance(expr.args[0].value, int)):
        return frozenset({expr.args[0].value})
    return None


def _outer(expr: ast.AST, ops: tuple, methods: tuple) -> bool:
    """``a[:, :, None] OP b[:, None, :]``: two masks broadcast along different axes."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ops):
        left, right = expr.left, expr.right
    elif (isinstance(expr, ast.Call) and _name(expr) in methods
          and ((isinstance(expr.func, ast.Attribute) and len(expr.args) == 1) or len(expr.args) == 2)):
        left, right = (expr.func.value, expr.args[0]) if len(expr.args) == 1 else expr.args
    else:
        return False
    a, b = _broadcast_axes(left), _broadcast_axes(right)
    return a is not None and b is not None and a != b and bool(a - b) and bool(b - a)


def _negated(expr: ast.AST) -> Optional[ast.AST]:
    """The operand of ``~m``, ``m.logical_not()``, ``torch.logical_not(m)``, ``m == 0``."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.Invert, ast.Not)):
        return expr.operand
    if isinstance(expr, ast.Call) and _name(expr) == "logical_not":
        return expr.args[0] if expr.args else expr.func.value if isinstance(expr.func, ast.Attribute) else None
    if (isinstance(expr, ast.Compare) and len(expr.ops) == 1 and isinstance(expr.ops[0], ast.Eq)
            and isinstance(expr.comparators[0], ast.Constant) and expr.comparators[0].value in (0, False)):
        return expr.left
    return None


def fills_outer_union(ctx, mask: ast.AST) -> bool:
    """Whether the filled set is the union of a query mask and a key mask broadcast against
    each other: ``~(q[:, :, None] * k[:, None, :])`` or ``q[:, :, None] | k[:, None, :]``.
    A query the first excludes has every key filled."""
    for value in _values(ctx, mask):
        inner = _negated(value)
        if inner is not None:
            for v in _values(ctx, inner):
                if _outer(v, (ast.Mult, ast.BitAnd), ("logical_and", "mul")):
                    return True
        if _outer(value, (ast.BitOr, ast.Add), ("logical_or",)):
            return True
    return False


# --- windows and bands ----------------------------------------------------------------

def windowed(ctx, mask: ast.AST) -> bool:
    """A mask viewed as a sliding window of keys (``as_strided`` / ``unfold``)."""
    return bool(_calls(ctx, mask) & set(_WINDOW_VIEWS))


def _band(ctx, expr: ast.AST) -> bool:
    """A ``triu(k) + tril(-k)`` band (a sliding window around the diagonal)."""
    calls = _calls(ctx, expr)
    return bool({"triu", "triu_"} & calls and {"tril", "tril_"} & calls)


def _added_into(ctx, stmt: ast.stmt) -> list:
    """``scores += bias`` / ``scores = scores + bias`` after ``stmt``, which assigns ``bias``."""
    names = set()
    if isinstance(stmt, ast.Assign):
        names = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    func = ctx.enclosing_function(stmt)
    if not names or func is None:
        return []
    out = []
    for sub in ast.walk(func):
        if getattr(sub, "lineno", 0) <= stmt.end_lineno:
            continue
        if (isinstance(sub, ast.AugAssign) and isinstance(sub.op, ast.Add) and isinstance(sub.target, ast.Name)
                and isinstance(sub.value, ast.Name) and sub.value.id in names):
            out.append(sub)
    return out


def added_to_softmax_scores(ctx, node: ast.AST) -> Optional[ast.AugAssign]:
    """The ``scores += bias`` that carries the -inf bias built at ``node`` into a softmax."""
    for add in _added_into(ctx, ctx.enclosing_statement(node)):
        if feeds_softmax(ctx, add.value, None, SOFTMAX_ATTRS + ATTENTION_CONSUMERS):
            return add
    return None


def banded_scores(ctx, node: ast.AST) -> bool:
    """Whether the scores this -inf bias (built at ``node``) is added to already carry a
    band mask added earlier (``scores += band_bias`` with ``band_bias`` from ``triu + tril``)."""
    add = added_to_softmax_scores(ctx, node)
    func = ctx.enclosing_function(node)
    if add is None or func is None:
        return False
    for sub in ast.walk(func):
        if (isinstance(sub, ast.AugAssign) and sub is not add and isinstance(sub.op, ast.Add)
                and isinstance(sub.target, ast.Name) and sub.target.id == add.target.id
                and sub.lineno < add.lineno and _band(ctx, sub.value)):
            return True
    return False


# --- triangles of -inf ----------------------------------------------------------------

def holds_neg_inf(expr: ast.AST, is_neg_inf: Callable[[ast.AST], bool]) -> bool:
    """A tensor whose every element is -inf: ``x.new([-inf]).expand(n, n).clone()``,
    ``torch.full((n, n), -inf)``, ``fill_with_neg_inf(...)``, ``x.fill_(-inf)``."""
    for _ in range(8):
        if not isinstance(expr, ast.Call):
            return False
        name = _name(expr)
        if "neg_inf" in name.lower():
            return True
        if name in _FILLED:
            pieces = list(expr.args) + [k.value for k in expr.keywords if k.arg in ("fill_value", "value", "data")]
            for p in pieces:
                elts = p.elts if isinstance(p, (ast.List, ast.Tuple)) else [p]
                if len(elts) == 1 and is_neg_inf(elts[0]):
                    return True
            return False
        if name in _SAME_VALUES and isinstance(expr.func, ast.Attribute):
            expr = expr.func.value
            continue
        return False
    return False


def _diagonal(call: ast.Call, method: bool) -> Optional[int]:
    """The ``diagonal`` of a ``triu`` call (0 by default); None when not a literal."""
    args = call.args if method else call.args[1:]
    d = args[0] if args else next((k.value for k in call.keywords if k.arg == "diagonal"), None)
    sign = 1
    if isinstance(d, ast.UnaryOp) and isinstance(d.op, ast.USub):
        d, sign = d.operand, -1
    if d is None:
        return 0
    if isinstance(d, ast.Constant) and isinstance(d.value, int) and not isinstance(d.value, bool):
        return sign * d.value
    return None


def diagonal_inf_triangle(ctx, call: ast.Call, is_neg_inf: Callable[[ast.AST], bool]) -> Optional[int]:
    """The diagonal of ``torch.triu(-inf tensor, diagonal=d)`` / ``t.triu(d)`` with d <= 0
    whose result reaches a softmax: the triangle covers the diagonal, so the first row is
    all -inf.  None otherwise (``diagonal=1``, the causal mask, keeps the diagonal)."""
    method = ctx.qualname(call.func) is None and isinstance(call.func, ast.Attribute)
    if not method and not (ctx.qualname(call.func) or "").startswith("torch."):
        return None
    tensor = call.func.value if method else (call.args[0] if call.args else None)
    d = _diagonal(call, method)
    if tensor is None or d is None or d > 0 or not holds_neg_inf(tensor, is_neg_inf):
        return None
    return d if feeds_softmax(ctx, call, None, SOFTMAX_ATTRS + ATTENTION_CONSUMERS) else None


def padded_query_rows(ctx, node: ast.AST, mask: Optional[ast.AST], kind: str) -> Optional[str]:
    """Why a mask that ``mask_kind`` calls padding (or cannot classify) still empties a
    row: ``"outer"`` (a query mask x key mask union), ``"window"`` (a padding mask over a
    sliding window of keys), ``"band"`` (added to scores that carry a band mask); None
    when nothing says so."""
    if mask is None or kind not in ("padding", "unknown"):
        return None
    if kind == "unknown" and fills_outer_union(ctx, mask):
        return "outer"
    if windowed(ctx, mask):
        return "window"
    if banded_scores(ctx, node):
        return "band"
    return None
