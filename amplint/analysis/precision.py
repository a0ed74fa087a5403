"""Which tensors hold positions, which products are position tables, and when they are half.

The AMP6xx rules ask one question of an expression: *in which dtype does it run, and
under which opt levels is that half?*  :func:`precision_of` answers it from the
expression alone, following local names to their last assignment and ``self.attr`` to
registered buffers and parameters, without importing torch:

* ``int``: an integer tensor (``torch.arange(n)``), exact whatever the range;
* ``fp32``: ``.float()``, ``dtype=torch.float32``, a float ``arange`` / ``linspace``;
* ``half``: with a :class:`Half` saying which format and *when* it is half:
  ``explicit`` (``.half()``, ``dtype=torch.bfloat16``: always), ``activation``
  (``.to(x.dtype)``, ``.type_as(x)``, ``dtype=x.dtype`` on a forward argument: whenever
  the activations are half, O1 included), ``buffer`` (``dtype=self.inv_freq.dtype``,
  ``self.inv_freq`` itself: only when the model itself is cast, ``model.half()`` / O2 /
  O3).  Two half operands give the rarer of their two modes (torch promotes half x fp32
  to fp32); half with an ``int`` tensor or a Python number stays half.

The exact-integer limits are measured (``bench/bf16_facts.py``): bf16 represents every
integer up to 256 and fp16 up to 2048; beyond, positions collide.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from ..dtypes import DTYPE_ALIASES, dtype_literal
from .reductions import reaching_value

#: largest n such that every integer 0..n is exact in the format (bench/bf16_facts.py)
EXACT_INTEGER_LIMIT = {"float16": 2048, "bfloat16": 256}
#: the short names messages use
SHORT = {"float16": "fp16", "bfloat16": "bf16"}
#: when a half mode is half: explicit at every level, activations from O1, buffers from O2
_MODES = ("explicit", "activation", "buffer")
_HALF_LEVELS = {"explicit": ("O0", "O1", "O2", "O3"), "activation": ("O1", "O2", "O3"), "buffer": ("O2", "O3")}

_CREATORS = frozenset({"arange", "linspace", "logspace", "ones", "zeros", "full", "tensor", "rand", "randn", "empty"})
#: methods that keep the receiver's dtype (shape and value manipulation)
_KEEP = frozenset({
    "unsqueeze", "squeeze", "view", "reshape", "expand", "expand_as", "repeat", "flatten", "contiguous",
    "transpose", "permute", "clone", "detach", "to_dense", "exp", "log", "sqrt", "neg", "mul", "div",
    "add", "sub", "flip", "chunk", "cuda", "cpu", "__getitem__", "t", "narrow", "unbind",
})
_FUNCS_KEEP = frozenset({"exp", "log", "sqrt", "unsqueeze", "flip", "cat", "stack", "reshape", "repeat_interleave"})
_FLOAT_OUT = frozenset({"exp", "log", "sqrt", "sin", "cos", "div"})

#: names that hold positions, timesteps or token indices (integer-valued tensors)
POSITION_NAME = re.compile(
    r"^(t|ts|pos|positions?|position_ids|pos_ids|seq|timesteps?|time_steps?|steps|indices|idx|grid|coords?)$"
    r"|(_pos|_positions?|_position_ids|_timesteps?|_t)$")
#: classes and functions that build position encodings
TABLE_SCOPE = re.compile(r"rotary|rope|sinus|posemb|pos_emb|positional|position|fourier|timestep|freq", re.I)


@dataclasses.dataclass(frozen=True)
class Half:
    """A half-precision value: its format, when it is half, and an expression whose
    ``.dtype`` is that half dtype (for a cast back), when there is one."""

    format: str  # "float16" | "bfloat16"
    mode: str  # "explicit" | "activation" | "buffer"
    source: Optional[ast.AST] = None
    #: the cast or creation that made it half (what a fix rewrites to fp32)
    cause: Optional[ast.AST] = None

    def is_half_at(self, opt_level: str) -> bool:
        return opt_level in _HALF_LEVELS[self.mode]

    @property
    def short(self) -> str:
        return SHORT[self.format]

    @property
    def limit(self) -> int:
        return EXACT_INTEGER_LIMIT[self.format]


@dataclasses.dataclass(frozen=True)
class Precision:
    kind: str  # "int" | "fp32" | "half" | "number" (a Python scalar)
    half: Optional[Half] = None


INT, FP32, NUMBER = Precision("int"), Precision("fp32"), Precision("number")


def target_format(settings) -> Optional[str]:
    """The half format activations have under the settings' target (None: fp8/int8)."""
    return {"fp16": "float16", "bf16": "bfloat16"}.get(settings.target)


