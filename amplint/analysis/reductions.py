"""Shared analysis for AMP301-AMP303: softmax, reductions and exponentials in half.

Everything here works on the ``ast`` the engine already parsed and on the shared
:class:`amplint.context.FileContext`; nothing is parsed or imported (no torch).

* :func:`resolve_call` -- which torch op a call is (``F.softmax`` ->
  ``torch.nn.functional.softmax``; ``x.sum(1)`` -> ``torch.Tensor.sum``) and its operand;
* whether an operand is already fp32 / integer / bool comes from the shared dtype flow
  (``ctx.dtype_of``, :class:`amplint.dtypes.DtypeFlow`); what runs in the model's forward
  computation from ``ctx.in_model_forward``;
* :func:`severity_for` -- opt-level awareness: ``info`` under O1 when the selected op
  policy (``amplint.amp.policy``, shared with the engine) already runs the op in fp32 on
  every device the model runs on, ``warning`` otherwise, ``None`` at O0 (pure fp32);
* fix support: a repeatable "dtype source" expression for the cast back, and the point
  where a range-growing reduction's result is bounded again (a normalising division).
  The edits themselves are built by :mod:`amplint.fixes`; call arguments and the
  file's aliases come from :mod:`amplint.analysis.calls`.
"""
from __future__ import annotations

import ast
import dataclasses
from typing import Iterable, Optional

from amplint.amp import policy
from amplint import fixes
from amplint.analysis.calls import argument, keyword
from amplint.bindings import subtree
from amplint.dtypes import assignments_between, reaching_value  # noqa: F401 (re-exported)
from amplint.rule import Edit, Severity

FP32_DTYPES = frozenset({"torch.float32", "torch.float", "torch.float64", "torch.double"})
LOW_DTYPES = frozenset({"torch.float16", "torch.half", "torch.bfloat16"})

#: calls the result of a range-growing reduction may pass through on its way to the
#: expression that bounds it again (``x / x.norm(...).clamp(min=...)``)
_PASS_THROUGH = frozenset(
    "clamp clamp_min clamp_max sqrt unsqueeze squeeze view reshape expand expand_as "
    "transpose permute contiguous flatten abs neg mean sum add mul sub".split()
)
_INVERTING = frozenset({"rsqrt", "reciprocal"})

_DEVICES = {"cuda": ("cuda",), "cpu": ("cpu",), "any": ("cuda", "cpu")}

#: argument names of the tensor a torch function reduces / normalises
_OPERAND_KEYWORDS = ("input", "logits", "A", "x", "self")


# --- op policy ----------------------------------------------------------------------

def upcast_by_policy(qualname: str, settings) -> bool:
    """Whether the selected mixed-precision policy (``settings.engine``) runs ``qualname``
    in fp32 under O1 on every device the model runs on (``settings.device``)."""
    for device in _DEVICES.get(settings.device, ("cuda", "cpu")):
        if policy.cast_of(qualname, settings.engine, device) != policy.FLOAT:
            return False
    return True


def engine_upcasts(settings, qualname: str) -> bool:
    """Whether the engine the file trains with already runs ``qualname`` in fp32 at the
    configured opt level (O1 and an upcasting policy): the code is as precise as it gets
    there, and a fix computing in fp32 and casting back would round that fp32 result to
    half (x.log_softmax(-1) under O1: max error 0.026 after the cast back, 0 before).
    Such findings are reported (``info``: O2/O3 upcast nothing) without a fix."""
    return settings.opt_level == "O1" and upcast_by_policy(qualname, settings)


def severity_for(settings, qualname: str) -> Optional[Severity]:
    """``None`` at O0 (nothing runs in half); ``info`` at O1 when the policy already
    upcasts the op; ``warning`` otherwise (O2/O3: nothing is upcast; or a device whose
    autocast keeps the op in half)."""
    if settings.opt_level == "O0":
        return None
    if settings.format.wide_exponent:
        return Severity.INFO  # bf16 has fp32's exponent range: precision, not overflow
    if settings.opt_level == "O1" and upcast_by_policy(qualname, settings):
        return Severity.INFO
    return Severity.WARNING


def policy_note(settings, qualname: str, severity: Severity) -> str:
    """A short clause for messages saying why the severity is what it is."""
    if severity == Severity.INFO:
        where = "torch.autocast on " + settings.device if settings.engine == "torch" else "the amplint O1 engine"
        return f"{where} already runs it in fp32; under O2/O3 (pure half) nothing is upcast"
    if settings.opt_level in ("O2", "O3"):
        return f"under {settings.opt_level} the model runs in half and nothing upcasts it"
    if settings.engine == "torch":
        return f"torch.autocast on {settings.device} keeps it in half"
    return "the O1 policy keeps it in half"


