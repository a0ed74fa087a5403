"""Shared analysis for the constant rules (AMP101 overflow-constant, AMP102
underflow-epsilon, AMP103 all-masked-row NaN).

Everything here works on the ``ast`` the engine already parsed and on the shared
:class:`amplint.context.FileContext`; nothing imports torch or runs the code read.
Walks are bounded to one function and only happen for nodes that already passed the
rules' cheap checks.

Which branch of a dtype check runs in half is :mod:`amplint.dtypes`'s question
(``ctx.branch_runs_in_half``).

* :func:`feeds_softmax` -- does the tensor a call produces (or fills in place) flow into
  a softmax in the same function?
* :func:`tensor_name` -- a side-effect-free expression naming a tensor whose ``dtype``
  a fix may refer to.
* :func:`mask_kind` -- is a mask causal (``tril``/``triu``, a registered causal buffer),
  a padding mask, or unknown?
* :func:`fp32_evidence` -- is an operand explicitly computed in fp32 (``.float()``,
  ``.to(torch.float32)``)?
"""
from __future__ import annotations

import ast
import math
from typing import Iterable, Optional

from amplint.dtypes import FP32_DTYPES, dtype_literal, is_dtype_probe

# --- flows -------------------------------------------------------------------------

SOFTMAX_ATTRS = ("softmax", "log_softmax", "_softmax")
#: consumers an all -inf row also turns into NaN (AMP103 only)
ATTENTION_CONSUMERS = ("scaled_dot_product_attention", "multi_head_attention_forward")


def _func_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _is_consumer(call: ast.Call, consumers: tuple[str, ...]) -> bool:
    func = call.func
    # nn.Softmax(dim=-1)(scores): a layer built and called inline
    name = (_func_name(func) if func.__class__ is ast.Call else _func_name(call)).lower()
    return any(name == c or name.endswith(c) for c in consumers)


def _names_in(expr: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}


def _target_names(targets: Iterable[ast.AST]) -> set[str]:
    out = set()
    for t in targets:
        if isinstance(t, ast.Name):
            out.add(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            out |= _target_names(t.elts)
    return out


def feeds_softmax(ctx, node: ast.AST, produced: Optional[set] = None, consumers: tuple[str, ...] = SOFTMAX_ATTRS) -> bool:
    """Whether the value of ``node`` (an expression) -- or the tensors named in
    ``produced`` (in-place fills) -- reaches a softmax: directly
    (``F.softmax(x.masked_fill(...), -1)``, ``x.masked_fill(...).softmax(-1)``) or
    through names assigned later in the same function."""
    child = node
    for anc in ctx.ancestors(node):
        if isinstance(anc, ast.stmt):
            break
        if isinstance(anc, ast.Call) and child is not anc.func and _is_consumer(anc, consumers):
            return True
        if isinstance(anc, ast.Attribute) and anc.value is child:
            parent = ctx.parent(anc)
            if isinstance(parent, ast.Call) and parent.func is anc and _is_consumer(parent, consumers):
                return True
        child = anc
    stmt = ctx.enclosing_statement(node)
    names = set(produced or ())
    if isinstance(stmt, ast.Assign):
        names |= _target_names(stmt.targets)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        names |= _target_names([stmt.target])
    if not names or stmt is None:
        return False
    func = ctx.enclosing_function(stmt)
    if func is None:
        return False
    after = stmt.end_lineno
    later_assigns = []
    later_calls = []
    for sub in ast.walk(func):
        if sub.__class__ is ast.Assign:
            if sub.lineno > after:
                later_assigns.append((sub.lineno, _names_in(sub.value), _target_names(sub.targets)))
        elif sub.__class__ is ast.Call and sub.lineno > after and _is_consumer(sub, consumers):
            later_calls.append(sub)
    if not later_calls:
        return False
    later_assigns.sort(key=lambda s: s[0])
    for _ in range(3):  # follow a few hops of renaming: att = self.drop(att); p = att
        grew = False
        for _line, reads, targets in later_assigns:
            if reads & names:
                new = targets - names
                if new:
                    names |= new
                    grew = True
        if not grew:
            break
    for call in later_calls:
        pieces = list(call.args) + [k.value for k in call.keywords]
        if isinstance(call.func, ast.Attribute):
            pieces.append(call.func.value)
        if any(_names_in(p) & names for p in pieces):
            return True
    return False


def assignments(ctx, func: ast.AST, name: str) -> list:
    """The ``name = ...`` / ``name: T = ...`` statements of ``func`` (from the context's
    binding table when the frame has one, else one walk of the function)."""
    table = getattr(ctx, "bindings", None)
    if table is not None:
        nodes = table(func).get(name, ())
    else:
        nodes = [n for n in ast.walk(func) if isinstance(n, (ast.Assign, ast.AnnAssign))
                 and name in _target_names(n.targets if isinstance(n, ast.Assign) else [n.target])]
    return [n for n in nodes if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None]


# --- naming tensors ------------------------------------------------------------------

def _simple_chain(expr: ast.AST) -> bool:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name)