def promote(a: Optional[Precision], b: Optional[Precision]) -> Optional[Precision]:
    """torch's type promotion between two tensors (or a tensor and a Python number)."""
    if a is None or b is None:
        return None
    if a.kind == "number":
        return b if b.kind != "int" else FP32
    if b.kind == "number":
        return a if a.kind != "int" else FP32
    if a.kind == "int":
        return b
    if b.kind == "int":
        return a
    if a.kind == "fp32" or b.kind == "fp32":
        return FP32
    ha, hb = a.half, b.half
    mode = max(ha.mode, hb.mode, key=_MODES.index)
    keep = ha if ha.mode == mode else hb
    return Precision("half", dataclasses.replace(keep, mode=mode))


def _dtype_of_arg(ctx, expr: ast.AST, node: ast.AST, depth: int) -> Optional[Precision]:
    """The precision a ``dtype=`` / ``.to(...)`` / ``.type_as(...)`` argument means."""
    name = dtype_literal(ctx, expr)
    if name is not None:
        if name in EXACT_INTEGER_LIMIT:
            return Precision("half", Half(name, "explicit", None, node))
        if name in ("float32", "float64"):
            return FP32
        if name.startswith("int") or name.startswith("uint"):
            return INT
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return None  # a device string
    probe = expr.value if isinstance(expr, ast.Attribute) and expr.attr == "dtype" else expr
    if isinstance(probe, ast.Attribute) and probe.attr == "device":
        return None
    if isinstance(probe, ast.Name) and (probe.id == "device" or probe.id.endswith("_device")):
        return None
    if isinstance(probe, ast.Name) and (probe.id == "dtype" or probe.id.endswith("_dtype")):
        return _half_like(ctx, probe, "activation", node)
    return _tensor_like(ctx, probe, node, depth)


def _half_like(ctx, source: ast.AST, mode: str, cause: ast.AST) -> Optional[Precision]:
    fmt = target_format(ctx.settings)
    if fmt is None:
        return None
    return Precision("half", Half(fmt, mode, source, cause))


def _tensor_like(ctx, probe: ast.AST, cause: ast.AST, depth: int) -> Optional[Precision]:
    """The dtype of a tensor whose dtype is borrowed (``x`` in ``.to(x.dtype)``)."""
    if is_buffer(ctx, probe):
        return FP32 if _at_construction(ctx, probe) else _half_like(ctx, probe, "buffer", cause)
    inner = precision_of(ctx, probe, depth + 1)
    if inner is not None and inner.kind in ("fp32", "int"):
        return inner
    if inner is not None and inner.kind == "half":
        return Precision("half", dataclasses.replace(inner.half, source=probe, cause=cause))
    if isinstance(probe, (ast.Name, ast.Attribute)) and ctx.in_model_code(probe):
        return _half_like(ctx, probe, "activation", cause)
    return None


def is_buffer(ctx, expr: ast.AST) -> bool:
    """``self.<attr>`` registered with ``register_buffer`` or assigned an ``nn.Parameter``
    in the enclosing class: cast by ``model.half()`` / ``model.to(torch.bfloat16)``."""
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self"):
        return False
    cls = ctx.enclosing_class(expr)
    if cls is None:
        return False
    return any(expr.attr in _buffers(ctx, c) for c in (cls, *ctx.base_classes(cls)))