# --- calls ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class HalfCall:
    """A call to a precision-sensitive op in ``forward`` that may run in half."""

    attr: str  # the called name: ``softmax``, ``sum``
    qualname: str  # ``torch.nn.functional.softmax``, ``torch.Tensor.sum``
    operand: Optional[ast.AST]  # the tensor it works on (None: not visible)
    is_method: bool  # ``x.sum()`` rather than ``torch.sum(x)``
    #: :func:`dtype_kind` of its ``dtype=`` argument: None (absent) or ``"low"``
    dtype: Optional[str]
    shown: str  # how a message names it: ``.sum()``, ``F.softmax``
    #: reached through an alias, an attribute, ``functools.partial`` or a module built
    #: inline (``nn.Softmax(dim=-1)(x)``): the call's own keywords are not the op's
    aliased: bool = False
    #: fp32 under O1 only because an fp32 weight or buffer promotes the operand: half
    #: once the model is cast (reported at ``info``, see :func:`later_note`)
    later: bool = False


def _operand_fp32(ctx, operand: Optional[ast.AST]) -> Optional[bool]:
    """None: the operand is fp32 (or integer) and stays so -- nothing to report; True: fp32
    under O1 only until the model is cast; False: it may be half now."""
    if operand is None or not ctx.dtype_of(operand).known_not_half:
        return False
    if ctx.settings.opt_level == "O1" and ctx.fp32_until_model_cast(operand):
        return True
    return None


def later_note(ctx, operand: ast.AST) -> str:
    """Why a finding on an fp32-under-O1 operand is made (:attr:`HalfCall.later`)."""
    return (f"`{ctx.segment(operand)}` is fp32 under O1 only because an fp32 weight or buffer promotes "
            f"the activations; O2/O3 and `model.half()` cast that to half")


def aliased_call(ctx, call: ast.Call, qualnames) -> Optional[HalfCall]:
    """Like :func:`half_call`, for a call whose callee is not named as a torch function
    but may be one of ``qualnames`` (``ctx.dtype_flow.callees``): ``self.attn_fn(dots,
    dim=-1)`` with ``self.attn_fn = F.softmax if ... else entmax15``, a local
    ``softmax = torch.softmax if ... else stable_softmax``, ``partial(F.softmax, ...)``,
    ``nn.Softmax(dim=-1)(x)``."""
    func = call.func
    if isinstance(func, ast.Name):
        if func.id not in ctx.dtype_flow.alias_names():
            return None
    elif isinstance(func, ast.Attribute):
        if not (isinstance(func.value, ast.Name) and func.value.id in ("self", "cls")) \
                or "." + func.attr not in ctx.dtype_flow.alias_names():
            return None
    elif not isinstance(func, ast.Call) or not (ctx.qualname(func.func) or "").startswith("torch.nn."):
        return None
    if not call.args or isinstance(call.args[0], ast.Starred) or not ctx.in_model_forward(call):
        return None
    matched = [q for q in ctx.dtype_flow.callees(func) if q in qualnames]
    if not matched:
        return None
    qualname = matched[0]
    operand = call.args[0]
    dtype = dtype_kind(ctx, argument(call, "dtype"))
    later = _operand_fp32(ctx, operand)
    if dtype in ("fp32", "unknown") or later is None:
        return None
    attr = qualname.rsplit(".", 1)[-1]
    return HalfCall(attr, qualname, operand, False, dtype, ctx.segment(func), aliased=True, later=later)


def half_call(ctx, call: ast.Call, names: frozenset, qualnames) -> Optional[HalfCall]:
    """The opening AMP301 and AMP302 share: ``call`` is one of ``qualnames`` (called
    by a name in ``names``) in a module's ``forward``, passes no fp32 (or unknown)
    ``dtype=``, and its operand is not already fp32.  None otherwise."""
    resolved = forward_call(ctx, call, names)
    if resolved is None:
        return None
    attr, qualname, operand, is_method = resolved
    if qualname not in qualnames:
        return None
    dtype = dtype_kind(ctx, argument(call, "dtype"))
    later = _operand_fp32(ctx, operand)
    if dtype in ("fp32", "unknown") or later is None:
        return None
    shown = f".{attr}()" if is_method else ctx.segment(call.func)
    return HalfCall(attr, qualname, operand, is_method, dtype, shown, later=later)