def tensor_name(expr: ast.AST) -> Optional[ast.AST]:
    """A side-effect-free expression with the same dtype as ``expr``: a name, an
    attribute chain (``self.scores``), or the base of a subscript (``att[:, h]`` ->
    ``att``).  None for calls and arithmetic."""
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    if isinstance(expr, (ast.Name, ast.Attribute)) and _simple_chain(expr):
        if isinstance(expr, ast.Name) and expr.id in ("torch", "self", "np", "math", "F", "nn"):
            return None
        return expr
    return None


_FLOAT_CASTS = ("to", "float", "half", "bfloat16", "type_as", "type", "double")


def float_cast_name(ctx, expr: ast.AST, func: Optional[ast.AST]) -> Optional[ast.AST]:
    """For an additive-mask operand like ``(1.0 - mask)`` return ``mask`` when the
    function converts ``mask`` to a floating dtype before (``mask = mask.to(dtype)``,
    ``.float()``, ``.half()``, ``.type_as(x)``); its dtype is then the operand's."""
    named = tensor_name(expr)
    if named is not None:
        return named
    if not isinstance(expr, ast.BinOp) or not isinstance(expr.op, (ast.Sub, ast.Add, ast.Mult)):
        return None
    sides = [expr.left, expr.right]
    consts = [s for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, (int, float))]
    others = [s for s in sides if s not in consts]
    if len(consts) != 1 or len(others) != 1 or not isinstance(others[0], ast.Name) or func is None:
        return None
    name = others[0].id
    for sub in assignments(ctx, func, name):
        if sub.lineno < expr.lineno:
            for call in ast.walk(sub.value):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in _FLOAT_CASTS:
                    if call.func.attr == "to" and not call.keywords and not call.args:
                        continue
                    if call.func.attr in ("to", "type") and any(
                        dtype_literal(ctx, a) not in (None, "float16", "bfloat16", "float32", "float64")
                        for a in list(call.args) + [k.value for k in call.keywords]
                    ):
                        continue  # .to(torch.long): not floating
                    return others[0]
    return None


# --- masks -------------------------------------------------------------------------

_CAUSAL_CALLS = ("tril", "triu", "tril_", "triu_", "generate_square_subsequent_mask", "tril_indices", "triu_indices")
#: masks that never empty a row: causal ones keep the diagonal, top-k / top-p filters keep the best token
_CAUSAL_WORDS = ("causal", "subsequent", "future", "autoregressive", "tril", "triu", "look_ahead", "lookahead",
                 "to_remove", "topk", "top_k", "top_p", "nucleus")
_PADDING_WORDS = ("pad", "attention_mask", "attn_mask_2d", "length", "lens", "valid", "key_mask", "seq_mask", "input_mask")


_FACTORIES = ("ones", "zeros", "full", "empty", "arange", "ones_like", "zeros_like", "full_like", "eye", "tensor",
              "as_tensor", "rand", "randn", "randint", "linspace")


