"""Dtype literals and the dtype checks that keep code out of half.

``torch.float16`` / ``torch.half`` / ``from torch import half`` name the same dtype
(:func:`dtype_literal`); ``if x.dtype == torch.float16: ... else: ...`` and
``-1e4 if x.dtype == torch.half else -1e9`` decide which branch runs in half
(:func:`dtype_branch`, also ``ctx.branch_runs_in_half``).  Depends on nothing but
:mod:`ast`, so the shared context and every rule family can use it.
"""
from __future__ import annotations

import ast
import dataclasses
import enum
import re
from typing import Any, Optional

from .amp import policy
from .analysis.calls import argument
from .bindings import parent_of, subtree
from .numerics import BY_DTYPE, FORMATS

#: torch dtype attribute -> canonical name
DTYPE_ALIASES = {
    "float16": "float16", "half": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32", "float": "float32",
    "float64": "float64", "double": "float64",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
    "float8_e4m3fnuz": "float8_e4m3fn", "float8_e5m2fnuz": "float8_e5m2",
    "complex64": "complex64", "cfloat": "complex64", "complex128": "complex128", "cdouble": "complex128",
    "complex32": "complex32", "chalf": "complex32",
    "int8": "int8", "uint8": "uint8", "int16": "int16", "int32": "int32", "int": "int32",
    "int64": "int64", "long": "int64", "bool": "bool",
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


def full_precision_attribute(ctx, attr: ast.Attribute) -> Optional[DtypeClass]:
    """``self.dtype`` that the class only ever sets to fp32 / fp64: a literal, or a
    parameter the same method asserts is one (audiocraft's rotary embedding: ``assert dtype
    in [torch.float64, torch.float32]; self.dtype = dtype``).  A module has no ``dtype`` of
    its own, so without such an assignment it is the activations' (None here)."""
    if not (attr.attr == "dtype" or attr.attr.endswith("_dtype")):
        return None
    cls = ctx.enclosing_class(attr)
    if cls is None:
        return None
    found = set()
    for klass in (cls, *ctx.base_classes(cls)):
        for method in klass.body:
            if method.__class__ not in (ast.FunctionDef, ast.AsyncFunctionDef):
                continue
            for stmt in ctx.self_assignments(method).get(attr.attr, ()):
                value = stmt.value
                names = _dtype_set(ctx, value)
                if names is None and value.__class__ is ast.Name:
                    names = _asserted_dtypes(ctx, method, value.id)
                if not names or not names <= {"float32", "float64"}:
                    return None
                found |= names
    if not found:
        return None
    return DtypeClass.FP32 if "float32" in found else DtypeClass.FP64


def promoted_to_full_precision(ctx, value: Optional[ast.AST]) -> bool:
    """``torch.promote_types(t.dtype, torch.float32)`` or ``functools.reduce(torch.promote_types,
    (t.dtype, freqs.dtype, torch.float32))``: at least fp32, whatever the other dtypes are."""
    if value.__class__ is not ast.Call:
        return False
    name = ctx.qualname(value.func) or ""
    if name in ("functools.reduce", "reduce") or (value.func.__class__ is ast.Name and value.func.id == "reduce"):
        if len(value.args) < 2 or (ctx.qualname(value.args[0]) or "") != "torch.promote_types":
            return False
        operands = value.args[1].elts if value.args[1].__class__ in (ast.Tuple, ast.List) else []
    elif name == "torch.promote_types":
        operands = value.args
    else:
        return False
    return any(dtype_literal(ctx, o) in ("float32", "float64") for o in operands)


def _asserted_dtypes(ctx, method: ast.AST, name: str) -> Optional[frozenset]:
    """The dtypes ``assert name in (...)`` / ``assert name == torch.float32`` at the top
    level of ``method`` allows."""
    for stmt in method.body:
        test = stmt.test if stmt.__class__ is ast.Assert else None
        if (test.__class__ is ast.Compare and len(test.ops) == 1 and test.ops[0].__class__ in (ast.In, ast.Eq)
                and test.left.__class__ is ast.Name and test.left.id == name):
            return _dtype_set(ctx, test.comparators[0])
    return None


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
    fmt = FORMATS.get(target) if target else ctx.format
    if fmt is None:
        return None
    dtypes = fmt.dtypes
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
_BLOCK_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


def _bind(out, target, stmt, value) -> None:
    if isinstance(target, ast.Name):
        out.setdefault(target.id, []).append((stmt.lineno, stmt.col_offset, value, stmt))
    elif isinstance(target, ast.Starred):
        _bind(out, target.value, stmt, None)
    elif isinstance(target, (ast.Tuple, ast.List)):  # `c.real, c.imag = ...` binds no name
        for sub in target.elts:
            _bind(out, sub, stmt, None)


class Assignments:
    """Per function, built on first ask and kept for the file: name -> [(line, col,
    assigned value or None when rebound otherwise, binding statement)]."""

    def __init__(self, ctx):
        self._by_function: dict[int, dict[str, list[tuple]]] = {}

    def of(self, func: ast.AST) -> dict[str, list[tuple]]:
        found = self._by_function.get(id(func))
        if found is None:
            found = self._by_function[id(func)] = _function_assignments(func)
        return found


def _assignments(ctx, func: ast.AST) -> dict[str, list[tuple]]:
    return ctx.get(Assignments).of(func)


def _function_assignments(func: ast.AST) -> dict[str, list[tuple]]:
    """See :class:`Assignments`.  Walks statements only (not expressions): cheap on long
    ``forward`` methods."""
    out: dict[str, list[tuple]] = {}
    stack = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.Assign):
            for target in node.targets:
                _bind(out, target, node, node.value if isinstance(target, ast.Name) else None)
        elif isinstance(node, ast.AnnAssign):
            _bind(out, node.target, node, node.value)
        elif isinstance(node, ast.AugAssign):
            _bind(out, node.target, node, None)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            _bind(out, node.target, node, None)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    _bind(out, ast.Tuple([item.optional_vars]), node, None)
        for field in _BLOCK_FIELDS:
            block = getattr(node, field, None)
            if block:
                stack.extend(block)
    for entries in out.values():
        entries.sort(key=lambda e: (e[0], e[1]))
    return out


def reaching_value(ctx, name: ast.Name) -> Optional[ast.AST]:
    """The value of the last plain assignment to ``name`` before its use, in the same
    function and at the same or an enclosing block level's line order (None when the
    name is a parameter, rebound by a loop, or unknown)."""
    func = ctx.enclosing_function(name)
    if func is None:
        return None
    entries = _assignments(ctx, func).get(name.id)
    if not entries:
        return None
    before = [e for e in entries if (e[0], e[1]) < (name.lineno, name.col_offset)]
    stmt = ctx.enclosing_statement(name)
    if stmt is not None:  # `x = x.float()` -- the use on the right sees the old value
        before = [e for e in before if e[0] < stmt.lineno or (e[0], e[1]) < (stmt.lineno, stmt.col_offset)]
    if not before:
        return None
    return before[-1][2]


def assignments_between(ctx, name: str, func: ast.AST, start: int, end: int) -> bool:
    """Whether ``name`` is (re)bound in ``func`` on lines strictly between start and end."""
    return any(start < e[0] < end for e in _assignments(ctx, func).get(name, ()))



# --- dtype flow: which dtype class each tensor expression has ---------------------------


class DtypeClass(str, enum.Enum):
    """What an expression holds, as far as the file shows.  ``HALF``: the target's low
    precision (fp16 / bf16); ``SCALAR``: a Python number (it never promotes a tensor);
    ``UNKNOWN``: an activation whose dtype the file does not show (may be half)."""

    HALF = "half"
    FP32 = "fp32"
    FP64 = "fp64"
    INTEGER = "integer"
    BOOL = "bool"
    SCALAR = "scalar"
    #: a tensor from the data loader (a loss's ``target``): fp32 or integer, never half;
    #: it promotes like an integer tensor (half * a long target is still half)
    INPUT = "input"
    UNKNOWN = "unknown"

    @property
    def known_not_half(self) -> bool:
        """An fp32 / fp64 / integer / bool tensor: nothing about half applies to it."""
        return self in _NOT_HALF