def forward_call(ctx, call: ast.Call, names: frozenset) -> Optional[tuple[str, str, Optional[ast.AST], bool]]:
    """``(name, qualname, operand, is_method)`` for a call to one of ``names`` that runs in
    a module's ``forward`` (see :func:`resolve_call`); None otherwise."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in names or not ctx.in_model_forward(call):
        return None
    resolved = resolve_call(ctx, call, names)
    return None if resolved is None else (name, *resolved)


def resolve_call(ctx, call: ast.Call, names: frozenset) -> Optional[tuple[str, Optional[ast.AST], bool]]:
    """``(qualname, operand, is_method)`` when ``call`` is a torch function or tensor
    method whose last name component is in ``names``.  Cheap string checks first."""
    func = call.func
    if isinstance(func, ast.Attribute):
        if func.attr not in names:
            return None
        qn = ctx.qualname(func)
        if qn is not None:
            if not qn.startswith("torch.") or qn.startswith("torch.Tensor.") and not call.args:
                return None
            if qn.startswith("torch.Tensor."):
                return qn, call.args[0], False
            return qn, function_operand(call), False
        recv = func.value
        if isinstance(recv, ast.Name) and (recv.id in ("self", "cls") or recv.id in ctx.imports):
            return None
        if isinstance(recv, (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp,
                             ast.GeneratorExp, ast.JoinedStr)):
            return None
        if isinstance(recv, ast.Attribute) and ctx.qualname(recv) is not None:
            return None  # np.linalg.norm, math.prod ...
        return "torch.Tensor." + func.attr, recv, True
    if isinstance(func, ast.Name) and func.id in names:
        qn = ctx.qualname(func)
        if qn is not None and qn.startswith("torch."):
            return qn, function_operand(call), False
    return None


def function_operand(call: ast.Call) -> Optional[ast.AST]:
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    for kw in call.keywords:
        if kw.arg in _OPERAND_KEYWORDS:
            return kw.value
    return None


def dtype_kind(ctx, expr: Optional[ast.AST]) -> Optional[str]:
    """``"fp32"``, ``"low"`` or ``"unknown"`` for a dtype expression; None for no expression."""
    if expr is None or isinstance(expr, ast.Constant) and expr.value is None:
        return None  # `dtype=None` is the default
    qn = ctx.qualname(expr)
    if qn in FP32_DTYPES:
        return "fp32"
    if qn in LOW_DTYPES:
        return "low"
    if isinstance(expr, ast.Name) and expr.id == "float":
        return "fp32"
    return "unknown"


# --- fix helpers ----------------------------------------------------------------------

def is_simple(expr: ast.AST) -> bool:
    """A name or a dotted attribute of a name: cheap and side-effect free to repeat."""
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name)


def dtype_source(ctx, operand: Optional[ast.AST]) -> Optional[ast.AST]:
    """A repeatable expression whose ``.dtype`` is the dtype the operand had: the operand
    when it is a name / attribute, else the first tensor-looking name inside it
    (``scores`` in ``scores / self.scale``)."""
    if operand is None:
        return None
    if is_simple(operand):
        return None if _not_a_tensor(ctx, operand) else operand
    todo = [operand]
    while todo:
        node = todo.pop(0)
        if isinstance(node, ast.Call):
            # a tensor method chain: its receiver carries the dtype; a module or function
            # call (``self.head(h)``, ``F.gelu(h)``): its first argument does
            func = node.func
            receiver = func.value if isinstance(func, ast.Attribute) else None
            if receiver is not None and not _is_module_like(ctx, receiver):
                todo.insert(0, receiver)
            elif node.args and not isinstance(node.args[0], ast.Starred):
                todo.insert(0, node.args[0])
            continue
        if isinstance(node, (ast.Name, ast.Attribute)) and is_simple(node):
            if not _not_a_tensor(ctx, node):
                return node
            continue
        if isinstance(node, ast.BinOp):
            todo[0:0] = [node.left, node.right]
        elif isinstance(node, ast.UnaryOp):
            todo.insert(0, node.operand)
        elif isinstance(node, ast.Subscript):
            todo.insert(0, node.value)
    return None


def _is_module_like(ctx, expr: ast.AST) -> bool:
    """``self``, ``self.head``, ``F``, ``torch.nn.functional``: not a tensor receiver."""
    base = expr
    while isinstance(base, ast.Attribute):
        base = base.value
    return isinstance(base, ast.Name) and (base.id in ("self", "cls") or base.id in ctx.imports)


def _not_a_tensor(ctx, expr: ast.AST) -> bool:
    base = expr
    while isinstance(base, ast.Attribute):
        base = base.value
    if isinstance(base, ast.Name) and base.id in ctx.imports:
        return True  # math.pi, torch.float32
    if isinstance(expr, ast.Name):
        if expr.id == "self":
            return True
        func = ctx.enclosing_function(expr)
        if func is not None:  # cheap: a local or parameter, without the constant folder
            value = reaching_value(ctx, expr)
            if value is not None:
                return isinstance(value, ast.Constant)
            args = func.args
            params = args.posonlyargs + args.args
            defaults = [None] * (len(params) - len(args.defaults)) + list(args.defaults)
            defaults += list(args.kw_defaults)
            for param, default in zip(params + args.kwonlyargs, defaults):
                if param.arg == expr.id:
                    return isinstance(default, ast.Constant) and isinstance(default.value, (int, float))
    return ctx.evaluate(expr) is not None  # a constant: self.scale = d ** -0.5


def upcast_edits(ctx, operand: ast.AST) -> list[Edit]:
    """``.float()`` on ``operand`` (:func:`amplint.fixes.upcast`), after its own
    parentheses when the source already has them: ``(x - u).float()``."""
    line = ctx.line_text(operand.lineno)
    end_line = ctx.line_text(operand.end_lineno)
    before = line[: operand.col_offset].rstrip()
    after = end_line[operand.end_col_offset:]
    if before.endswith("(") and after.lstrip().startswith(")") and ctx.is_ascii:
        close = operand.end_col_offset + after.index(")") + 1
        opener = ctx.parent(operand)
        # the parenthesis belongs to the operand, not to a call's argument list
        if not (isinstance(opener, ast.Call) and operand in opener.args):
            return [Edit.insert_at(operand.end_lineno, close, ".float()")]
    return fixes.upcast(operand)


def cast_back_edits(ctx, node: ast.AST, source: ast.AST) -> list[Edit]:
    """Cast ``node``'s result back to ``source``'s dtype (:func:`amplint.fixes.cast_back`);
    nothing when the code already casts it."""
    if already_cast_back(ctx, node) or isinstance(node, ast.AugAssign):
        return []  # already cast, or an in-place division that keeps the target's dtype
    return fixes.cast_back(ctx, node, source)


def bounding_point(ctx, call: ast.AST) -> Optional[ast.AST]:
    """Where the result of a range-growing op (sum, norm, var, exp, pow) is bounded
    again: the division it feeds (``x / x.norm(...)``, ``s.sum(1) / n``), or the product
    with its ``rsqrt`` (``x * torch.rsqrt(x.pow(2).mean(-1) + eps)``), reached through
    arithmetic and shape / clamp / sqrt / mean calls.  None when the result flows
    elsewhere (a module call, a return, an assignment)."""
    node = call
    inverted = False
    for _ in range(12):
        parent = ctx.parent(node)
        if isinstance(parent, ast.AugAssign) and parent.value is node and isinstance(parent.op, ast.Div):
            return parent  # `w /= w.sum(...)`: the in-place result keeps w's dtype
        if isinstance(parent, ast.BinOp):
            if isinstance(parent.op, ast.Div):
                return parent
            if isinstance(parent.op, ast.Mult) and inverted:
                return parent
            if not isinstance(parent.op, (ast.Add, ast.Sub, ast.Mult)):
                return None
        elif isinstance(parent, ast.UnaryOp):
            pass
        elif isinstance(parent, ast.Attribute) and parent.value is node:
            outer = ctx.parent(parent)
            if not (isinstance(outer, ast.Call) and outer.func is parent):
                return None
            if parent.attr in _INVERTING:
                inverted = True
            elif parent.attr not in _PASS_THROUGH:
                return None
            parent = outer
        elif isinstance(parent, ast.Call) and parent.args and parent.args[0] is node:
            qn = ctx.qualname(parent.func) or ""
            short = qn.rsplit(".", 1)[-1]
            if not qn.startswith("torch.") or short not in (_PASS_THROUGH | _INVERTING):
                return None
            if short in _INVERTING:
                inverted = True
        else:
            return None
        node = parent
    return None




# --- hand-written softmax (AMP303; AMP302 stays quiet on its parts) ------------------------

class Handwritten:
    """A matched ``exp(x) / exp(x).sum(dim, keepdim=True)`` (``kind="softmax"``) or
    ``x - exp(x).sum(dim, keepdim=True).log()`` (``kind="log_softmax"``)."""

    def __init__(self, kind, node, operand, sum_call, parts, bindings):
        self.kind = kind
        self.node = node  # the BinOp
        self.operand = operand  # x
        self.sum_call = sum_call
        self.parts = parts  # ids of the exp / sum / log calls that belong to the pattern
        self.bindings = bindings  # [(name, assignment statement)] followed through names


def _follow(ctx, node, bindings):
    if isinstance(node, ast.Name):
        value = reaching_value(ctx, node)
        if value is not None:
            stmt = ctx.enclosing_statement(value)
            bindings.append((node.id, stmt))
            return value
    return node


def exp_operand(ctx, node, bindings=None) -> Optional[ast.AST]:
    """``x`` for ``torch.exp(x)`` / ``x.exp()`` (following a name to its assignment)."""
    bindings = [] if bindings is None else bindings
    node = _follow(ctx, node, bindings)
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "exp"):
        return None
    qn = ctx.qualname(node.func)
    if qn == "torch.exp" and len(node.args) == 1 and not node.keywords:
        return node.args[0]
    if qn is None and not node.args and not node.keywords:
        recv = node.func.value
        if isinstance(recv, ast.Name) and (recv.id == "self" or recv.id in ctx.imports):
            return None
        return recv
    return None


def _sum_of_exp(ctx, node, bindings):
    """(x, sum call, exp node) for ``exp(x).sum(...)`` / ``torch.sum(exp(x), ...)``."""
    node = _follow(ctx, node, bindings)
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "sum"):
        return None
    qn = ctx.qualname(node.func)
    if qn == "torch.sum" and node.args:
        inner = node.args[0]
    elif qn is None:
        inner = node.func.value
    else:
        return None
    exp_node = _follow(ctx, inner, bindings)
    x = exp_operand(ctx, exp_node, bindings)
    return None if x is None else (x, node, exp_node)


def _same(a, b) -> bool:
    return a is not None and b is not None and ast.dump(a) == ast.dump(b)


def match_handwritten(ctx, node: ast.AST) -> Optional[Handwritten]:
    if not isinstance(node, ast.BinOp):
        return None
    bindings: list = []
    if isinstance(node.op, ast.Div):
        left = _follow(ctx, node.left, bindings)
        x = exp_operand(ctx, left, bindings)
        if x is None:
            return None
        found = _sum_of_exp(ctx, node.right, bindings)
        if found is None or not _same(found[0], x):
            return None
        parts = {id(left), id(found[1]), id(found[2])}
        return Handwritten("softmax", node, x, found[1], parts, bindings)
    if isinstance(node.op, ast.Sub):
        right = _follow(ctx, node.right, bindings)
        if not (isinstance(right, ast.Call) and isinstance(right.func, ast.Attribute) and right.func.attr == "log"):
            return None
        qn = ctx.qualname(right.func)
        if qn == "torch.log" and len(right.args) == 1:
            inner = right.args[0]
        elif qn is None and not right.args:
            inner = right.func.value
        else:
            return None
        found = _sum_of_exp(ctx, inner, bindings)
        if found is None or not _same(found[0], node.left):
            return None
        parts = {id(right), id(found[1]), id(found[2])}
        return Handwritten("log_softmax", node, node.left, found[1], parts, bindings)
    return None


def handwritten_parts(ctx, node: ast.AST) -> set:
    """ids of every exp / sum / log call that is part of a hand-written softmax in the
    function enclosing ``node`` (computed once per function)."""
    func = ctx.enclosing_function(node)
    if func is None:
        return set()
    return ctx.get(HandwrittenParts).of(func)


class HandwrittenParts:
    """Per function: the nodes that are parts of a hand-written softmax / log-softmax
    (built for a function on first ask, kept for the file)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self._by_function: dict[int, set] = {}

    def of(self, func: ast.AST) -> set:
        cached = self._by_function.get(id(func))
        if cached is None:
            cached = self._by_function[id(func)] = set()
            for sub in subtree(func):
                if isinstance(sub, ast.BinOp) and isinstance(sub.op, (ast.Div, ast.Sub)):
                    found = match_handwritten(self.ctx, sub)
                    if found is not None:
                        cached |= found.parts
        return cached


