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