#: ops that combine two masks elementwise or as an outer product
_PAIRING_METHODS = ("logical_and", "logical_or", "mul", "bmm", "matmul")


def _word_kind(word: str) -> str:
    low = word.lower()
    if any(w in low for w in _PADDING_WORDS):
        return "padding"
    if any(w in low for w in _CAUSAL_WORDS):
        return "causal"
    return "unknown"


def mask_kind(ctx, mask: ast.AST, use: ast.AST) -> str:
    """``"pairwise"``, ``"padding"``, ``"causal"`` or ``"unknown"``: follows the mask
    tensor's own data path (operands, method receivers, local names back to their
    assignments, ``self.X`` to its assignments in any method of the class or its
    ``register_buffer``, each in its own method's scope) to its sources.  A source built
    with ``tril``/``triu`` (or named causal) is causal; a name or a helper mentioning
    padding, ``attention_mask`` or lengths is padding; any other argument is unknown.

    ``"pairwise"``: padding on both axes of the scores -- two padding masks combined by
    ``&`` / ``|`` / ``*`` / a matmul (``m[:, :, None] & m[:, None, :]``), or padding
    combined with a causal mask (a left-padded prefix keeps no key): a padded query row
    is empty.  A padding mask alone masks keys, and every sequence keeps its real
    positions.  Pairwise wins over padding, padding over unknown, unknown over causal:
    ``causal & mask`` can still empty a row."""
    cls = ctx.enclosing_class(use)
    kinds: set[str] = set()
    seen: set[str] = set()
    budget = [80]

    def name_sources(word: str, depth: int, func) -> None:
        key = f"{id(func)}:{word}"
        if key in seen or func is None:
            return
        seen.add(key)
        assigned = assignments(ctx, func, word)
        if not assigned:
            kinds.add(_word_kind(word))  # a parameter (or a global): judge by its name
            return
        kind = _word_kind(word)
        if kind != "unknown":
            kinds.add(kind)
        for node in assigned:
            walk(node.value, depth + 1, func)

    def self_sources(word: str, depth: int) -> None:
        key = "self." + word
        if key in seen:
            return
        seen.add(key)
        kind = _word_kind(word)
        if kind != "unknown":
            kinds.add(kind)
        values = []  # (value, the method it is written in)
        for method in (cls.body if cls is not None else ()):
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(method):
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Attribute) and t.attr == word and isinstance(t.value, ast.Name)
                    and t.value.id == "self" for t in node.targets
                ):
                    if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                        values.append((node.value, method))  # `self.mask = None` resets it
                elif (isinstance(node, ast.Call) and _func_name(node) == "register_buffer" and len(node.args) >= 2
                      and isinstance(node.args[0], ast.Constant) and node.args[0].value == word):
                    values.append((node.args[1], method))
        if not values and kind == "unknown":
            kinds.add("unknown")
        for v, method in values:
            walk(v, depth + 1, method)

    def combined(left: ast.AST, right: ast.AST, depth: int, func) -> None:
        """Both sides walked on their own: padding on both (or padding and causal) is pairwise."""
        sides = []
        for side in (left, right):
            outer = set(kinds)
            kinds.clear()
            seen_before = set(seen)
            walk(side, depth + 1, func)
            sides.append(set(kinds))
            seen.clear()
            seen.update(seen_before)
            kinds.clear()
            kinds.update(outer)
        for side in sides:
            kinds.update(side)
        a, b = sides
        if ("padding" in a and ("padding" in b or "causal" in b)) or ("padding" in b and "causal" in a):
            kinds.add("pairwise")

    def walk(expr: ast.AST, depth: int, func) -> None:
        budget[0] -= 1
        if budget[0] < 0 or depth > 6:
            kinds.add("unknown")
            return
        if isinstance(expr, ast.Name):
            name_sources(expr.id, depth, func)
        elif isinstance(expr, ast.Attribute):
            if isinstance(expr.value, ast.Name) and expr.value.id == "self":
                self_sources(expr.attr, depth)
            else:
                kind = _word_kind(expr.attr)
                kinds.add(kind) if kind != "unknown" else walk(expr.value, depth + 1, func)
        elif isinstance(expr, ast.Subscript):
            walk(expr.value, depth + 1, func)
        elif isinstance(expr, ast.BinOp):
            if isinstance(expr.op, (ast.BitAnd, ast.BitOr, ast.Mult, ast.MatMult)):
                combined(expr.left, expr.right, depth, func)
            else:
                walk(expr.left, depth + 1, func)
                walk(expr.right, depth + 1, func)
        elif isinstance(expr, ast.BoolOp):
            for v in expr.values:
                walk(v, depth + 1, func)
        elif isinstance(expr, ast.Compare):
            for v in [expr.left, *expr.comparators]:
                walk(v, depth + 1, func)
        elif isinstance(expr, ast.UnaryOp):
            walk(expr.operand, depth + 1, func)
        elif isinstance(expr, ast.Call):
            name = _func_name(expr)
            if name in _CAUSAL_CALLS or "causal" in name.lower():
                kinds.add("causal")
                return
            if name in _FACTORIES:
                return  # a fresh tensor: neutral
            func_node = expr.func
            if isinstance(func_node, ast.Attribute) and ctx.qualname(func_node) is None:
                if func_node.attr in _PAIRING_METHODS and expr.args:  # m.logical_and(n), m.bmm(n)
                    combined(func_node.value, expr.args[0], depth, func)
                else:
                    walk(func_node.value, depth + 1, func)  # m.bool(), m.unsqueeze(1), m.to(x.device)
            elif name in _PAIRING_METHODS and len(expr.args) >= 2:  # torch.logical_and(m, n), torch.bmm(m, n)
                combined(expr.args[0], expr.args[1], depth, func)
            else:
                if _word_kind(name) == "padding":  # make_pad_mask(lengths), sequence_mask(lens)
                    kinds.add("padding")
                for a in expr.args:
                    if not (isinstance(a, ast.Name) and a.id == "self"):
                        walk(a, depth + 1, func)
        elif isinstance(expr, ast.Constant):
            return
        else:
            kinds.add("unknown")

    walk(mask, 0, ctx.enclosing_function(use))
    for kind in ("pairwise", "padding"):
        if kind in kinds:
            return kind
    if "unknown" in kinds or not kinds:
        return "unknown"
    return "causal"