def already_cast_back(ctx, node: ast.AST) -> bool:
    """``node`` is already followed by ``.to(...)`` / ``.type_as(...)`` / ``.half()``."""
    parent = ctx.parent(node)
    return (
        isinstance(parent, ast.Attribute) and parent.value is node
        and parent.attr in ("to", "type_as", "half", "bfloat16", "type")
        and isinstance(ctx.parent(parent), ast.Call)
    )


def in_handwritten(ctx, node: ast.AST) -> bool:
    """Whether the exp / sum call ``node`` belongs to a hand-written softmax: checks the
    enclosing expressions; walks the function only when ``node`` is assigned to a name."""
    child = node
    for anc in ctx.ancestors(node):
        if isinstance(anc, ast.stmt):
            if isinstance(anc, (ast.Assign, ast.AnnAssign)) and anc.value is child:
                return id(node) in handwritten_parts(ctx, node)
            return False
        if isinstance(anc, ast.BinOp) and isinstance(anc.op, (ast.Div, ast.Sub)):
            found = match_handwritten(ctx, anc)
            if found is not None and id(node) in found.parts:
                return True
        child = anc
    return False


def max_subtracted(ctx, operand) -> bool:
    """``x - x.max(...)`` / ``x - row_max`` somewhere in ``operand``: its ``exp`` cannot overflow."""
    for sub in ast.walk(operand):
        if not (isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Sub)):
            continue
        right = sub.right
        if isinstance(right, ast.Name):
            if "max" in right.id:
                return True
            right = reaching_value(ctx, right) or right
        for inner in ast.walk(right):
            if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in ("max", "amax", "logsumexp"):
                return True
            if isinstance(inner, ast.Attribute) and "max" in inner.attr:
                return True
    return False