def _buffers(ctx, cls: ast.ClassDef) -> set:
    cached = getattr(cls, "amplint_buffers", None)
    if cached is not None:
        return cached
    found = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "register_buffer", "register_parameter") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            qn = ctx.qualname(node.value.func) or ""
            if qn.endswith("Parameter") or qn.endswith(".Buffer"):
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        found.add(t.attr)
    cls.amplint_buffers = found
    return found


def _at_construction(ctx, expr: ast.AST) -> bool:
    """Read in ``__init__``: buffers are still fp32 there (``model.half()`` comes later)."""
    func = ctx.enclosing_function(expr)
    return func is not None and func.name == "__init__"


def _self_value(ctx, expr: ast.Attribute) -> Optional[ast.AST]:
    """The value a plain ``self.attr = value`` in ``__init__`` gives (not a buffer)."""
    cls = ctx.enclosing_class(expr)
    init = ctx.method(cls, "__init__") if cls is not None else None
    if init is None:
        return None
    values = ctx.self_assignments(init).get(expr.attr, [])
    return values[-1].value if len(values) == 1 else None


def precision_of(ctx, expr: Optional[ast.AST], depth: int = 0) -> Optional[Precision]:
    """The precision ``expr`` runs in (see the module docstring); None: unknown."""
    if expr is None or depth > 12:
        return None
    if isinstance(expr, ast.Constant):
        return NUMBER if isinstance(expr.value, (int, float)) and not isinstance(expr.value, bool) else None
    if isinstance(expr, ast.UnaryOp):
        return precision_of(ctx, expr.operand, depth + 1)
    if isinstance(expr, ast.BinOp):
        left = precision_of(ctx, expr.left, depth + 1)
        right = precision_of(ctx, expr.right, depth + 1)
        if isinstance(expr.op, ast.MatMult):
            return promote(left, right)
        if isinstance(expr.op, (ast.Div, ast.Pow)) and left is not None and right is not None and INT in (left, right):
            other = right if left == INT else left
            return FP32 if other.kind in ("int", "number") else other
        return promote(left, right)
    if isinstance(expr, ast.Subscript):
        return precision_of(ctx, expr.value, depth + 1)
    if isinstance(expr, ast.Name):
        if ctx.evaluate(expr) is not None:
            return NUMBER
        value = reaching_value(ctx, expr)
        return precision_of(ctx, value, depth + 1) if value is not None else None
    if isinstance(expr, ast.Attribute):
        if is_buffer(ctx, expr):
            return FP32 if _at_construction(ctx, expr) else _half_like(ctx, expr, "buffer", expr)
        if isinstance(expr.value, ast.Name) and expr.value.id == "self":
            value = _self_value(ctx, expr)
            return precision_of(ctx, value, depth + 1) if value is not None else None
        if ctx.evaluate(expr) is not None:
            return NUMBER
        return None
    if isinstance(expr, ast.Call):
        return _call_precision(ctx, expr, depth)
    return None