# --- fp32 evidence -------------------------------------------------------------------

_FP32_METHODS = ("float", "double")
_HALF_CASTS = ("half", "bfloat16", "type_as")
#: methods and functions whose result has their (first) input's dtype
_DTYPE_PRESERVING_FUNCS = ("torch.sqrt", "torch.rsqrt", "torch.log", "torch.exp", "torch.abs", "torch.mean",
                           "torch.sum", "torch.pow", "torch.square", "torch.clamp", "torch.var", "torch.std")


def _cast_dtype(ctx, call: ast.Call) -> Optional[str]:
    """What an explicit cast call makes: "fp32", "other", or None (not a cast)."""
    func = call.func
    if isinstance(func, ast.Attribute):
        if func.attr in _FP32_METHODS and not call.args:
            return "fp32"
        if func.attr in _HALF_CASTS:
            return "other"
        if func.attr in ("to", "type"):
            for a in list(call.args) + [k.value for k in call.keywords if k.arg in (None, "dtype")]:
                d = dtype_literal(ctx, a)
                if d is not None:
                    return "fp32" if d in FP32_DTYPES else "other"
                if isinstance(a, (ast.Name, ast.Attribute)) and is_dtype_probe(a):
                    return "other"  # .to(input_dtype): back to whatever it was
            return None
    for k in call.keywords:
        if k.arg == "dtype":
            d = dtype_literal(ctx, k.value)
            return "fp32" if d in FP32_DTYPES else "other"
    return None