# --- squares of hand-written norms and variances (AMP302) ----------------------------------

_REDUCERS = frozenset({"sum", "mean", "nansum", "nanmean"})


def squared_operand(ctx, node: ast.AST) -> Optional[ast.AST]:
    """``x`` for a square: ``x ** 2``, ``x * x`` (the same simple expression twice),
    ``torch.square(x)``; None otherwise (``x.pow(2)`` is AMP302's pow check)."""
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow):
            value = ctx.evaluate(node.right)
            if value is not None and value.value == 2:
                return node.left
        elif isinstance(node.op, ast.Mult) and is_simple(node.left) and _same(node.left, node.right):
            return node.left
        return None
    if isinstance(node, ast.Call) and node.args and ctx.qualname(node.func) == "torch.square":
        return node.args[0]
    return None


def _reduces(ctx, node: ast.AST) -> bool:
    """``node.sum(...)`` / ``node.mean(...)`` / ``torch.sum(node, ...)``."""
    parent = ctx.parent(node)
    if isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in _REDUCERS:
        outer = ctx.parent(parent)
        return isinstance(outer, ast.Call) and outer.func is parent and ctx.qualname(parent) is None
    if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node:
        return (ctx.qualname(parent.func) or "").rsplit(".", 1)[-1] in _REDUCERS and \
            (ctx.qualname(parent.func) or "").startswith("torch.")
    return False