_NOT_HALF = frozenset({DtypeClass.FP32, DtypeClass.FP64, DtypeClass.INTEGER, DtypeClass.BOOL, DtypeClass.INPUT})
_FLOATING = frozenset({DtypeClass.HALF, DtypeClass.FP32, DtypeClass.FP64})
#: canonical dtype name -> class
_CLASS_OF_DTYPE = {
    "float16": DtypeClass.HALF, "bfloat16": DtypeClass.HALF,
    "float8_e4m3fn": DtypeClass.HALF, "float8_e5m2": DtypeClass.HALF,
    "float32": DtypeClass.FP32, "float64": DtypeClass.FP64, "bool": DtypeClass.BOOL,
    # complex: the class of its real and imaginary parts (an FFT of a complex64 tensor is fp32)
    "complex64": DtypeClass.FP32, "complex128": DtypeClass.FP64, "complex32": DtypeClass.HALF,
    "int8": DtypeClass.INTEGER, "uint8": DtypeClass.INTEGER, "int16": DtypeClass.INTEGER,
    "int32": DtypeClass.INTEGER, "int64": DtypeClass.INTEGER,
}
_CAST_METHODS = {
    "float": DtypeClass.FP32, "double": DtypeClass.FP64, "half": DtypeClass.HALF,
    "bfloat16": DtypeClass.HALF, "long": DtypeClass.INTEGER, "int": DtypeClass.INTEGER,
    "short": DtypeClass.INTEGER, "byte": DtypeClass.INTEGER, "char": DtypeClass.INTEGER,
    "bool": DtypeClass.BOOL,
}
#: tensor methods / torch functions whose result has their operand's dtype
_SAME_DTYPE = frozenset(
    "view reshape transpose permute contiguous unsqueeze squeeze flatten unflatten expand expand_as "
    "repeat repeat_interleave masked_fill masked_fill_ clamp clamp_ clamp_min clamp_max narrow select "
    "chunk split t detach detach_ clone flip roll gather index_select take_along_dim tril triu diagonal "
    "diag_embed abs abs_ neg max min amax amin cummax sort topk sum nansum cumsum prod cumprod "
    "add sub mul add_ sub_ mul_ relu relu_ pad unfold fold view_as reshape_as movedim swapaxes "
    "to_dense cpu cuda pin_memory requires_grad_ zero_ fill_ masked_scatter scatter scatter_add "
    "index_add index_fill where rot90 broadcast_to tile cross".split()
)
#: float-valued maths: an integer operand gives the default float (fp32)
_FLOAT_MATH = frozenset(
    "exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan sinh cosh tanh sigmoid erf erfinv "
    "reciprocal mean var std norm softmax log_softmax softmin logsumexp div true_divide pow square "
    "atan atan2 asin acos floor ceil round trunc frac lerp logit softplus gelu silu".split()
)
_BOOL_METHODS = frozenset(
    "eq ne gt lt ge le isnan isinf isfinite isneginf isposinf logical_not logical_and logical_or "
    "logical_xor any all isclose signbit".split()
)
_INT_RESULT = frozenset("argmax argmin argsort nonzero bucketize searchsorted count_nonzero multinomial".split())
#: calls that give a Python number, not a tensor
_SCALAR_METHODS = frozenset("item size dim numel tolist element_size nelement".split())
_SCALAR_BUILTINS = frozenset("int float len abs min max round sum pow".split())
#: factories that make the default float dtype (fp32) unless given ``dtype=``
_FLOAT_FACTORIES = frozenset(
    "zeros ones empty full rand randn linspace logspace eye normal FloatTensor hann_window "
    "hamming_window blackman_window kaiser_window bartlett_window Tensor".split()
)
_LIKE_FACTORIES = frozenset("zeros_like ones_like empty_like full_like rand_like randn_like".split())
_NEW_FACTORIES = frozenset("new_zeros new_ones new_empty new_full new_tensor".split())
_INT_FACTORIES = frozenset("randint randperm LongTensor IntTensor".split())
#: forward parameters that hold data from the loader, not activations (fp32 unless O2 casts inputs)
#: parameters that hold sequence lengths (integer tensors or plain ints)
_LENGTHS_PARAMETER = re.compile(r"^(\w+_)?(lengths?|lens|seq_lens?)$")
_DATA_PARAMETERS = frozenset(
    "target targets tgt y_true gt labels label ref reference".split()
    # coordinates of points / atoms / residues: geometry from the loader (torch-geometric's
    # `pos`, EGNN's `coors`), not activations; their norms and dot products stay fp32 at O1
    + "pos coords coors coordinates xyz".split())
_AUTOCAST = frozenset({"torch.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast", "torch.amp.autocast"})
_NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode"})
#: torch layers whose ``weight`` / ``bias`` a subclass inherits as parameters
_TORCH_WEIGHTED_LAYER = re.compile(
    r"torch\.nn\.(Linear|Bilinear|Conv[123]d|ConvTranspose[123]d|Embedding|LayerNorm|GroupNorm|BatchNorm[123]d)$")
#: ops returning two tensors in the operand's dtype / (values, integer indices)
_SAME_DTYPE_PAIRS = frozenset({"std_mean", "var_mean", "aminmax"})
_VALUES_INDICES = frozenset({"max", "min", "sort", "topk", "kthvalue", "median", "mode", "cummax", "cummin"})
_CUSTOM_FWD = frozenset({"torch.cuda.amp.custom_fwd", "torch.amp.custom_fwd"})
_PARAMETER = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.ParameterList",
                        "torch.nn.ParameterDict"})
#: einops functions: the result has their first argument's dtype
_EINOPS = frozenset({"einops.rearrange", "einops.reduce", "einops.repeat"})
_DEVICES = {"cuda": ("cuda",), "cpu": ("cpu",), "any": ("cuda", "cpu")}
_IN_PROGRESS = object()


def _cached(table: dict, key, compute) -> "DtypeClass":
    """``table[key]``, computing it once with ``compute()``; a key asked again while it is
    being computed (a cycle: ``x = f(x)`` in a loop, mutually recursive helpers) is UNKNOWN."""
    found = table.get(key)
    if found is _IN_PROGRESS:
        return DtypeClass.UNKNOWN
    if found is not None:
        return found
    table[key] = _IN_PROGRESS
    result = table[key] = compute()
    return result


def join(a: DtypeClass, b: DtypeClass) -> DtypeClass:
    """The class of a value that is one of ``a`` / ``b`` (two branches)."""
    if a is b:
        return a
    if {a, b} <= {DtypeClass.FP32, DtypeClass.FP64}:
        return DtypeClass.FP32
    return DtypeClass.UNKNOWN


def join_setting(a: DtypeClass, b: DtypeClass) -> DtypeClass:
    """The class of a module attribute set to one of ``a`` / ``b`` by its configuration:
    a number or a weight (``self.scale = d ** -0.5`` or ``nn.Parameter(...)`` when learned)
    is never an activation, so a Python number joins as the tensor's class."""
    if DtypeClass.SCALAR in (a, b) and a is not b:
        other = b if a is DtypeClass.SCALAR else a
        if other in (DtypeClass.FP32, DtypeClass.FP64, DtypeClass.HALF):
            return other
    return join(a, b)


def promote(a: DtypeClass, b: DtypeClass, true_division: bool = False) -> DtypeClass:
    """torch's type promotion of ``a op b`` (tensors of one or more dimensions; a
    Python number never raises a float tensor's dtype)."""
    S, I, B, U = DtypeClass.SCALAR, DtypeClass.INTEGER, DtypeClass.BOOL, DtypeClass.UNKNOWN
    if a is S and b is S:
        return S
    if DtypeClass.INPUT in (a, b):
        other = b if a is DtypeClass.INPUT else a
        return DtypeClass.INPUT if other in (S, I, B, DtypeClass.INPUT) else other
    if b is S:
        a, b = b, a
    if a is S:  # scalar op tensor: the tensor's float dtype; an integer tensor becomes fp32 by `/`
        if b in (I, B):
            return DtypeClass.FP32 if true_division else (U if b is B else I)
        return b
    if DtypeClass.FP64 in (a, b):
        return DtypeClass.FP64
    if DtypeClass.FP32 in (a, b):  # half (or unknown float) op fp32 -> fp32
        return DtypeClass.FP32
    if U in (a, b):
        return U
    if DtypeClass.HALF in (a, b):
        return DtypeClass.HALF
    if true_division:
        return DtypeClass.FP32
    return I