def fp32_evidence(ctx, expr: ast.AST, use: ast.AST, depth: int = 0) -> bool:
    """Whether ``expr`` is explicitly computed in fp32: following its dtype outward-in
    (method receivers, the operands of arithmetic -- fp32 wins type promotion --, local
    names back to their assignment), an fp32 cast (``.float()``, ``.double()``,
    ``.to(torch.float32)``, ``dtype=torch.float32``) comes before any cast back
    (``.type_as(x)``, ``.half()``, ``.to(input_dtype)``)."""
    if depth > 8 or expr is None:
        return False
    if isinstance(expr, ast.Call):
        cast = _cast_dtype(ctx, expr)
        if cast is not None:
            return cast == "fp32"
        func = expr.func
        qn = ctx.qualname(func)
        if qn is not None:
            if qn in _DTYPE_PRESERVING_FUNCS and expr.args:
                return fp32_evidence(ctx, expr.args[0], use, depth + 1)
            if qn.startswith("torch.") and len(expr.args) <= 4:
                # torch.cat / stack / meshgrid / where ...: fp32 wins type promotion
                return any(fp32_evidence(ctx, a, use, depth + 1) for a in expr.args if not isinstance(a, ast.Starred))
            return False
        if isinstance(func, ast.Attribute):
            return fp32_evidence(ctx, func.value, use, depth + 1)
        return False
    if isinstance(expr, ast.BinOp):
        return fp32_evidence(ctx, expr.left, use, depth + 1) or fp32_evidence(ctx, expr.right, use, depth + 1)
    if isinstance(expr, ast.UnaryOp):
        return fp32_evidence(ctx, expr.operand, use, depth + 1)
    if isinstance(expr, ast.Subscript):
        return fp32_evidence(ctx, expr.value, use, depth + 1)
    if isinstance(expr, ast.Name):
        func = ctx.enclosing_function(use)
        if func is None:
            return False
        best = None  # the nearest assignment before the use
        for node in assignments(ctx, func, expr.id):
            if node.lineno < use.lineno and (best is None or node.lineno > best.lineno):
                best = node
        if best is None:
            return False
        return fp32_evidence(ctx, best.value, best, depth + 1)
    return False


def known_not_half(ctx, expr: ast.AST, use: ast.AST) -> bool:
    """Whether the tensor ``expr`` (read at ``use``) is known to be computed in fp32 or
    fp64 rather than half.  The one question the constant rules ask about dtypes: today
    explicit fp32 evidence (:func:`fp32_evidence`); the shared dtype analysis
    (:mod:`amplint.dtypes`) is meant to answer it in its place -- integer counts,
    mask-promoted products, fp64 schedules built in ``__init__``, fp32 parameters under
    O1 -- without the rules changing."""
    return fp32_evidence(ctx, expr, use)


def origin_has_default(value) -> bool:
    """The value came through a parameter or config default a caller can override."""
    return any("default of" in r.note for r in value.origin)



# --- replacement epsilons --------------------------------------------------------------

def normal_replacement(smallest_normal: float) -> float:
    """The smallest of 1, 2, 5 x 10^k that is a normal number of the format
    (fp16: 1e-4; fp8 e4m3: 0.02)."""
    exp = math.floor(math.log10(smallest_normal))
    for k in (exp, exp + 1):
        for m in (1, 2, 5):
            v = float(f"{m}e{k}")
            if v >= smallest_normal:
                return v
    return float(f"1e{exp + 2}")


def literal_text(v: float) -> str:
    """``1e-04`` -> ``1e-4``: how a fix writes a replacement epsilon."""
    m, e = f"{v:e}".split("e")
    m = m.rstrip("0").rstrip(".")
    return f"{m}e{int(e)}"


# --- cheap per-file gate -----------------------------------------------------------------

_CONFIG_WORDS = ("config", "cfg", "conf.", "hparams", "args.", "opt.", "params.", "hp.")


def may_hold_inf(source: str) -> bool:
    """Whether -inf can reach a tensor in this file: it is spelled with "inf"
    (``float("-inf")``, ``math.inf``, ``np.NINF``) or comes from a config default.
    Plain substring tests: far cheaper than anything else a rule could do per file."""
    return "inf" in source or "Inf" in source or "INF" in source or any(w in source for w in _CONFIG_WORDS)