def _next_use(ctx, stmt: ast.AST, name: str) -> Optional[ast.Name]:
    """The first load of ``name`` after ``stmt`` in its function."""
    func = ctx.enclosing_function(stmt)
    if func is None:
        return None
    uses = [n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
            and (n.lineno, n.col_offset) > (stmt.end_lineno, stmt.end_col_offset)]
    return min(uses, key=lambda n: (n.lineno, n.col_offset), default=None)


def _result_discarded(ctx, call: ast.AST) -> bool:
    """``ms = torch.mean(torch.square(x), -1)`` whose every use is a statement with no
    effect (``x * torch.rsqrt(ms + eps)`` on a line of its own, transformers' MegaRMSNorm):
    the statistic reaches no output, so its overflow cannot either."""
    stmt = ctx.parent(call)
    if not (isinstance(stmt, ast.Assign) and stmt.value is call and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)):
        return False
    func = ctx.enclosing_function(stmt)
    if func is None:
        return False
    name = stmt.targets[0].id
    uses = [n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]

    def no_effect(use: ast.AST) -> bool:
        node = use
        while node is not None and not isinstance(node, ast.stmt):
            node = ctx.parent(node)
        return isinstance(node, ast.Expr) and isinstance(node.value, ast.BinOp)

    return bool(uses) and all(no_effect(u) for u in uses)


def _self_attribute(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self"


def square_reduced(ctx, node: ast.AST) -> bool:
    """The square ``node`` is summed or averaged: directly (``(x ** 2).mean(-1)``,
    ``torch.sum(x * x, 1)``), through a name (``d = x ** 2; torch.sum(d, -1)``) or added to
    another tensor's square (``real ** 2 + imag ** 2``, a magnitude); not where the
    statistic is only used by statements with no effect."""
    if _reduces(ctx, node):
        parent = ctx.parent(node)
        return not _result_discarded(ctx, ctx.parent(parent) if isinstance(parent, ast.Attribute) else parent)
    parent = ctx.parent(node)
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add):  # `real ** 2 + imag ** 2`: a 2-term norm
        other = parent.right if parent.left is node else parent.left
        # of tensor components; `sigma ** 2 + self.sigma_data ** 2` mixes in a hyperparameter
        return all(o is not None and not isinstance(o, ast.Constant) and not _self_attribute(o)
                   for o in (squared_operand(ctx, node), squared_operand(ctx, other)))
    stmt = ctx.parent(node)
    if isinstance(stmt, ast.Assign) and stmt.value is node and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        use = _next_use(ctx, stmt, stmt.targets[0].id)
        return use is not None and _reduces(ctx, use)
    return False