class DtypeFlow:
    """A small abstract interpretation over one file: the :class:`DtypeClass` of an
    expression under the file's settings (target, opt level, engine, device).  Lazy:
    each expression is computed on first request and cached by node; names follow their
    reaching assignment, ``self.x`` its assignment in the class (``__init__`` buffers and
    parameters), calls to functions of the file their return statements, and a helper's
    parameters the arguments of its calls in the file."""

    def __init__(self, ctx, policy: bool = True, opt_level: Optional[str] = None, borrowed_activations: bool = False):
        self.ctx = ctx
        #: False: ignore the policy's fp32 upcasts (fp32 only where the code asks for it;
        #: its half casts of GEMMs still apply); None: no O1 policy at all (what the code
        #: itself makes half, :class:`PrecisionFacts`)
        self.upcasts = bool(policy)
        self.autocast = policy is not None
        #: a dtype borrowed from a model tensor the file cannot follow (``.to(x.dtype)``,
        #: ``dtype=dtype``) is the activation dtype: fp32 under O0, half from O1
        self.borrowed_activations = borrowed_activations
        settings = ctx.settings
        self.opt_level = opt_level or settings.opt_level
        self.engine = settings.engine
        self.devices = _DEVICES.get(settings.device, ("cuda", "cpu"))
        self.pure_half = self.opt_level in ("O2", "O3")
        self._memo: dict[int, Any] = {}
        self._returns: dict[int, Any] = {}
        self._params: dict[tuple[int, str], Any] = {}
        self._attrs: dict[tuple[int, str], Any] = {}
        self._policy_cache: dict[str, Optional[str]] = {}
        self._call_sites: Optional[dict[str, list[ast.Call]]] = None
        self._alias_names: Optional[set] = None

    # --- public ---------------------------------------------------------------------

    def of(self, node: Optional[ast.AST]) -> DtypeClass:
        if node is None:
            return DtypeClass.UNKNOWN
        return _cached(self._memo, id(node), lambda: self._expr_or_unknown(node))

    def _expr_or_unknown(self, node: ast.AST) -> DtypeClass:
        try:
            return self._expr(node)
        except RecursionError:
            return DtypeClass.UNKNOWN

    def literal(self, expr: Optional[ast.AST]) -> Optional[DtypeClass]:
        """``torch.float32`` -> FP32; ``x.dtype`` -> the class of ``x``; None otherwise."""
        if expr is None:
            return None
        name = dtype_literal(self.ctx, expr)
        if name is not None:
            return _CLASS_OF_DTYPE.get(name, DtypeClass.UNKNOWN)
        if expr.__class__ is ast.Attribute and expr.value.__class__ is ast.Name and expr.value.id == "self":
            fixed = full_precision_attribute(self.ctx, expr)
            if fixed is not None:
                return fixed
        if expr.__class__ is ast.Name and self.ctx.enclosing_function(expr) is not None:
            if promoted_to_full_precision(self.ctx, reaching_value(self.ctx, expr)):
                return DtypeClass.FP32  # dtype = reduce(torch.promote_types, (t.dtype, torch.float32))
        if isinstance(expr, ast.Attribute) and expr.attr == "dtype":
            return self._borrowed(expr.value)
        if self.borrowed_activations and is_dtype_probe(expr):
            return self._borrowed(expr)  # `dtype=dtype`: the caller's activation dtype
        return None

    def _borrowed(self, probe: ast.AST) -> DtypeClass:
        """The class of a tensor whose dtype is borrowed (``y`` in ``x.to(y.dtype)``)."""
        got = self.of(probe)
        if (got is DtypeClass.UNKNOWN and self.borrowed_activations and isinstance(probe, (ast.Name, ast.Attribute))
                and not _device_like(probe) and self.ctx.in_model_code(probe) and not self._submodule_weight(probe)):
            return DtypeClass.FP32 if self.opt_level == "O0" else DtypeClass.HALF
        return got

    def _submodule_weight(self, probe: ast.AST) -> bool:
        """``self.embed.weight`` (or a name bound to it): a parameter, fp32 until the model
        is cast, not an activation whose dtype autocast makes half."""
        if isinstance(probe, ast.Name) and self.ctx.enclosing_function(probe) is not None:
            probe = reaching_value(self.ctx, probe)
        return (isinstance(probe, ast.Attribute) and probe.attr in ("weight", "bias")
                and isinstance(probe.value, ast.Attribute) and isinstance(probe.value.value, ast.Name)
                and probe.value.value.id == "self")

    # --- expressions ----------------------------------------------------------------

    def _expr(self, node: ast.AST) -> DtypeClass:
        kind = node.__class__
        if kind is ast.Constant:
            v = node.value
            return DtypeClass.SCALAR if isinstance(v, (int, float, complex)) and v is not None else DtypeClass.UNKNOWN
        if kind is ast.Name:
            return self._name(node)
        if kind is ast.Attribute:
            return self._attribute(node)
        if kind is ast.Call:
            return self._call(node)
        if kind is ast.BinOp:
            left, right = self.of(node.left), self.of(node.right)
            op = node.op.__class__
            if op in (ast.BitAnd, ast.BitOr, ast.BitXor) and DtypeClass.BOOL in (left, right):
                return DtypeClass.BOOL
            if op in (ast.Mult, ast.Add, ast.Sub, ast.Pow) and {left, right} == {DtypeClass.INTEGER, DtypeClass.SCALAR}:
                scalar = node.right if right is DtypeClass.SCALAR else node.left
                if self._float_scalar(scalar):
                    return DtypeClass.FP32  # arange(n) * -log(10000) / n: the default float
            result = promote(left, right, op is ast.Div)
            if (op is ast.MatMult and self.opt_level == "O1" and self.autocast and self._policy("torch.matmul") == "half"
                    and not self._in_disabled_autocast(node)):
                return DtypeClass.HALF
            return result
        if kind is ast.UnaryOp:
            if node.op.__class__ is ast.Not:
                return DtypeClass.BOOL
            return self.of(node.operand)
        if kind is ast.Compare:
            return DtypeClass.BOOL
        if kind is ast.Subscript:
            base = self.of(node.value)
            return base if base is not DtypeClass.SCALAR else DtypeClass.UNKNOWN
        if kind is ast.IfExp:
            return join(self.of(node.body), self.of(node.orelse))
        if kind is ast.Starred:
            return self.of(node.value)
        return DtypeClass.UNKNOWN

    def _float_scalar(self, expr: ast.AST, depth: int = 0) -> bool:
        """Whether a Python-number expression is a float (``-math.log(1e4) / d``)."""
        if depth > 6:
            return False
        if isinstance(expr, ast.Constant):
            return isinstance(expr.value, float)
        if isinstance(expr, ast.UnaryOp):
            return self._float_scalar(expr.operand, depth + 1)
        if isinstance(expr, ast.BinOp):
            return isinstance(expr.op, ast.Div) or any(self._float_scalar(e, depth + 1) for e in (expr.left, expr.right))
        if isinstance(expr, ast.Call):
            qn = self.ctx.qualname(expr.func) or ""
            return qn.startswith("math.") and qn not in ("math.floor", "math.ceil", "math.prod", "math.comb", "math.gcd") or qn == "float"
        if isinstance(expr, ast.Name):
            value = reaching_value(self.ctx, expr)
            if value is not None:
                return self._float_scalar(value, depth + 1)
        found = self.ctx.evaluate(expr)
        return found is not None and isinstance(getattr(found, "value", None), float)

    def _name(self, node: ast.Name) -> DtypeClass:
        ctx = self.ctx
        for anc in ctx.ancestors(node):  # `[c.sum(-1) for c in t.chunk(n)]`, `[p for p in self.params]`
            if isinstance(anc, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
                for gen in anc.generators:
                    if isinstance(gen.target, ast.Name) and gen.target.id == node.id:
                        source = gen.iter
                        if (isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute)
                                and source.func.attr in ("chunk", "split", "unbind", "tensor_split")):
                            return self.of(source.func.value)
                        found = self.of(source)
                        return found if found is not DtypeClass.SCALAR else DtypeClass.UNKNOWN
            elif isinstance(anc, (ast.stmt, ast.Lambda)):
                break
        func = ctx.enclosing_function(node)
        if func is None:
            return self._module_name(node.id)
        entries = _assignments(self.ctx, func).get(node.id)
        if entries:
            found = self._reaching(node, func, entries)
            if found is DtypeClass.UNKNOWN and _used_as_bool(ctx, func, node.id):
                return DtypeClass.BOOL  # `m = rearrange(mask, ...)` used as `~m`: a bool mask
            if found is not None:
                return found
        args = func.args
        params = args.posonlyargs + args.args + args.kwonlyargs
        if any(p.arg == node.id for p in params):
            return self._parameter(func, node.id)
        if node.id in ctx.imports:
            return DtypeClass.UNKNOWN
        outer = ctx.enclosing_function(func)  # a closure variable
        if outer is not None:
            values = [v for *_, v in _assignments(self.ctx, outer).get(node.id, ())]
            if len(values) == 1 and values[0] is not None:
                return self.of(values[0])
            if not values and any(p.arg == node.id for p in outer.args.args + outer.args.kwonlyargs):
                return self._parameter(outer, node.id)
            return DtypeClass.UNKNOWN
        return self._module_name(node.id)

    def _reaching(self, node, func, entries) -> Optional[DtypeClass]:
        """The class of the assignments to ``node`` that may reach it (the last one before
        it, joined with earlier ones while the last sits in a block that may not run)."""
        ctx = self.ctx
        stmt = ctx.enclosing_statement(node)
        pos = (stmt.lineno, stmt.col_offset) if stmt is not None else (node.lineno, node.col_offset)
        before = [e for e in entries if (e[0], e[1]) < pos]
        if not before:
            return None
        result: Optional[DtypeClass] = None
        for line, col, value, target_stmt in reversed(before):
            if value is None:
                cls = self._rebound(target_stmt, node.id)
            else:
                cls = self.of(value)
            result = cls if result is None else join(result, cls)
            if result is DtypeClass.UNKNOWN or _dominates(ctx, target_stmt, stmt):
                break
        return result

    def _rebound(self, stmt: ast.AST, name: str) -> DtypeClass:
        """A name bound other than by ``name = value``: ``x += y`` keeps x's dtype (an
        in-place op); loop variables and unpacking are unknown."""
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            target = stmt.target
            prior = _assignments(self.ctx, self.ctx.enclosing_function(stmt)).get(name, ())
            earlier = [e for e in prior if (e[0], e[1]) < (stmt.lineno, stmt.col_offset)]
            if earlier:
                return self._reaching(target, self.ctx.enclosing_function(stmt), earlier) or DtypeClass.UNKNOWN
        if stmt.__class__ is ast.Assign and stmt.targets[0].__class__ is ast.Tuple:
            target = stmt.targets[0]
            if stmt.value.__class__ is ast.Call:
                return self._unpacked_statistic(stmt.value, target, name)
            if stmt.value.__class__ is ast.Tuple and len(stmt.value.elts) == len(target.elts):
                for element, value in zip(target.elts, stmt.value.elts):  # `a, b = x - c, y - c`
                    if element.__class__ is ast.Name and element.id == name and value.__class__ is not ast.Starred:
                        return self.of(value)
        return DtypeClass.UNKNOWN

    def _unpacked_statistic(self, call: ast.Call, target: ast.Tuple, name: str) -> DtypeClass:
        """``std, mean = torch.std_mean(w, ...)`` (both in w's dtype), ``values, idx =
        x.max(-1)`` (values in x's dtype, indices integer); other unpacking is unknown."""
        func = call.func
        qualname = self.ctx.qualname(func)
        if qualname is not None and qualname.startswith("torch.") and call.args:
            op, operand = qualname.rsplit(".", 1)[1], call.args[0]
        elif qualname is None and func.__class__ is ast.Attribute:
            op, operand = func.attr, func.value
        else:
            return DtypeClass.UNKNOWN
        index = next((i for i, t in enumerate(target.elts) if t.__class__ is ast.Name and t.id == name), None)
        if op in _SAME_DTYPE_PAIRS or op in _VALUES_INDICES and index == 0:
            return self.of(operand)
        if op in _VALUES_INDICES and index == 1:
            return DtypeClass.INTEGER
        return DtypeClass.UNKNOWN

    def _module_name(self, name: str) -> DtypeClass:
        if name in self.ctx.imports:
            return DtypeClass.UNKNOWN
        assigned = self.ctx.module_assignments(name)
        if len(assigned) == 1 and isinstance(assigned[0], ast.Assign):
            value = assigned[0].value
            if isinstance(value, ast.Constant) or isinstance(value, ast.UnaryOp) and isinstance(value.operand, ast.Constant):
                return self.of(value)
        return DtypeClass.UNKNOWN

    def _parameter(self, func: ast.AST, name: str) -> DtypeClass:
        return _cached(self._params, (id(func), name), lambda: self._parameter_class(func, name))

    def _parameter_class(self, func, name: str) -> DtypeClass:
        ctx = self.ctx
        if name in ("self", "cls"):
            return DtypeClass.UNKNOWN
        for dec in func.decorator_list:  # custom_fwd(cast_inputs=torch.float32) under autocast
            if isinstance(dec, ast.Call) and (ctx.qualname(dec.func) or "") in _CUSTOM_FWD and self.engine == "torch":
                cast = next((k.value for k in dec.keywords if k.arg == "cast_inputs"), None)
                found = self.literal(cast)
                if found is not None:
                    return found
        args = func.args
        positional = args.posonlyargs + args.args
        defaults = dict(zip([p.arg for p in positional[len(positional) - len(args.defaults):]], args.defaults))
        defaults.update({p.arg: d for p, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
        is_method = parent_of(func).__class__ is ast.ClassDef
        if is_method and func.name == "__init__":
            return DtypeClass.SCALAR  # constructor arguments are sizes and settings
        if _used_as_bool(ctx, func, name):
            return DtypeClass.BOOL  # ~mask, x[mask], masked_fill(mask, ...): a bool mask
        if _LENGTHS_PARAMETER.search(name):
            return DtypeClass.INTEGER  # `src_lengths`, `keys_length`: counts of positions, never activations
        if is_method and func.name in ("forward", "__call__"):
            if name in _DATA_PARAMETERS and not self.pure_half:
                return DtypeClass.INPUT  # data from the loader; O1 / autocast never cast inputs
            return DtypeClass.UNKNOWN
        # a helper: what the file's calls pass it (all of them must agree)
        passed = self.passed_arguments(func, name)
        if passed is None:
            return DtypeClass.UNKNOWN
        result: Optional[DtypeClass] = None
        for arg in passed:
            got = self.of(arg)
            result = got if result is None else join(result, got)
            if result is DtypeClass.UNKNOWN:
                return result
        if result is None and name in defaults:
            return self.of(defaults[name])
        return result or DtypeClass.UNKNOWN

    def passed_arguments(self, func: ast.AST, name: str) -> Optional[list[ast.AST]]:
        """The expressions this file's calls of helper ``func`` pass for its parameter
        ``name`` (the default where a call leaves it out); None when a call passes it
        through ``*args`` / ``**kwargs`` or leaves out one without a default."""
        args = func.args
        positional = args.posonlyargs + args.args
        defaults = dict(zip([p.arg for p in positional[len(positional) - len(args.defaults):]], args.defaults))
        defaults.update({p.arg: d for p, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
        index = next((i for i, p in enumerate(positional) if p.arg == name), None)
        static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in func.decorator_list)
        if parent_of(func).__class__ is ast.ClassDef and index is not None and not static:
            index -= 1  # self
        out = []
        for call in self._sites(func):
            arg = argument(call, name, index)
            if arg is None:
                arg = defaults.get(name)
                if arg is None:
                    return None
            out.append(arg)
        return out

    def _sites(self, func) -> list[ast.Call]:
        if self._call_sites is None:
            sites: dict[str, list[ast.Call]] = {}
            for call in self.ctx.calls:
                f = call.func
                if f.__class__ is ast.Name:
                    sites.setdefault(f.id, []).append(call)
                elif f.__class__ is ast.Attribute and f.value.__class__ is ast.Name and f.value.id in ("self", "cls"):
                    sites.setdefault("." + f.attr, []).append(call)
            self._call_sites = sites
        if parent_of(func).__class__ is ast.ClassDef:
            return self._call_sites.get("." + func.name, [])
        if self.ctx.functions.get(func.name) is func:
            return self._call_sites.get(func.name, [])
        if parent_of(func).__class__ in (ast.FunctionDef, ast.AsyncFunctionDef):  # a helper nested in forward
            enclosing = parent_of(func)
            return [c for c in self._call_sites.get(func.name, []) if self.ctx.enclosing_function(c) is enclosing]
        return []

    def _attribute(self, node: ast.Attribute) -> DtypeClass:
        ctx = self.ctx
        if node.attr in ("shape", "ndim", "device", "dtype", "is_cuda", "requires_grad", "training"):
            return DtypeClass.SCALAR if node.attr in ("ndim",) else DtypeClass.UNKNOWN
        if node.attr in ("T", "mT", "H", "data", "real"):
            return self.of(node.value)
        base = node.value
        if isinstance(base, ast.Name) and base.id in ("self", "cls"):
            cls = ctx.enclosing_class(node)
            if cls is not None:
                func = ctx.enclosing_function(node)
                # read in `__init__`: built in fp32, before `model.half()` / O2 casts the model
                cast = self.pure_half and not (func is not None and func.name == "__init__")
                return self._self_attribute(cls, node.attr, cast)
        if ctx.qualname(node) is not None:
            value = ctx.evaluate(node)
            return DtypeClass.SCALAR if value is not None else DtypeClass.UNKNOWN
        return DtypeClass.UNKNOWN

    def _self_attribute(self, cls: ast.ClassDef, attr: str, cast: bool) -> DtypeClass:
        return _cached(self._attrs, (id(cls), attr, cast), lambda: self._self_attribute_class(cls, attr, cast))

    def _self_attribute_class(self, cls: ast.ClassDef, attr: str, cast: bool) -> DtypeClass:
        """``self.attr`` from its assignments in the class: a parameter or a floating
        buffer is fp32 under O0/O1 and autocast (weights stay fp32) and half under O2/O3;
        a plain tensor attribute keeps the dtype it was built with."""
        ctx = self.ctx
        result: Optional[DtypeClass] = None
        classes = [cls, *ctx.base_classes(cls)]
        for klass in classes:
            for stmt in klass.body:
                if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for assign in ctx.self_assignments(stmt).get(attr, ()):
                    value = assign.value
                    if value is None or value.__class__ in (ast.List, ast.Tuple) and not value.elts:
                        continue  # `self.window_sum = []`: a placeholder until a tensor is stored
                    got = self._stored(value, buffer=False, cast=cast)
                    result = got if result is None else join_setting(result, got)
            if result is not None:
                break
        if result is None:  # self.register_buffer("attr", value) / register_parameter
            for call in ctx.calls:
                f = call.func
                if (f.__class__ is ast.Attribute and f.attr in ("register_buffer", "register_parameter")
                        and len(call.args) >= 2
                        and isinstance(call.args[0], ast.Constant) and call.args[0].value == attr
                        and ctx.enclosing_class(call) in classes):
                    if f.attr == "register_parameter":
                        got = self._parameter_value(cast)
                    else:
                        got = self._stored(call.args[1], buffer=True, cast=cast)
                    result = got if result is None else join(result, got)
        if result is None and attr in ("weight", "bias") and any(
                _TORCH_WEIGHTED_LAYER.match(ctx.qualname(base) or "") for klass in classes for base in klass.bases):
            return self._parameter_value(cast)  # `class StdConv2d(nn.Conv2d)`: the inherited parameters
        if result is None:
            return DtypeClass.UNKNOWN
        return result

    def _parameter_value(self, cast: bool = True) -> DtypeClass:
        """A weight: fp32 storage under O0/O1 and autocast, half under O2/O3.  Without the
        policy's upcasts (``explicit``) it is unknown: a GEMM's registration casts it to
        half, so it is not fp32 the code asked for."""
        if self.pure_half and cast:
            return DtypeClass.HALF
        return DtypeClass.FP32 if self.upcasts or not self.autocast or self.pure_half else DtypeClass.UNKNOWN

    def _stored(self, value: ast.AST, buffer: bool, cast: bool = True) -> DtypeClass:
        if isinstance(value, ast.Call) and (self.ctx.qualname(value.func) or "") in _PARAMETER:
            return self._parameter_value(cast)
        if isinstance(value, ast.Name):  # self.dim = dim: a config value, almost always a number
            func = self.ctx.enclosing_function(value)
            if func is not None and func.name == "__init__" and not _assignments(self.ctx, func).get(value.id):
                return DtypeClass.SCALAR
        got = self.of(value)
        if buffer and got is DtypeClass.UNKNOWN and self.borrowed_activations:
            got = DtypeClass.FP32  # a buffer the file cannot follow: taken as a floating one
        if buffer and self.pure_half and cast and got in _FLOATING:
            return DtypeClass.HALF  # model.half() casts floating buffers
        return got

    # --- calls ----------------------------------------------------------------------

    def _policy(self, qualname: str) -> Optional[str]:
        """The cast the selected policy applies to ``qualname`` on every device the model
        runs on (``"float"`` / ``"half"``), None when it differs or there is none."""
        if qualname in self._policy_cache:
            return self._policy_cache[qualname]
        casts = {policy.cast_of(qualname, self.engine, d) for d in self.devices}
        found = casts.pop() if len(casts) == 1 else None
        self._policy_cache[qualname] = found
        return found

    def _policy_result(self, node: ast.AST, qualname: str, operand: DtypeClass) -> DtypeClass:
        """Under O1 / autocast an op the policy casts returns fp32 or half."""
        if self.opt_level != "O1" or not self.autocast or self._in_disabled_autocast(node):
            return operand
        cast = self._policy(qualname)
        if cast == "float" and self.upcasts and operand not in (DtypeClass.FP64, DtypeClass.INTEGER, DtypeClass.BOOL):
            return DtypeClass.FP32
        if cast == "half" and operand in (DtypeClass.FP32, DtypeClass.UNKNOWN, DtypeClass.HALF):
            return DtypeClass.HALF
        return operand

    def _in_disabled_autocast(self, node: ast.AST) -> bool:
        return autocast_disabled(self.ctx, node)

    def _dtype_argument(self, call: ast.Call) -> Optional[DtypeClass]:
        for kw in call.keywords:
            if kw.arg == "dtype":
                if isinstance(kw.value, ast.Constant) and kw.value.value is None:
                    return None
                return self.literal(kw.value) or DtypeClass.UNKNOWN
        return None

    def _call(self, node: ast.Call) -> DtypeClass:
        ctx = self.ctx
        func = node.func
        explicit = self._dtype_argument(node)
        qn = ctx.qualname(func)
        if qn is not None:
            if qn.startswith("torch."):
                return self._torch_call(node, qn, explicit)
            if qn.startswith("math.") or qn.startswith("numpy.") and not node.args:
                return DtypeClass.SCALAR
            if qn in _EINOPS and node.args:
                return self.of(node.args[0])
            return DtypeClass.UNKNOWN
        if isinstance(func, ast.Name):
            if func.id in _SCALAR_BUILTINS and func.id not in ctx.functions:
                if func.id in ("min", "max", "abs", "sum", "pow") and node.args:
                    return join(*(self.of(a) for a in node.args[:2])) if len(node.args) > 1 else self.of(node.args[0])
                return DtypeClass.SCALAR
            target = ctx.functions.get(func.id)
            if target is not None:
                return self._returned(target)
            return self._aliased(node, explicit)
        if not isinstance(func, ast.Attribute):
            return self._aliased(node, explicit)
        receiver = func.value
        if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
            cls = ctx.enclosing_class(node)
            method = ctx.method(cls, func.attr) if cls is not None else None
            if method is not None and func.attr not in ("forward", "__call__") and not any(
                    isinstance(d, ast.Name) and d.id == "property" for d in method.decorator_list):
                return self._returned(method)
            return self._aliased(node, explicit)  # a submodule, or an attribute holding a torch function
        return self._method(node, func.attr, receiver, explicit)

    def _aliased(self, node: ast.Call, explicit) -> DtypeClass:
        """A call through an alias (``init_fn = uniform_init if ... else torch.zeros``,
        ``self.loss_fn`` a property returning ``F.l1_loss``): the join over what it may
        be -- torch functions and functions of this file."""
        result: Optional[DtypeClass] = None
        for target in self._alias_targets(node.func, 0):
            if isinstance(target, str):
                got = self._torch_call(node, target, explicit)
            elif target is None:
                return DtypeClass.UNKNOWN
            else:
                got = self._returned(target)
            result = got if result is None else join(result, got)
            if result is DtypeClass.UNKNOWN:
                break
        return result or DtypeClass.UNKNOWN

    def _alias_targets(self, func: ast.AST, depth: int) -> list:
        """torch qualnames (str) and function nodes a called expression may be; None: unknown."""
        if isinstance(func, ast.Name) and func.id in self.ctx.functions:
            return [self.ctx.functions[func.id]]
        if isinstance(func, ast.IfExp) and depth < 4:
            return self._alias_targets(func.body, depth + 1) + self._alias_targets(func.orelse, depth + 1)
        if isinstance(func, ast.Name) and depth < 4 and self.ctx.enclosing_function(func) is not None:
            value = reaching_value(self.ctx, func)
            if value is not None and value is not func:
                return self._alias_targets(value, depth + 1)
        return self.callees(func, depth)

    def _returned(self, func: ast.AST) -> DtypeClass:
        return _cached(self._returns, id(func), lambda: self._returned_class(func))

    def _returned_class(self, func: ast.AST) -> DtypeClass:
        """The join of the classes of ``func``'s return values (nested defs left out)."""
        result: Optional[DtypeClass] = None
        stack = list(func.body)
        while stack:
            stmt = stack.pop()
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, ast.Return):
                got = self.of(stmt.value) if stmt.value is not None else DtypeClass.UNKNOWN
                result = got if result is None else join(result, got)
                if result is DtypeClass.UNKNOWN:
                    break
            for field in _BLOCK_FIELDS:
                block = getattr(stmt, field, None)
                if block:
                    stack.extend(block)
        return result or DtypeClass.UNKNOWN

    def _method(self, node: ast.Call, attr: str, receiver: ast.AST, explicit) -> DtypeClass:
        if attr in _CAST_METHODS and not node.args and not node.keywords:
            return _CAST_METHODS[attr]
        if attr in ("to", "type"):
            for arg in list(node.args) + [k.value for k in node.keywords if k.arg in ("dtype", "other", None)]:
                if (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "type"
                        and not arg.args and not arg.keywords):
                    return self.of(arg.func.value)  # t.type(self.inv_freq.type())
                found = self.literal(arg)
                if found is not None:
                    return found
                if isinstance(arg, (ast.Name, ast.Attribute)) and not _device_like(arg):
                    other = self._borrowed(arg)  # x.to(y): y's dtype when y is a tensor
                    if other in _FLOATING or other in (DtypeClass.INTEGER, DtypeClass.BOOL):
                        return other
                    return DtypeClass.UNKNOWN
            return self.of(receiver)
        if attr == "type_as" and node.args:
            return self._borrowed(node.args[0])
        if explicit is not None:
            return explicit
        if attr in _NEW_FACTORIES:
            return self._borrowed(receiver)  # x.new_tensor(range(n)): x's dtype, as x.to(...) borrows it
        if attr in _SCALAR_METHODS:
            return DtypeClass.SCALAR
        if attr in _BOOL_METHODS:
            return DtypeClass.BOOL
        if attr in _INT_RESULT:
            return DtypeClass.INTEGER
        base = self.of(receiver)
        if base is DtypeClass.SCALAR:
            return DtypeClass.UNKNOWN
        if attr in _FLOAT_MATH:
            if base in (DtypeClass.INTEGER, DtypeClass.BOOL):
                return DtypeClass.FP32
            return self._policy_result(node, "torch.Tensor." + attr, base)
        if attr in _SAME_DTYPE:
            if attr in ("sum", "cumsum", "prod", "cumprod", "nansum") and base is DtypeClass.BOOL:
                return DtypeClass.INTEGER
            if attr in ("add", "sub", "mul", "where", "masked_scatter") and node.args:
                base = promote(base, self.of(node.args[0]))
            return self._policy_result(node, "torch.Tensor." + attr, base)
        if policy.op_family("torch.Tensor." + attr) == policy.GEMM and len(node.args) <= 1:  # x.mm(y)
            return self._policy_result(node, "torch.Tensor." + attr, promote(base, self.of(node.args[0]) if node.args else base))
        return DtypeClass.UNKNOWN

    def _torch_call(self, node: ast.Call, qn: str, explicit) -> DtypeClass:
        short = qn.rsplit(".", 1)[-1]
        args = node.args
        if qn in _PARAMETER:
            return self._parameter_value()
        if short == "arange" or short == "range":
            if explicit is not None:
                return explicit
            numbers = list(args) + [k.value for k in node.keywords if k.arg in ("start", "end", "step")]
            if any(isinstance(a, (ast.Constant, ast.UnaryOp)) and self._float_scalar(a) for a in numbers):
                return DtypeClass.FP32
            if any(self.of(a) in (DtypeClass.HALF, DtypeClass.FP32, DtypeClass.FP64) for a in numbers):
                return DtypeClass.FP32
            return DtypeClass.INTEGER
        if short in _FLOAT_FACTORIES and qn.count(".") == 1:
            return explicit or DtypeClass.FP32
        if short in _INT_FACTORIES:
            return explicit or DtypeClass.INTEGER
        if short in _LIKE_FACTORIES:
            return explicit or (self.of(args[0]) if args else DtypeClass.UNKNOWN)
        if short in ("tensor", "as_tensor", "from_numpy") and qn.count(".") == 1:
            if explicit is not None:
                return explicit
            first = args[0] if args else None
            if isinstance(first, ast.Constant):
                return DtypeClass.FP32 if isinstance(first.value, float) else DtypeClass.INTEGER
            if isinstance(first, (ast.List, ast.Tuple)) and first.elts and all(isinstance(e, ast.Constant) for e in first.elts):
                return DtypeClass.FP32 if any(isinstance(e.value, float) for e in first.elts) else DtypeClass.INTEGER
            return DtypeClass.UNKNOWN
        if qn.startswith("torch.linalg.") or qn.startswith("torch.fft."):
            tensors = [a for a in args if not isinstance(a, (ast.Constant, ast.Starred))]
            if not tensors:
                return DtypeClass.UNKNOWN
            result = self.of(tensors[0])
            for t in tensors[1:]:
                result = promote(result, self.of(t))
            return DtypeClass.UNKNOWN if result is DtypeClass.SCALAR else result
        if short in ("finfo", "iinfo"):
            return DtypeClass.UNKNOWN
        if explicit is not None:
            return explicit
        operands = [a for a in args if not isinstance(a, ast.Starred)]
        if short in ("cat", "stack", "concat", "hstack", "vstack") and operands:
            seq = operands[0]
            if isinstance(seq, ast.Name) and self.ctx.enclosing_function(seq) is not None:
                value = reaching_value(self.ctx, seq)  # `parts = [c.sum(-1) for c in ...]; torch.cat(parts)`
                if isinstance(value, (ast.ListComp, ast.List, ast.Tuple)):
                    seq = value
            if isinstance(seq, (ast.ListComp, ast.GeneratorExp)):
                return self.of(seq.elt)
            elts = seq.elts if isinstance(seq, (ast.List, ast.Tuple)) else None
            if not elts:
                return DtypeClass.UNKNOWN
            result = self.of(elts[0])
            for e in elts[1:]:
                result = promote(result, self.of(e))
            return result
        if short == "where" and len(operands) == 3:
            return promote(self.of(operands[1]), self.of(operands[2]))
        if short in _BOOL_METHODS:
            return DtypeClass.BOOL
        if short in _INT_RESULT:
            return DtypeClass.INTEGER
        gemm = policy.op_family(qn) == policy.GEMM
        if (gemm and policy.ASSUME_REGISTERED and self.opt_level == "O1" and self.autocast
                and not self._in_disabled_autocast(node)):
            return DtypeClass.HALF
        if gemm:
            tensors = [a for a in operands if not isinstance(a, ast.Constant)]
            if len(tensors) == 1 and isinstance(tensors[0], (ast.Tuple, ast.List)):
                tensors = tensors[0].elts
            if not tensors:
                return DtypeClass.UNKNOWN
            result = self.of(tensors[0])
            for t in tensors[1:]:
                result = promote(result, self.of(t))
            return self._policy_result(node, qn, result)
        # F.fold(input=x, ...): the tensor passed by keyword
        first_arg = operands[0] if operands else next((k.value for k in node.keywords if k.arg == "input"), None)
        first = self.of(first_arg) if first_arg is not None else DtypeClass.UNKNOWN
        if qn.startswith("torch.nn.functional."):
            if short.endswith("_loss") or short in ("cross_entropy", "binary_cross_entropy_with_logits", "kl_div"):
                return self._policy_result(node, qn, first)
            if short in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d"):
                return self._policy_result(node, qn, first)
        if short in _FLOAT_MATH and first in (DtypeClass.INTEGER, DtypeClass.BOOL):
            return DtypeClass.FP32
        if short in _FLOAT_MATH or short in _SAME_DTYPE or qn.startswith("torch.nn.functional."):
            if short in ("add", "sub", "mul", "div", "true_divide", "pow", "atan2", "maximum", "minimum") and len(operands) > 1:
                first = promote(first, self.of(operands[1]), short in ("div", "true_divide"))
            if first is DtypeClass.SCALAR:
                return DtypeClass.UNKNOWN
            return self._policy_result(node, qn, first)
        return DtypeClass.UNKNOWN

    # --- what a called expression is ----------------------------------------------------

    def alias_names(self) -> set:
        """Names and ``self`` attributes assigned something that may be a callable alias
        (a name, an attribute, a conditional choice, ``partial(...)``), once per file: a
        cheap filter before :meth:`callees`."""
        if self._alias_names is None:
            found = set()
            for node in self.ctx.binding_nodes:
                if node.__class__ is ast.Assign or node.__class__ is ast.AnnAssign:
                    value = node.value
                    if value is None or value.__class__ not in (ast.Name, ast.Attribute, ast.IfExp, ast.Call):
                        continue
                    if value.__class__ is ast.Call and not (isinstance(value.func, (ast.Name, ast.Attribute)) and
                                                             (getattr(value.func, "id", None) or value.func.attr) == "partial"):
                        continue
                    for t in (node.targets if node.__class__ is ast.Assign else (node.target,)):
                        if t.__class__ is ast.Name:
                            found.add(t.id)
                        elif t.__class__ is ast.Attribute:
                            found.add("." + t.attr)
            for cls in self.ctx.classes.values():  # properties returning a function
                for stmt in cls.body:
                    if isinstance(stmt, ast.FunctionDef) and any(
                            isinstance(d, ast.Name) and d.id == "property" for d in stmt.decorator_list):
                        found.add("." + stmt.name)
            self._alias_names = found
        return self._alias_names

    def callees(self, func: ast.AST, depth: int = 0, layers: bool = True) -> list[Optional[str]]:
        """The torch functions a called expression may be: ``F.softmax`` ->
        ``["torch.nn.functional.softmax"]``; a local or module alias
        (``softmax = torch.softmax if fast else stable_softmax``), an attribute assigned
        one (``self.attn_fn = F.softmax``), a ``@property`` returning one,
        ``functools.partial(F.softmax, dim=-1)`` and a module built inline
        (``nn.Softmax(dim=-1)``, as its functional form) are followed.  ``None`` stands
        for a candidate that is not a torch function (a function of the file, unknown).
        A layer kept on ``self`` (``self.softmax = nn.Softmax(-1)``) is not followed
        (``layers=False``): it is a module, which O2's ``keep_fp32_modules`` can keep fp32."""
        ctx = self.ctx
        if depth > 4:
            return [None]
        qn = ctx.qualname(func)
        if qn is not None:
            return [qn] if qn.startswith("torch.") else [None]
        if isinstance(func, ast.IfExp):
            return self.callees(func.body, depth + 1, layers) + self.callees(func.orelse, depth + 1, layers)
        if isinstance(func, ast.Call):
            maker = ctx.qualname(func.func) or ""
            if maker in ("functools.partial", "torch.nn.Module") or maker.endswith(".partial"):
                return self.callees(func.args[0], depth + 1) if func.args else [None]
            if maker in policy.MODULE_FUNCTIONS and layers:  # nn.Softmax(dim=-1)(x): the function it runs
                return [policy.MODULE_FUNCTIONS[maker]]
            return [None]
        if isinstance(func, ast.Name):
            value = reaching_value(ctx, func) if ctx.enclosing_function(func) is not None else None
            if value is None:
                assigned = ctx.module_assignments(func.id)
                if len(assigned) == 1 and isinstance(assigned[0], ast.Assign):
                    value = assigned[0].value
            if value is None or value is func:
                return [None]
            return self.callees(value, depth + 1)
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id in ("self", "cls")):
            cls = ctx.enclosing_class(func)
            if cls is None:
                return [None]
            method = ctx.method(cls, func.attr)
            if method is not None:
                if not any(isinstance(d, ast.Name) and d.id == "property" for d in method.decorator_list):
                    return [None]
                found = [self.callees(r.value, depth + 1) for r in ast.walk(method)
                         if isinstance(r, ast.Return) and r.value is not None]
                return [q for group in found for q in group] or [None]
            values = []
            for klass in (cls, *ctx.base_classes(cls)):
                for stmt in klass.body:
                    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        values += [a.value for a in ctx.self_assignments(stmt).get(func.attr, ()) if a.value is not None]
            if not values:
                return [None]
            return [q for v in values for q in self.callees(v, depth + 1, layers=False)]
        return [None]

    # --- which code is the model's forward computation ---------------------------------

    def in_model_forward(self, node: ast.AST) -> bool:
        """Code that runs as part of the model's forward computation: reached from a
        module's ``forward`` (:meth:`FileContext.in_forward`) and not under
        ``torch.no_grad()`` / ``torch.inference_mode()`` (post-processing, EMA updates)."""
        ctx = self.ctx
        if not ctx.in_forward(node):
            return False
        for anc in ctx.ancestors(node):
            if isinstance(anc, (ast.With, ast.AsyncWith)):
                for item in anc.items:
                    expr = item.context_expr
                    target = expr.func if isinstance(expr, ast.Call) else expr
                    if (ctx.qualname(target) or "") in _NO_GRAD:
                        return False
            elif isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for dec in anc.decorator_list:
                    target = dec.func if isinstance(dec, ast.Call) else dec
                    if (ctx.qualname(target) or "") in _NO_GRAD:
                        return False
                if anc.name == "__init__":
                    return False
            elif anc.__class__ is ast.ClassDef and anc.name in ctx.get(TorchFallbacks).dead:
                return False
        return True


class TorchFallbacks:
    """Classes of the file used only as the fallback of a torch class that every
    supported torch has: ``GELU = nn.GELU if hasattr(nn, 'GELU') else GELU_`` (or
    ``getattr(nn, 'GELU', GELU_)``), the class named nowhere else.  Their code never runs.
    Found from the module's top-level assignments, only when the file calls ``hasattr`` /
    ``getattr``."""

    def __init__(self, ctx):
        self.dead: frozenset = frozenset()
        if "hasattr(" not in ctx.source and "getattr(" not in ctx.source:
            return
        found = set()
        for stmt in ctx.tree.body:
            value = stmt.value if stmt.__class__ is ast.Assign else None
            fallback = None
            if (value.__class__ is ast.IfExp and value.test.__class__ is ast.Call
                    and value.test.func.__class__ is ast.Name and value.test.func.id == "hasattr"
                    and len(value.test.args) == 2 and (ctx.qualname(value.test.args[0]) or "").startswith("torch")):
                fallback = value.orelse
            elif (value.__class__ is ast.Call and value.func.__class__ is ast.Name and value.func.id == "getattr"
                  and len(value.args) == 3 and (ctx.qualname(value.args[0]) or "").startswith("torch")):
                fallback = value.args[2]
            if fallback.__class__ is ast.Name and fallback.id in ctx.classes:
                if len(re.findall(rf"\b{re.escape(fallback.id)}\b", ctx.source)) == 2:  # its class line and here
                    found.add(fallback.id)
        self.dead = frozenset(found)


class ExplicitDtypeFlow(DtypeFlow):
    """The dtype flow without the O1 policy's fp32 upcasts (``ctx.dtype_of(x, explicit=True)``):
    fp32 only where the code itself asks for it."""

    def __init__(self, ctx):
        super().__init__(ctx, policy=False)


#: methods whose first argument (``masked_fill``, ``masked_select``) or ``torch.where``'s
#: condition must be a bool tensor
_BOOL_ARGUMENT = frozenset({"masked_fill", "masked_fill_", "masked_select", "masked_scatter", "where"})


def _names_root(expr: ast.AST) -> Optional[str]:
    """``mask`` of ``mask``, ``mask[..., None]``, ``mask.unsqueeze(1)``, ``mask.bool()``."""
    while True:
        if expr.__class__ is ast.Subscript:
            expr = expr.value
        elif expr.__class__ is ast.Call and expr.func.__class__ is ast.Attribute and expr.func.attr in (
                "unsqueeze", "view", "reshape", "expand", "expand_as", "transpose", "permute", "to", "squeeze"):
            expr = expr.func.value
        else:
            break
    return expr.id if expr.__class__ is ast.Name else None


def _used_as_bool(ctx, func: ast.AST, name: str) -> bool:
    """Whether parameter ``name`` of ``func`` is used as a bool mask: inverted with
    ``~``, the condition of ``masked_fill``/``where``, or (a name with "mask") a
    tensor's index (``loss[mask]``).  ``mask.sum()`` of one is then an int64 count."""
    if "mask" not in name.lower():
        return False
    return name in ctx.get(BoolMasks).of(func)


class BoolMasks:
    """Per function, built on first ask and kept for the file: the names it uses as a
    bool mask (:func:`_used_as_bool`), from one walk of the function rather than one
    per parameter asked about."""

    def __init__(self, ctx):
        self._by_function: dict[int, frozenset[str]] = {}

    def of(self, func: ast.AST) -> frozenset[str]:
        found = self._by_function.get(id(func))
        if found is None:
            found = self._by_function[id(func)] = _bool_mask_names(func)
        return found


def _bool_mask_names(func: ast.AST) -> frozenset[str]:
    names = set()
    for node in subtree(func):
        kind = node.__class__
        if kind is ast.UnaryOp and node.op.__class__ is ast.Invert:
            names.add(_names_root(node.operand))
        elif kind is ast.Subscript and node.slice.__class__ is ast.Name:
            names.add(node.slice.id)
        elif kind is ast.Call and node.func.__class__ is ast.Attribute and node.func.attr in _BOOL_ARGUMENT and node.args:
            root = _names_root(node.args[0])
            if not (node.func.attr == "where" and node.func.value.__class__ is ast.Name and node.func.value.id == root):
                names.add(root)
    names.discard(None)
    return frozenset(names)


def _device_like(expr: ast.AST) -> bool:
    name = expr.attr if isinstance(expr, ast.Attribute) else expr.id if isinstance(expr, ast.Name) else ""
    return "device" in name or name in ("cuda", "cpu", "dev")


def _dominates(ctx, earlier: ast.AST, stmt: Optional[ast.AST]) -> bool:
    """Whether statement ``earlier`` always runs before ``stmt``: it sits in a block that
    also holds ``stmt`` or one of its enclosing statements."""
    if stmt is None:
        return False
    parent = parent_of(earlier)
    for field in _BLOCK_FIELDS:
        block = getattr(parent, field, None)
        if block and any(s is earlier for s in block):
            ids = {id(s) for s in block}
            node = stmt
            while node is not None and node is not parent:
                if id(node) in ids:
                    return True
                node = parent_of(node)
            return False
    return False


def autocast_disabled(ctx, node: ast.AST) -> bool:
    """Inside ``with torch.autocast(..., enabled=False):`` in the same function, or in a
    function decorated ``@autocast(enabled=False)`` (torch / torch.cuda.amp / torch.amp
    spellings): nothing there is cast by the O1 policy."""

    def disables(call: ast.AST) -> bool:
        if not isinstance(call, ast.Call):
            return False
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name != "autocast" and (ctx.qualname(func) or "") not in _AUTOCAST:
            return False
        return any(k.arg == "enabled" and isinstance(k.value, ast.Constant) and k.value.value is False
                   for k in call.keywords)

    for anc in ctx.ancestors(node):
        if isinstance(anc, (ast.With, ast.AsyncWith)):
            if any(disables(item.context_expr) for item in anc.items):
                return True
        elif isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return any(disables(d) for d in anc.decorator_list)
        elif isinstance(anc, ast.Lambda):
            return False
    return False


# --- precision facts: when an expression is half, in which format, and why ------------

#: when a half mode is half: explicit casts at every level, activations from O1, weights
#: and floating buffers once the model is cast (O2 / O3, ``model.half()``)
HALF_LEVELS = {"explicit": ("O0", "O1", "O2", "O3"), "activation": ("O1", "O2", "O3"), "buffer": ("O2", "O3")}
_MODE_LEVEL = (("explicit", "O0"), ("activation", "O1"), ("buffer", "O2"))
#: the half formats a :class:`Half` has (a target's ``activations``)
_HALF_FORMATS = frozenset(f.activations for f in FORMATS.values() if f.activations)
_CAST_FORMATS = {"half": "float16", "bfloat16": "bfloat16"}


@dataclasses.dataclass(frozen=True)
class Half:
    """A half-precision value: its format, when it is half (``mode``, see
    :data:`HALF_LEVELS`), the tensor whose dtype it borrowed (``source``: ``x`` in
    ``.to(x.dtype)``, for a cast back) and the cast or creation that made it half
    (``cause``: what a fix rewrites to fp32)."""

    format: str  # "float16" | "bfloat16"
    mode: str  # "explicit" | "activation" | "buffer"
    source: Optional[ast.AST] = None
    cause: Optional[ast.AST] = None

    def is_half_at(self, opt_level: str) -> bool:
        return opt_level in HALF_LEVELS[self.mode]

    @property
    def short(self) -> str:
        return BY_DTYPE[self.format].key


@dataclasses.dataclass(frozen=True)
class Precision:
    """An expression's dtype across opt levels: ``kind`` "int" / "fp32" / "number" (a
    Python scalar) / "half" (with its :class:`Half`)."""

    kind: str
    half: Optional[Half] = None


class PrecisionFacts:
    """Which opt levels make an expression half, answered by the one dtype analysis
    (:class:`DtypeFlow`) run at O0, O1 and O2 without the O1 policy's op casts: half at
    O0 is an explicit cast, half from O1 a dtype borrowed from the activations, half only
    from O2 a weight's or a buffer's dtype.  What the policy itself casts (an einsum
    under autocast) is the selected-level flow's answer, ``ctx.dtype_of``."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.flows = {level: DtypeFlow(ctx, policy=None, opt_level=level, borrowed_activations=True)
                      for _, level in _MODE_LEVEL}
        self._memo: dict[int, Optional[Precision]] = {}

    def mode(self, expr: ast.AST) -> Optional[str]:
        """The first mode (explicit, activation, buffer) at whose level ``expr`` is half."""
        for mode, level in _MODE_LEVEL:
            if self.flows[level].of(expr) is DtypeClass.HALF:
                return mode
        return None

    def fp32_until_cast(self, expr: ast.AST) -> bool:
        """An activation that is fp32 under O1 only because a weight or a buffer promotes
        it (``scores * self.bias`` with an fp32 ``tril`` buffer): once the model is cast
        (O2 / O3, ``model.half()``) the weight is half and the result has the
        activation's dtype.  A weight's own statistics (a softmax over mixing
        parameters) are not activations: they are half at O2, not unknown."""
        return (self.flows["O1"].of(expr) in (DtypeClass.FP32, DtypeClass.FP64)
                and self.flows["O2"].of(expr) is DtypeClass.UNKNOWN and self._weight_promoted(expr, 0))

    def _weight_promoted(self, expr: ast.AST, depth: int) -> bool:
        """Elementwise arithmetic of an activation with a weight or buffer (fp32 under
        O1, half under O2), through names, subscripts and same-dtype methods.  torch
        promotes half with fp32 there; a linalg call on mixed dtypes raises instead."""
        if depth > 8 or expr is None:
            return False
        kind = expr.__class__
        if kind is ast.Name:
            value = reaching_value(self.ctx, expr) if self.ctx.enclosing_function(expr) is not None else None
            return self._weight_promoted(value, depth + 1)
        if kind is ast.Subscript:
            return self._weight_promoted(expr.value, depth + 1)
        if kind is ast.Call and isinstance(expr.func, ast.Attribute) and expr.func.attr in _SAME_DTYPE:
            return self._weight_promoted(expr.func.value, depth + 1)
        if kind is not ast.BinOp or not isinstance(expr.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            return False
        o1, o2 = self.flows["O1"], self.flows["O2"]
        for weight, other in ((expr.left, expr.right), (expr.right, expr.left)):
            if (o1.of(weight) is DtypeClass.FP32 and o2.of(weight) is DtypeClass.HALF
                    and o2.of(other) is DtypeClass.UNKNOWN):
                return True
        return self._weight_promoted(expr.left, depth + 1) or self._weight_promoted(expr.right, depth + 1)

    def of(self, expr: Optional[ast.AST]) -> Optional[Precision]:
        if expr is None:
            return None
        key = id(expr)
        if key not in self._memo:
            self._memo[key] = self._precision(expr)
        return self._memo[key]

    def _precision(self, expr: ast.AST) -> Optional[Precision]:
        mode = self.mode(expr)
        if mode is not None:
            origin = self._origin(expr, mode, 0)
            fmt = origin[0] if origin is not None else None
            if fmt is None:
                fmt = self.ctx.format.activations
            if fmt not in _HALF_FORMATS:
                return None
            source, cause = origin[1:] if origin is not None else (None, None)
            return Precision("half", Half(fmt, mode, source, cause))
        found = self.flows["O1"].of(expr)
        if found in (DtypeClass.FP32, DtypeClass.FP64):
            return Precision("fp32")
        if found in (DtypeClass.INTEGER, DtypeClass.BOOL):
            return Precision("int")
        if found is DtypeClass.SCALAR:
            return Precision("number")
        return None

    # --- where the half came from -----------------------------------------------------

    def _origin(self, expr: ast.AST, mode: str, depth: int) -> Optional[tuple]:
        """(format or None, source, cause) of a value that is half in ``mode``: follows
        names, same-dtype calls and the operand that carries the mode down to the cast."""
        if depth > 16 or expr is None:
            return None
        ctx = self.ctx
        kind = expr.__class__
        if kind is ast.Name:
            value = reaching_value(ctx, expr) if ctx.enclosing_function(expr) is not None else None
            return self._origin(value, mode, depth + 1) if value is not None else (None, expr, None)
        if kind is ast.Attribute:
            if mode == "buffer" and isinstance(expr.value, ast.Name) and expr.value.id == "self":
                return (None, expr, expr)  # a weight or buffer: half once the model is cast
            return (None, expr, None)
        if kind in (ast.UnaryOp, ast.Subscript, ast.Starred):
            return self._origin(expr.operand if kind is ast.UnaryOp else expr.value, mode, depth + 1)
        if kind is ast.IfExp or kind is ast.BinOp:
            parts = (expr.body, expr.orelse) if kind is ast.IfExp else (expr.left, expr.right)
            return self._through(parts, mode, depth)
        if kind is not ast.Call:
            return None
        func = expr.func
        method = func.attr if isinstance(func, ast.Attribute) else None
        if method in _CAST_FORMATS and not expr.args and not expr.keywords:
            return (_CAST_FORMATS[method], None, expr)
        dtype_arg = next((k.value for k in expr.keywords if k.arg == "dtype"), None)
        if dtype_arg is None and method in ("to", "type", "type_as"):
            dtype_arg = next((a for a in expr.args if not (isinstance(a, (ast.Name, ast.Attribute)) and _device_like(a))
                              and not (isinstance(a, ast.Constant) and isinstance(a.value, str))), None)
        if dtype_arg is not None:
            return self._dtype_origin(dtype_arg, expr, depth)
        operands = [func.value] if method is not None else []
        for arg in expr.args:
            operands += arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]
        return self._through(operands, mode, depth) or (None, None, None)

    def _through(self, operands, mode: str, depth: int) -> Optional[tuple]:
        for operand in operands:
            if self.mode(operand) == mode:
                return self._origin(operand, mode, depth + 1)
        return None

    def _dtype_origin(self, arg: ast.AST, cast: ast.Call, depth: int) -> tuple:
        """A cast's dtype argument: a literal names the format; a borrowed dtype
        (``x.dtype``, ``.type_as(x)``, ``dtype=dtype``) takes the borrowed tensor's."""
        name = dtype_literal(self.ctx, arg)
        if name is not None:
            return (name, None, cast)
        if (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "type"
                and not arg.args):
            arg = arg.func.value  # t.type(self.inv_freq.type())
        probe = arg.value if isinstance(arg, ast.Attribute) and arg.attr == "dtype" else arg
        inner = self.of(probe) if not is_dtype_probe(probe) else None
        fmt = inner.half.format if inner is not None and inner.half is not None else None
        return (fmt, probe, cast)
