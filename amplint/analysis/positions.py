"""Which tensors hold positions and where position tables are built (AMP601, AMP602).

When such a tensor is half is the shared dtype analysis's answer (``ctx.precision_of``,
:class:`amplint.dtypes.PrecisionFacts`); this module says which values are positions.
The exact-integer limits are measured (``bench/bf16_facts.py``): bf16 represents every
integer up to 256 and fp16 up to 2048; beyond, positions collide.
"""
from __future__ import annotations

import ast
import re
from typing import Optional

from ..dtypes import Half, reaching_value
from ..numerics import BY_DTYPE

#: the short names messages use ("float16" -> "fp16")
SHORT = {name: f.key for name, f in BY_DTYPE.items()}
#: methods that keep a position tensor a position tensor (shape manipulation, casts)
_SHAPE = frozenset({
    "unsqueeze", "squeeze", "view", "reshape", "expand", "expand_as", "repeat", "flatten", "contiguous",
    "transpose", "permute", "clone", "detach", "to_dense", "exp", "log", "sqrt", "neg", "mul", "div",
    "add", "sub", "flip", "chunk", "cuda", "cpu", "__getitem__", "t", "narrow", "unbind",
    "abs",  # ALiBi distances: |j - i|
})


def target_format(settings) -> Optional[str]:
    """The half format activations have under the settings' target (None: fp8/int8)."""
    return settings.format.activations


def limit(half: Half) -> int:
    """The largest integer below which every integer is exact in ``half``'s format."""
    return BY_DTYPE[half.format].exact_integer_limit


#: names that hold positions, timesteps or token indices (integer-valued tensors)
POSITION_NAME = re.compile(
    r"^(t|ts|pos|positions?|position_ids|pos_ids|seq|timesteps?|time_steps?|steps|indices|idx|grid|coords?)$"
    r"|(_pos|_positions?|_position_ids|_timesteps?|_t)$")
#: classes and functions that build position encodings
TABLE_SCOPE = re.compile(r"rotary|rope|sinus|posemb|pos_emb|positional|position|fourier|timestep|freq", re.I)


def when(half: Half) -> str:
    """A clause saying when the value is half."""
    if half.mode == "explicit":
        return f"cast to {half.short} explicitly"
    if half.mode == "activation":
        return f"cast to the activation dtype ({half.short} under mixed precision)"
    return f"in the dtype of a buffer that `model.half()` / `model.to(torch.bfloat16)` / O2 casts to {half.short}"


def position_root(expr: ast.AST) -> Optional[ast.AST]:
    """The name or attribute under subscripts, ``unsqueeze`` / ``view``-like calls and casts."""
    while True:
        if isinstance(expr, ast.Subscript):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and (
                expr.func.attr in _SHAPE or expr.func.attr in ("to", "type", "type_as", "float", "half", "bfloat16")):
            expr = expr.func.value
        else:
            return expr


#: names that hold positions only by the convention of position-encoding code (``t`` in a rotary class)
LOOSE_POSITION_NAMES = frozenset({"t", "ts", "seq", "idx", "indices", "steps", "grid", "coords", "coord"})


def in_table_scope(ctx, node: ast.AST) -> bool:
    """Inside a class or function named for position encodings (``RotaryEmbedding``,
    ``SinusoidalPosEmb``, ``timestep_embedding``...)."""
    func = ctx.enclosing_function(node)
    cls = ctx.enclosing_class(node)
    return any(s is not None and TABLE_SCOPE.search(s.name) for s in (func, cls))


#: classes whose ``forward`` input is what they embed: positions, timesteps, noise levels
EMBEDS_INPUT = re.compile(r"posemb|pos_emb|sinusoid|fourier|timestep", re.I)


def _embedded_input(ctx, name: ast.Name) -> bool:
    """The only input of the ``forward`` of a position / timestep embedding class
    (``LearnedSinusoidalPosEmb.forward(self, x)``): what it embeds."""
    cls, method = ctx.enclosing_method(name)
    if cls is None or method is None or method.name != "forward" or not EMBEDS_INPUT.search(cls.name):
        return False
    params = method.args.posonlyargs + method.args.args + method.args.kwonlyargs
    return len(params) == 2 and params[1].arg == name.id