def bounding_point_through_names(ctx, node: ast.AST) -> Optional[ast.AST]:
    """:func:`bounding_point`, also across one assignment: ``s = (x - u).pow(2).mean(-1)``
    then ``(x - u) / torch.sqrt(s + eps)`` bounds ``s`` at the division."""
    found = bounding_point(ctx, node)
    if found is not None:
        return found
    top = node
    for _ in range(8):
        parent = ctx.parent(top)
        if isinstance(parent, ast.Attribute) and parent.value is top and parent.attr in _PASS_THROUGH | _REDUCERS:
            outer = ctx.parent(parent)
            if isinstance(outer, ast.Call) and outer.func is parent:
                top = outer
                continue
        if isinstance(parent, ast.Call) and parent.args and parent.args[0] is top and \
                (ctx.qualname(parent.func) or "").rsplit(".", 1)[-1] in _REDUCERS:
            top = parent
            continue
        break
    stmt = ctx.parent(top)
    if not (isinstance(stmt, ast.Assign) and stmt.value is top and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)):
        return None
    name = stmt.targets[0].id
    if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(top)):
        return None  # `d = torch.sum(d, -1)`: the operand's name now holds the fp32 result
    use = _next_use(ctx, stmt, name)
    if use is None:
        return None
    point = bounding_point(ctx, use)
    # only a statistic in the denominator is bounded there: `(x - u) / torch.sqrt(s + eps)`
    if isinstance(point, ast.BinOp) and any(n is use for n in ast.walk(point.right)):
        return point
    return None


# --- the module-style softmax fix (AMP301) --------------------------------------------------

def find_super_init(ctx, init: ast.AST):
    """The statement in ``__init__`` that initialises the base module: ``super().__init__()``,
    ``super(Cls, self).__init__()``, ``nn.Module.__init__(self)``, ``Base.__init__(self, ...)``."""
    for stmt in init.body:
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute)
            and stmt.value.func.attr == "__init__"
        ):
            return stmt
    return None


def class_self_assignments(cls: ast.ClassDef, self_names=("self",)) -> dict[str, list[ast.AST]]:
    """attribute name -> values assigned to ``self.<name>`` anywhere in the class's methods."""
    out: dict[str, list[ast.AST]] = {}
    for node in ast.walk(cls):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in self_names:
                    out.setdefault(t.attr, []).append(node.value)
        elif isinstance(node, ast.AugAssign):
            t = node.target
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in self_names:
                out.setdefault(t.attr, []).append(None)
    return out


def literal_int(node) -> Optional[str]:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return repr(node.value)
    if (
        isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant) and type(node.operand.value) is int
    ):
        return repr(-node.operand.value)
    return None


def bounded_reduction(ctx, call: ast.Call, attr: str, operand: ast.AST, is_method: bool) -> bool:
    """Values the file shows bounded by 1 (``ctx.magnitude_bound``: probabilities, unit
    vectors): a product stays in [-1, 1], and a sum along given dimensions reaches 65504 only
    along more than 65504 elements; a full ``.sum()`` is still reported."""
    if attr not in ("sum", "nansum", "cumsum", "prod", "cumprod"):
        return False
    bound = ctx.magnitude_bound(operand)
    if bound is None or bound > 1:
        return False
    if attr in ("prod", "cumprod"):
        return True
    return argument(call, "dim", 0 if is_method else 1) is not None


def convex_combination(ctx, call: ast.Call, operand: ast.AST, is_method: bool) -> bool:
    """A sum along given dimensions of ``weights * values`` whose weights the file shows
    sum to 1 (softmax, ``x / x.sum()``: :class:`amplint.semantic.weights.NormalisedWeights`):
    a weighted average, no larger than the largest value."""
    from amplint.semantic.weights import NormalisedWeights

    if argument(call, "dim", 0 if is_method else 1) is None:
        return False
    return ctx.get(NormalisedWeights).weighted_product(operand)


def _stacked(ctx, expr: ast.AST, depth: int = 0) -> Optional[ast.Call]:
    """The ``torch.stack(...)`` call ``expr`` is, through names."""
    if depth > 4:
        return None
    if isinstance(expr, ast.Name):
        value = reaching_value(ctx, expr)
        return None if value is None else _stacked(ctx, value, depth + 1)
    if isinstance(expr, ast.Call) and ctx.qualname(expr.func) == "torch.stack":
        return expr
    return None