def _call_precision(ctx, call: ast.Call, depth: int) -> Optional[Precision]:
    func = call.func
    qn = ctx.qualname(func) or ""
    dtype_kw = next((k.value for k in call.keywords if k.arg == "dtype"), None)
    if qn.startswith("torch.") and qn[6:] in _CREATORS:
        if dtype_kw is not None:
            return _dtype_of_arg(ctx, dtype_kw, call, depth)
        if qn[6:] == "arange":
            values = [precision_of(ctx, a, depth + 1) for a in call.args]
            floats = [a for a in call.args if isinstance(getattr(ctx.evaluate(a), "value", None), float)]
            if floats or any(v is not None and v.kind == "fp32" for v in values):
                return FP32
            return INT
        return FP32 if qn[6:] != "tensor" else None
    if qn.startswith("torch.") and qn[6:] in ("outer", "ger", "einsum", "matmul", "mm", "bmm", "mul"):
        operands = [a for a in call.args if not (isinstance(a, ast.Constant) and isinstance(a.value, str))]
        out = precision_of(ctx, operands[0], depth + 1) if operands else None
        for a in operands[1:]:
            out = promote(out, precision_of(ctx, a, depth + 1))
        return out
    if qn.startswith("torch.") and qn[6:] in _FUNCS_KEEP | _FLOAT_OUT | {"sin", "cos"}:
        if qn[6:] in ("cat", "stack") and call.args and isinstance(call.args[0], (ast.Tuple, ast.List)):
            parts = [precision_of(ctx, e, depth + 1) for e in call.args[0].elts]
            out = parts[0] if parts else None
            for p in parts[1:]:
                out = promote(out, p)
            return out
        inner = precision_of(ctx, call.args[0], depth + 1) if call.args else None
        if inner == INT and qn[6:] in _FLOAT_OUT | {"sin", "cos"}:
            return FP32
        return inner
    if not isinstance(func, ast.Attribute):
        return None
    method, receiver = func.attr, func.value
    if method == "float" or method == "double":
        return FP32
    if method in ("long", "int"):
        return INT
    if method == "half":
        return Precision("half", Half("float16", "explicit", None, call))
    if method == "bfloat16":
        return Precision("half", Half("bfloat16", "explicit", None, call))
    if method in ("to", "type", "type_as"):
        arg = call.args[0] if call.args else dtype_kw
        if arg is None:
            return precision_of(ctx, receiver, depth + 1)
        meant = _dtype_of_arg(ctx, arg, call, depth)
        if meant is None and method == "to":
            return precision_of(ctx, receiver, depth + 1)  # `.to(device)`
        return meant
    if method in _KEEP or method in ("sin", "cos"):
        inner = precision_of(ctx, receiver, depth + 1)
        if inner == INT and method in _FLOAT_OUT | {"sin", "cos"}:
            return FP32
        return inner
    return None


def half_now(ctx, precision: Optional[Precision]) -> Optional[Half]:
    """The :class:`Half` of ``precision`` when it is half at the settings' opt level."""
    if precision is None or precision.kind != "half":
        return None
    return precision.half if precision.half.is_half_at(ctx.settings.opt_level) else None


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
                expr.func.attr in _KEEP or expr.func.attr in ("to", "type", "type_as", "float", "half", "bfloat16")):
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
        return qn == "torch.arange"
    if isinstance(root, ast.Name):
        value = reaching_value(ctx, root)
        if value is not None and is_position_like(ctx, value, depth + 1):
            return True
        if not POSITION_NAME.search(root.id):
            return False
        return root.id not in LOOSE_POSITION_NAMES or in_table_scope(ctx, root)
    if isinstance(root, ast.Attribute):
        return bool(POSITION_NAME.search(root.attr)) and root.attr not in LOOSE_POSITION_NAMES
    return False


def autocast_disabled(ctx, node: ast.AST) -> bool:
    """Inside ``with torch.autocast(..., enabled=False):`` or a function decorated
    ``@autocast(enabled=False)`` (any torch / torch.cuda.amp / torch.amp spelling)."""

    def disables(call) -> bool:
        if not isinstance(call, ast.Call):
            return False
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name != "autocast":
            return False
        kw = next((k for k in call.keywords if k.arg == "enabled"), None)
        return kw is not None and isinstance(kw.value, ast.Constant) and kw.value.value is False

    for anc in ctx.ancestors(node):
        if isinstance(anc, (ast.With, ast.AsyncWith)) and any(disables(i.context_expr) for i in anc.items):
            return True
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(disables(d) for d in anc.decorator_list):
            return True
    return False


__all__ = [
    "EXACT_INTEGER_LIMIT", "Half", "Precision", "precision_of", "promote", "half_now", "when",
    "is_buffer", "is_position_like", "position_root", "target_format", "autocast_disabled", "in_table_scope",
]