def is_position_like(ctx, expr: ast.AST, depth: int = 0) -> bool:
    """Integer-valued positions: an ``arange`` (or a name bound to one, also through
    arithmetic such as ``t / scaling_factor``), or a name that says it holds positions
    / timesteps / indices (``t`` / ``seq`` count only in position-encoding code)."""
    if depth > 6:
        return False
    root = position_root(expr)
    if isinstance(root, ast.BinOp) and isinstance(root.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        return is_position_like(ctx, root.left, depth + 1)
    if isinstance(root, ast.Call):
        qn = ctx.qualname(root.func) or ""
        if qn in ("einops.rearrange", "einops.repeat") and root.args:
            return is_position_like(ctx, root.args[0], depth + 1)
        if qn == "torch.arange":
            return True
        # x.new_tensor(range(n)) / torch.tensor(range(n)): an arange by another name
        factory = qn == "torch.tensor" or isinstance(root.func, ast.Attribute) and root.func.attr == "new_tensor"
        return factory and bool(root.args) and isinstance(root.args[0], ast.Call) \
            and isinstance(root.args[0].func, ast.Name) and root.args[0].func.id == "range"
    if isinstance(root, ast.Name):
        value = reaching_value(ctx, root)
        if value is not None and is_position_like(ctx, value, depth + 1):
            return True
        if value is None and _embedded_input(ctx, root):
            return True
        if not POSITION_NAME.search(root.id) or "mask" in root.id:  # `masked_position`: a 0/1 mask
            return False
        return root.id not in LOOSE_POSITION_NAMES or in_table_scope(ctx, root)
    if isinstance(root, ast.Attribute):
        return bool(POSITION_NAME.search(root.attr)) and root.attr not in LOOSE_POSITION_NAMES and "mask" not in root.attr
    return False


__all__ = [
    "SHORT", "limit", "when", "is_position_like", "position_root", "target_format",
    "in_table_scope", "reaching_value",
]


#: layout changes and casts through which an index tensor is followed to its use
_FOLLOW = frozenset({"view", "reshape", "unsqueeze", "squeeze", "type", "to", "type_as", "float", "half",
                     "bfloat16", "double", "flatten", "contiguous", "expand"})


#: words of a name that says it counts time steps, not features (``length``, ``seq_len``, ``T``)
_LENGTH_WORDS = ("len", "seq", "time", "step", "pos", "ctx", "frame")


def _counts_time_steps(end: ast.AST) -> bool:
    """An ``arange`` end that names a sequence length, or is a tensor's runtime size
    (``x.size(1)``, ``x.shape[1]``): the integers are positions, whatever they reach."""
    for n in ast.walk(end):
        name = n.id if n.__class__ is ast.Name else n.attr if n.__class__ is ast.Attribute else None
        if name is None:
            continue
        low = name.lower()
        if name in ("T", "L", "size", "shape") or any(w in low for w in _LENGTH_WORDS):
            return True
    return False


def _over_time_steps(ctx, node: ast.AST) -> bool:
    """``node`` is an ``arange`` (or a cast of one: ``arange(length).to(p)``) whose end
    counts time steps."""
    while node.__class__ is ast.Call and ctx.qualname(node.func) != "torch.arange" and node.func.__class__ is ast.Attribute:
        node = node.func.value
    if node.__class__ is not ast.Call or not node.args:
        return False
    return _counts_time_steps(node.args[0] if len(node.args) == 1 else node.args[1])


def frequency_index(ctx, node: ast.AST, depth: int = 0) -> bool:
    """Integers that only ever reach an exponent: ``exp(arange(d / 2) * -c)``,
    ``max_period ** (arange(half_dim) / (half_dim - 1))``.  They index the frequencies of
    a sinusoidal table along the feature dimension (a model width, not a sequence length),
    so they are not positions.  Followed through arithmetic, layout changes, casts and one
    assignment; any other use (a product with positions, an embedding index) is not one.
    An ``arange`` over a sequence length stays positions (Mega's ``exp(arange(length) *
    log(q))``: the powers q**t of every time step)."""
    if depth > 4:
        return False
    if depth == 0 and _over_time_steps(ctx, node):
        return False
    child, parent = node, ctx.parent(node)
    while True:
        if parent.__class__ is ast.BinOp:
            if parent.op.__class__ is ast.Pow:
                return parent.right is child
            if parent.op.__class__ not in (ast.Mult, ast.Div, ast.Add, ast.Sub):
                return False
        elif parent.__class__ is ast.UnaryOp and parent.op.__class__ is ast.USub:
            pass
        elif parent.__class__ is ast.Attribute and parent.value is child and parent.attr in _FOLLOW | {"exp"}:
            call = ctx.parent(parent)
            if call.__class__ is not ast.Call or call.func is not parent:
                return False
            if parent.attr == "exp":
                return True
            parent = call
        elif parent.__class__ is ast.Call and (ctx.qualname(parent.func) or "") in ("torch.exp", "torch.pow"):
            name = ctx.qualname(parent.func)
            return name == "torch.exp" or (len(parent.args) > 1 and parent.args[1] is child)
        elif parent.__class__ is ast.Subscript and parent.value is child:
            pass
        elif (parent.__class__ is ast.Assign and len(parent.targets) == 1 and parent.targets[0].__class__ is ast.Name
              and parent.value is child):
            func = ctx.enclosing_function(parent)
            name = parent.targets[0].id
            uses = [] if func is None else [
                n for n in ast.walk(func) if n.__class__ is ast.Name and n.id == name
                and n.ctx.__class__ is ast.Load and n.lineno > parent.lineno]
            return bool(uses) and all(frequency_index(ctx, u, depth + 1) for u in uses)
        else:
            return False
        child, parent = parent, ctx.parent(parent)