def sum_of_stacked_terms(ctx, call: ast.Call, operand: ast.AST, is_method: bool) -> bool:
    """``torch.stack(terms, dim=d).sum(d)``: the elementwise sum of the listed tensors
    (parallel branches, a few steps), no more a long reduction than ``a + b + c``."""
    stack = _stacked(ctx, operand)
    dim = argument(call, "dim", 0 if is_method else 1)
    if stack is None or dim is None:
        return False
    stacked_dim = argument(stack, "dim", 1)
    if stacked_dim is None:
        stacked_dim = ast.Constant(0)
    if ast.dump(stacked_dim) == ast.dump(dim):
        return True
    a, b = ctx.evaluate(stacked_dim), ctx.evaluate(dim)
    return a is not None and b is not None and a.value == b.value


def sum_of_few_terms(ctx, call: ast.Call, operand: ast.AST, is_method: bool) -> bool:
    """A sum no longer or larger than a few terms added by hand: a weighted average, a
    sum along a stack's or a short view's own dimension, a sum of looked-up table rows
    (:func:`amplint.analysis.table_rows.sum_of_table_rows`)."""
    from amplint.analysis.table_rows import sum_of_table_rows

    return (convex_combination(ctx, call, operand, is_method) or sum_of_stacked_terms(ctx, call, operand, is_method)
            or sum_over_short_view_dim(ctx, call, operand, is_method)
            or sum_of_table_rows(ctx, call, operand, is_method))


#: a dimension this short makes a sum as harmless as ``a + b`` (LSTM directions, radix splits)
_FEW = 16


def _small_size(ctx, expr: ast.AST, depth: int = 0) -> bool:
    if depth > 3:
        return False
    value = ctx.evaluate(expr)
    if value is not None:
        return 0 < value.value <= _FEW
    if isinstance(expr, ast.IfExp):  # `2 if bidirectional else 1`
        return _small_size(ctx, expr.body, depth + 1) and _small_size(ctx, expr.orelse, depth + 1)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        cls = ctx.enclosing_class(expr)
        values = [] if cls is None else [
            a.value for klass in (cls, *ctx.base_classes(cls)) for stmt in klass.body
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
            for a in ctx.self_assignments(stmt).get(expr.attr, ())]
        return bool(values) and all(v is not None and _small_size(ctx, v, depth + 1) for v in values)
    return False


def sum_over_short_view_dim(ctx, call: ast.Call, operand: ast.AST, is_method: bool) -> bool:
    """``h.view(-1, self.dirs, bsz, hsz).sum(1)``: the summed dimension is one a ``view`` /
    ``reshape`` just made, of a size the file shows is at most 16."""
    dim = ctx.evaluate(argument(call, "dim", 0 if is_method else 1) or ast.Constant(None))
    shaped = operand
    for _ in range(4):
        if isinstance(shaped, ast.Name):
            shaped = reaching_value(ctx, shaped)
        elif (isinstance(shaped, ast.Call) and isinstance(shaped.func, ast.Attribute)
              and shaped.func.attr == "contiguous"):
            shaped = shaped.func.value
        else:
            break
    if dim is None or not (isinstance(shaped, ast.Call) and isinstance(shaped.func, ast.Attribute)
                           and shaped.func.attr in ("view", "reshape") and not ctx.qualname(shaped.func)):
        return False
    sizes = shaped.args[0].elts if len(shaped.args) == 1 and isinstance(shaped.args[0], ast.Tuple) else shaped.args
    if any(isinstance(s, ast.Starred) for s in sizes) or not isinstance(dim.value, int):
        return False
    index = int(dim.value)
    if not -len(sizes) <= index < len(sizes):
        return False
    return _small_size(ctx, sizes[index])


def upper_bound(ctx, expr: ast.AST, depth: int = 0) -> Optional[float]:
    """A constant the file clamps ``expr`` below (``x.clamp(max=c)``, ``torch.clamp(x, max=c)``,
    ``x.clamp_max(c)``), through names: ``exp`` of it is at most ``exp(c)``."""
    if depth > 4:
        return None
    if isinstance(expr, ast.Name):
        value = reaching_value(ctx, expr)
        return None if value is None else upper_bound(ctx, value, depth + 1)
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)):
        return None
    qualname = ctx.qualname(expr.func) or ""
    attr = expr.func.attr
    if qualname in ("torch.clamp", "torch.clip") or not qualname and attr in ("clamp", "clip", "clamp_"):
        limit = argument(expr, "max", 2 if qualname else 1)
    elif not qualname and attr == "clamp_max":
        limit = argument(expr, "max", 0)
    else:
        return None
    value = ctx.evaluate(limit) if limit is not None else None
    return None if value is None else float(value.value)
