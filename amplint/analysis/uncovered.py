"""What AMP401 (uncovered-op) looks for: calls no mixed-precision policy casts.

Three detectors, run on the calls of one file (:class:`CallSurvey`, filled during the
engine's walk and judged once the walk is done, by :func:`check_uses`):

* **ops** -- GEMM-like ops the ``amplint`` engine's O1 leaves in their inputs' dtype
  (``torch.einsum``), and ops with no half kernel (linear algebra, FFTs) that the selected
  policy does not cast to fp32 (the tables are in :mod:`amplint.analysis.ops`);
* **custom autograd Functions** -- ``MyFn.apply`` whose ``forward`` has no
  ``custom_fwd`` / ``@amp.*_function`` decorator;
* **extensions** -- calls into compiled extension modules and through
  ``torch.ops.<namespace>``, which no Python-level policy sees.

Each detector returns a :class:`Pending` finding: the message, and either a
:class:`Registration` the rule's one registration fix will write, or a fix of its own.
Registrations made in this or another file (``amp.register_half_function(torch,
"einsum")``) are read by :func:`registration`.  Never imports torch.
"""
from __future__ import annotations

import ast
import dataclasses
import os
from typing import Optional

from amplint import fixes
from amplint.amp import policy
from amplint.analysis import ops, position_tables, positions
from amplint.analysis import function_dtypes, module_state
from amplint.analysis.calls import amp_alias, module_level_names, torch_alias
from amplint.dtypes import DtypeClass
from amplint.rule import Edit, Fix, Severity
from amplint.semantic.library import LibraryFunctions

REGISTER = ops.REGISTER_FUNCTIONS
_DECORATORS = ops.DECORATORS
#: last names of calls worth a look (cheap string test before any resolution): every name
#: the policy gives a family to
_OP_NAMES = policy.family_names()
#: module names of compiled extensions (``fused_layer_norm_cuda``, ``selective_scan_cuda``,
#: ``amp_C``, ``_C``, ``flash_attn_2_cuda``, ``my_ext``)
_EXT_SUFFIXES = ("_cuda", "_C", "_ext", "_cpp")
_CPP_LOADERS = ("torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline")
_AUTOGRAD_FUNCTION = ("torch.autograd.Function", "torch.autograd.function.Function")
_CUSTOM_FWD = ("torch.amp.custom_fwd", "torch.cuda.amp.custom_fwd", "torch.amp.autocast_mode.custom_fwd")
_CUSTOM_BWD = ("torch.amp.custom_bwd", "torch.cuda.amp.custom_bwd", "torch.amp.autocast_mode.custom_bwd")
_AUTOCAST = ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast",
             "torch.amp.autocast_mode.autocast")
_FLOAT_CASTS = ("float", "double")
SELF_MODULE = "sys.modules[__name__]"
_INIT_PREFIXES = ("_init", "init_", "reset_parameters", "_reset_parameters")


def last_name(func: ast.AST) -> Optional[str]:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _is_self_module(expr: ast.AST) -> bool:
    """``sys.modules[__name__]``"""
    return (
        isinstance(expr, ast.Subscript)
        and isinstance(expr.slice, ast.Name) and expr.slice.id == "__name__"
        and isinstance(expr.value, ast.Attribute) and expr.value.attr == "modules"
        and isinstance(expr.value.value, ast.Name) and expr.value.value.id == "sys"
    )


def _floated(ctx, expr: ast.AST) -> str:
    text = ctx.segment(expr)
    if isinstance(expr, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
        return text + ".float()"
    return f"({text}).float()"


def _imported_function(ctx, name: str) -> bool:
    """``name`` is imported from another package (``from fast_transformers.causal_product
    import CausalDotProduct``), not from torch: ``name.apply(...)`` runs a custom autograd
    Function this file cannot see."""
    origin = ctx.imports.get(name)
    return origin is not None and not origin.startswith(("torch.", "amplint.", "apex."))


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def registration(call: ast.Call, ctx) -> Optional[list]:
    """``[module, name, kind]`` for ``amp.register_half_function(torch, "einsum")``.
    ``module`` is the module's qualified name, ``@<path>`` for ``sys.modules[__name__]``."""
    kind = REGISTER.get(last_name(call.func) or "")
    if kind is None:
        return None
    args = list(call.args)
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    module = args[0] if args else keywords.get("module")
    name = args[1] if len(args) > 1 else keywords.get("name")
    if module is None or not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return None
    if _is_self_module(module):
        ref = "@" + ctx.path
    else:
        ref = ctx.qualname(module) or ctx.segment(module)
        if isinstance(module, ast.Name) and module.id in ctx.classes:  # (MyFunction, "apply")
            ref = f"@{ctx.path}:{module.id}"
    return [ref, name.value, kind]


@dataclasses.dataclass(frozen=True)
class Use:
    """A call worth judging once the whole file is read."""

    node: ast.Call
    #: "op", "function" (a custom Function's ``.apply``), "extension" or "torch.ops"
    kind: str
    #: the op's qualified name; the Function class's name; the extension's local name
    qualname: str
    #: for ops: the :mod:`amplint.analysis.ops` family, the qualified name of the module
    #: called through (``torch.linalg``), and the called name (``inv``)
    family: Optional[str] = None
    module: Optional[str] = None
    name: Optional[str] = None
    #: a module's public alias of the op (it runs wherever the module is imported)
    exported: bool = False


@dataclasses.dataclass(frozen=True)
class Registration:
    """A registration the fix adds: ``amp.register_<kind>_function(<text>, "<name>")``;
    ``module`` is what :func:`registration` would read back (``"@<path>"`` for
    ``sys.modules[__name__]``)."""

    text: str
    module: Optional[str]
    name: str
    kind: str


@dataclasses.dataclass(frozen=True)
class Pending:
    """A finding, before the registrations of the whole file are merged into one fix."""

    node: ast.AST
    message: str
    severity: Severity
    registration: Optional[Registration] = None
    fix: Optional[Fix] = None
    #: where to report instead of ``node`` (a custom Function's ``class`` line: the defect
    #: is the class's undecorated ``forward``; its ``.apply`` calls are related locations)
    at: Optional[ast.AST] = None


#: libraries that compile a kernel at run time and hand back a callable for it (KeOps's
#: ``generic_logsumexp(formula, ...)``, ``Genred``): calling it runs no Python-level op
_KERNEL_COMPILERS = ("pykeops.",)


class CompiledCallables:
    """Callables a kernel compiler built, as this file passes them around:
    ``log_conv = generic_logsumexp(...)``, this file's functions that return one
    (``def keops_lse(...): ...; return log_conv``), and the parameters bound to one
    (``partial(softmin_online, log_conv=keops_lse(cost, D))``, or a call site passing one).
    ``ctx.get(CompiledCallables).called(call)``: the library's name when ``call`` calls one."""

    def __init__(self, ctx):
        self.ctx = ctx
        #: (enclosing function or None, name) -> the compiler's qualified name
        self.names: dict = {}
        #: this file's functions that return a compiled callable -> the compiler
        self.factories: dict = {}
        #: (function, parameter) -> the compiler
        self.parameters: dict = {}
        if not any(m.rstrip(".") in ctx.source for m in _KERNEL_COMPILERS):
            return
        for node in ctx.nodes("Assign"):
            compiler = self._compiler_of(node.value)
            if compiler and len(node.targets) == 1 and node.targets[0].__class__ is ast.Name:
                self.names[(ctx.enclosing_function(node), node.targets[0].id)] = compiler
        for func in ctx.functions.values():
            for stmt in ast.walk(func):
                if stmt.__class__ is ast.Return and stmt.value is not None and ctx.enclosing_function(stmt) is func:
                    compiler = self._made_by(stmt.value, func)
                    if compiler:
                        self.factories[func.name] = compiler
        for call in ctx.calls:  # partial(f, p=kernel) or f(..., p=kernel)
            target = call.args[0] if (ctx.qualname(call.func) or "") == "functools.partial" and call.args else call.func
            if target.__class__ is not ast.Name or target.id not in ctx.functions:
                continue
            for kw in call.keywords:
                compiler = kw.arg and self._made_by(kw.value, ctx.enclosing_function(call))
                if compiler:
                    self.parameters[(ctx.functions[target.id], kw.arg)] = compiler

    def _compiler_of(self, expr) -> Optional[str]:
        if expr.__class__ is not ast.Call:
            return None
        qualname = self.ctx.qualname(expr.func) or ""
        return qualname if qualname.startswith(_KERNEL_COMPILERS) else None

    def _made_by(self, expr, scope) -> Optional[str]:
        """The compiler of the callable ``expr`` is (a compiler's call, a name bound to
        one, a call of a factory of this file)."""
        found = self._compiler_of(expr)
        if found:
            return found
        if expr.__class__ is ast.Name:
            return self.names.get((scope, expr.id))
        if expr.__class__ is ast.Call and expr.func.__class__ is ast.Name:
            return self.factories.get(expr.func.id)
        return None

    def called(self, call: ast.Call) -> Optional[str]:
        func = call.func
        if func.__class__ is not ast.Name or not (self.names or self.parameters):
            return None
        scope = self.ctx.enclosing_function(call)
        found = self.names.get((scope, func.id))
        if found is None and scope is not None:
            found = self.parameters.get((scope, func.id))
        return found


class CallSurvey:
    """One file's registrations and uses, gathered call by call during the walk."""

    def __init__(self):
        self.uses: list[Use] = []
        #: ``[module, name, kind]`` of each registration in the file
        self.registrations: list[list] = []
        self._functions: Optional[dict] = None
        self._extensions: Optional[set] = None
        self._aliases: Optional[dict] = None

    def add_call(self, node: ast.Call, ctx) -> None:
        func = node.func
        last = last_name(func)
        if last is None:
            return
        if last in REGISTER:
            reg = registration(node, ctx)
            if reg is not None:
                self.registrations.append(reg)
            return
        if last == "apply" and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            name = func.value.id
            if name in self.function_classes(ctx):
                self.uses.append(Use(node, "function", name))
            elif node.args and name[:1].isupper() and _imported_function(ctx, name):
                self.uses.append(Use(node, "imported function", ctx.imports[name]))
            return
        if isinstance(func, ast.Name) and func.id in self.apply_aliases(ctx):  # sparsemax = SparsemaxFunction.apply
            self.uses.append(Use(node, "function", self.apply_aliases(ctx)[func.id]))
            return
        if isinstance(func, ast.Name):
            compiler = ctx.get(CompiledCallables).called(node)
            if compiler is not None:  # log_conv(x, y, f) with log_conv = generic_logsumexp(...)
                self.uses.append(Use(node, "extension", compiler))
                return
        if isinstance(func, ast.Attribute) and isinstance(func.value, (ast.Name, ast.Attribute)):
            root = func.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in self.extensions(ctx):
                self.uses.append(Use(node, "extension", root.id))
                return
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute):
            # torch.ops.<ns>.<op>(...) and torch.ops.<ns>.<op>.<overload>(...)
            ns = func.value.value
            if isinstance(ns, ast.Attribute) and (ns.attr == "ops" or (
                    isinstance(ns.value, ast.Attribute) and ns.value.attr == "ops")):
                qualname = ctx.qualname(func)
                if qualname and qualname.startswith("torch.ops.") and qualname.count(".") >= 3:
                    self.uses.append(Use(node, "torch.ops", qualname))
                return
        if last in _OP_NAMES:
            qualname = ctx.qualname(func)
            if qualname is not None:
                fam = ops.family(qualname)
                if fam is not None:
                    module = ctx.qualname(func.value) if isinstance(func, ast.Attribute) else None
                    self.uses.append(Use(node, "op", qualname, fam, module, last))
            elif last in policy.NO_HALF_TENSOR_METHODS and isinstance(func, ast.Attribute) and not node.args:
                if not (isinstance(func.value, ast.Name) and func.value.id in ("self", "cls", "super")):
                    self.uses.append(Use(node, "op", "torch.Tensor." + last, ops.FP32_ONLY, "torch.Tensor", last))
            return

    def function_classes(self, ctx) -> dict:
        if self._functions is None:
            found = {}
            for cls in ctx.classes.values():
                for base in cls.bases:
                    if (ctx.qualname(base) or "") in _AUTOGRAD_FUNCTION:
                        found[cls.name] = cls
            grew = True
            while grew:  # subclasses of this file's Functions are Functions (entmax's bisect ones)
                grew = False
                for cls in ctx.classes.values():
                    if cls.name not in found and any(isinstance(b, ast.Name) and b.id in found for b in cls.bases):
                        found[cls.name] = cls
                        grew = True
            self._functions = found
        return self._functions

    def apply_aliases(self, ctx) -> dict:
        """Module-level names bound to a custom Function's ``apply`` (``sparsemax =
        SparsemaxFunction.apply``) -> the Function's class name."""
        if self._aliases is None:
            found = {}
            classes = self.function_classes(ctx)
            for stmt in ctx.tree.body:
                value = stmt.value if isinstance(stmt, ast.Assign) else None
                if (isinstance(value, ast.Attribute) and value.attr == "apply" and isinstance(value.value, ast.Name)
                        and value.value.id in classes):
                    found.update((t.id, value.value.id) for t in stmt.targets if isinstance(t, ast.Name))
            self._aliases = found
        return self._aliases

    def add_exports(self, ctx) -> None:
        """A public module-level alias of a custom Function's ``apply`` (``entmoid15 =
        Entmoid15.apply``) is the op the module exports: it runs in its importers' models."""
        for stmt in ctx.tree.body:
            if isinstance(stmt, ast.Assign) and any(
                    isinstance(t, ast.Name) and not t.id.startswith("_") and t.id in self.apply_aliases(ctx)
                    for t in stmt.targets):
                self.uses.append(Use(stmt.value, "function", stmt.value.value.id, exported=True))
        self.uses.extend(_listed_functions(ctx, self))


    def extensions(self, ctx) -> set:
        if self._extensions is None:
            found = set()
            for local, target in ctx.imports.items():
                last = target.rsplit(".", 1)[-1]
                if last.endswith(_EXT_SUFFIXES) and not target.startswith("torch"):
                    found.add(local)
            for node in ctx.import_nodes():  # `from . import _C`, `from ._ext import fused`
                if isinstance(node, ast.ImportFrom) and node.level:
                    module_is_ext = (node.module or "").rsplit(".", 1)[-1].endswith(_EXT_SUFFIXES)
                    for alias in node.names:
                        if module_is_ext or alias.name.endswith(_EXT_SUFFIXES):
                            found.add(alias.asname or alias.name)
            for stmt in ctx.tree.body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
                    if (ctx.qualname(stmt.value.func) or "") in _CPP_LOADERS:
                        found.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
            self._extensions = found
        return self._extensions


def check_uses(ctx, survey: CallSurvey, registered: set) -> list[Pending]:
    """The uses of ``survey`` that no policy, registration (``registered``: (module,
    name) pairs that reach this file) or cast region covers."""
    if not survey.uses or ctx.settings.opt_level == "O0":
        return []  # O0 is fp32 throughout
    engine = ctx.settings.engine
    pending = []
    for use in survey.uses:
        if not use.exported and not _runs_in_training(ctx, use.node):
            continue
        if use.kind == "op":
            item = _check_op(ctx, use, engine, registered)
        elif use.kind == "function":
            item = _check_function(ctx, survey, use, engine, registered)
        else:
            item = _check_opaque(ctx, survey, use, engine)
        if item is not None and use.kind == "op" and _library_only(ctx, use.node):
            # the callers, in other files, decide whether it gets half: fp32 data (an STFT of
            # the waveform) is fine, half activations are not
            item = dataclasses.replace(item, severity=Severity.INFO, message=item.message + (
                " (a library function: whether its input is half depends on the models that call it)"))
        if item is not None:
            pending.append(item)
    return pending


def _library_only(ctx, node) -> bool:
    """Reached only as a library file's public function (:mod:`amplint.semantic.library`)."""
    return not ctx.in_model_code(node) and ctx.get(LibraryFunctions).runs_in_callers(ctx, node)


def _runs_in_training(ctx, node) -> bool:
    """Model code that runs after ``amp.initialize``: ``forward`` and what it calls, a
    library file's public functions (:mod:`amplint.semantic.library`), or another method
    of a module class -- not ``__init__`` / weight initialisation and
    the helpers only ``__init__`` calls (a sinusoid table built once in fp32)."""
    if ctx.in_forward(node) or ctx.get(LibraryFunctions).runs_in_callers(ctx, node):
        return True
    if not ctx.in_model_code(node):
        return False
    cls, method = ctx.enclosing_method(node)
    if method is None:
        return True
    if method.name == "__init__" or method.name.startswith(_INIT_PREFIXES):
        return False
    init = ctx.method(cls, "__init__")
    if init is not None:
        for sub in ast.walk(init):
            if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
                    and sub.func.attr == method.name and isinstance(sub.func.value, ast.Name)
                    and sub.func.value.id == "self"):
                return False
    return True


def _self_registered(ctx, name: str, registered: set) -> bool:
    """``name`` registered on this file's module (``sys.modules[__name__]`` here, or
    ``import pkg.model; amp.register_half_function(pkg.model, name)`` elsewhere)."""
    stem = _stem(ctx.path)
    for m, n in registered:
        if n != name:
            continue
        if m == "@" + ctx.path or (not m.startswith("@") and m.rsplit(".", 1)[-1] == stem):
            return True
    return False


def _check_op(ctx, use: Use, engine: str, registered: set) -> Optional[Pending]:
    node, qualname, fam, module, name = use.node, use.qualname, use.family, use.module, use.name
    if fam == ops.GEMM and ctx.settings.opt_level in ("O2", "O3"):
        return None  # the whole model is half: einsum already runs in half
    on = ops.uncovered_on(qualname, fam, engine, ctx.settings.device)
    if not on:
        return None
    func = node.func
    by_name = isinstance(func, ast.Name)
    if by_name:
        if _self_registered(ctx, name, registered):
            return None
    elif (module, name) in registered:
        return None
    if _in_cast_region(ctx, node, fam, engine):
        return None
    if _operands_fp32(ctx, node, fam):
        return None
    if fam == ops.GEMM and _position_table(ctx, node):
        return None
    short = qualname[len("torch."):] if qualname.startswith("torch.") else qualname
    shown = ctx.segment(func)
    kind = ops.register_kind(fam)
    if fam == ops.GEMM:
        cast = ops.cast(qualname, engine, "cuda")
        how = ("runs in its inputs' dtype under O1" if cast is None else
               f"is a {cast} op under O1 (fp32 when a weight is involved)")
        message = (f"`{shown}` {how}: fp32 without Tensor Cores, or `RuntimeError: expected scalar "
                   f"type ...` on mixed fp16/fp32 inputs (apex #895); register it to run in half")
        severity = Severity.INFO if short in policy.OUTER_PRODUCTS else Severity.WARNING
        tensors = _tensor_operands(node, fam)
        if tensors and all(module_state.from_module_state(ctx, t) for t in tensors):
            severity = Severity.INFO  # Mega's EMA kernel: fp32 parameters, no activation to mix with
            message += ("; here every operand comes from the module's parameters (no activation), so "
                        "under O1 it runs in fp32 with matching dtypes: no error, only no Tensor Cores")
    else:
        problem = ("has no fp16/bf16 kernel (raises on half input)" if fam == ops.FP32_ONLY else
                   "runs in half only for power-of-two sizes on CUDA, not at all on CPU")
        where = "amplint's O1" if engine == "amplint" else "torch.autocast on " + "/".join(on)
        message = f"`{shown}` {problem}, and {where} does not cast it to fp32"
        severity = Severity.ERROR if fam == ops.FP32_ONLY else Severity.WARNING
    parts = [_floated(ctx, a) for a in node.args[:1]] + [ctx.segment(a) for a in node.args[1:]]
    parts += [f"{k.arg}={ctx.segment(k.value)}" if k.arg else f"**{ctx.segment(k.value)}" for k in node.keywords]
    call = f"{shown}({', '.join(parts)})"
    if engine == "torch":
        wrap = f"with {torch_alias(ctx, unconditional=True) or 'torch'}.autocast(\"{on[0]}\", enabled=False): {call}"
        message += f"; run it in fp32: `{wrap}`"
        return Pending(node, message, severity, None, Fix((), "display", f"Wrap in fp32: `{wrap}`"))
    if ctx.settings.opt_level in ("O2", "O3"):
        # no function is patched at O2/O3: registrations do nothing, the model is half
        message = (f"`{shown}` {problem} and the model runs in half at {ctx.settings.opt_level} "
                   f"(no function is cast there); call it on fp32 input: `{call}`")
        return Pending(node, message, severity, None, Fix((), "display", f"Run it on fp32 input: `{call}`"))
    if by_name:
        if name not in module_level_names(ctx):
            return Pending(node, message + " (not imported unconditionally at module level: no automatic fix)", severity, None, None)
        message += (f"; `{name}` was imported by name, so a registration on `torch` does not reach it: "
                    f"register it on this module (`{SELF_MODULE}`)")
        return Pending(node, message, severity, Registration(SELF_MODULE, "@" + ctx.path, name, kind), None)
    if qualname.startswith("torch.Tensor."):  # a method: register on torch.Tensor
        torch_name = torch_alias(ctx, unconditional=True)
        if torch_name is None:
            return Pending(node, message, severity, None, None)
        return Pending(node, message, severity, Registration(f"{torch_name}.Tensor", module, name, kind), None)
    if not _bound_at_module_level(ctx, func.value):
        return Pending(node, message, severity, None, None)
    return Pending(node, message, severity, Registration(ctx.segment(func.value), module, name, kind), None)


def _in_cast_region(ctx, node, fam, engine) -> bool:
    """Inside a function decorated with ``@amp.*_function``, a custom Function forward
    with ``custom_fwd(cast_inputs=...)``, or (fp32-only ops) autocast disabled."""
    for anc in ctx.ancestors(node):
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in anc.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                qn = ctx.qualname(target) or ""
                last = last_name(target)
                if last in _DECORATORS and (qn.startswith(ops.AMP_MODULES) or qn == ""):
                    return True
                if qn in _CUSTOM_FWD and isinstance(dec, ast.Call) and any(k.arg == "cast_inputs" for k in dec.keywords):
                    if engine == "torch":
                        return True
        elif isinstance(anc, (ast.With, ast.AsyncWith)) and fam != ops.GEMM:
            for item in anc.items:
                expr = item.context_expr
                if not isinstance(expr, ast.Call):
                    continue
                qn = ctx.qualname(expr.func) or ""
                if qn in _AUTOCAST and any(
                    k.arg == "enabled" and isinstance(k.value, ast.Constant) and k.value.value is False
                    for k in expr.keywords
                ):
                    return True
                if last_name(expr.func) == "disable_casts" and engine == "amplint":
                    return True
    return False


def _tensor_operands(call: ast.Call, fam) -> list[ast.AST]:
    """The tensors a call works on: its receiver for a method, its positional arguments
    (an einsum's equation dropped, its tuple form unpacked)."""
    func = call.func
    if any(isinstance(a, ast.Starred) for a in call.args):
        return []  # einsum(eq, *args): the operands are not visible
    args = list(call.args)
    if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
        args = args[1:]  # einsum("ij,jk->ik", ...)
    if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        args = list(args[0].elts)
    if isinstance(func, ast.Attribute) and not args and (ctx_free_method(func)):
        args = [func.value]  # cov.inverse()
    return [a for a in args if not isinstance(a, ast.Constant)]


def ctx_free_method(func: ast.Attribute) -> bool:
    """``cov.inverse()``: a tensor method (the receiver is not a module such as ``torch``)."""
    base = func.value
    while isinstance(base, ast.Attribute):
        base = base.value
    return not (isinstance(base, ast.Name) and base.id in ("torch", "np", "numpy", "F", "nn", "opt_einsum", "oe"))


def _operands_fp32(ctx, call: ast.Call, fam) -> bool:
    """Nothing to cover: a one-operand einsum (a permutation or a trace: no GEMM), or
    operands the dtype flow knows are fp32 / fp64 (``x.float()``, a weight under O1, a
    position table built from ``arange(..., dtype=torch.float)``)."""
    tensors = _tensor_operands(call, fam)
    if fam == ops.GEMM and len(tensors) == 1 and (ctx.qualname(call.func) or "").endswith((".einsum", ".contract")):
        return True
    # a GEMM left in fp32 by an O1 upcast upstream still wants Tensor Cores: only fp32
    # the code asked for itself (a position table) is left alone
    classes = [ctx.dtype_of(t, explicit=fam == ops.GEMM) for t in tensors]
    classes = [c for c in classes if c is not DtypeClass.SCALAR]  # fft(x, n): n is a size
    return bool(classes) and all(c in (DtypeClass.FP32, DtypeClass.FP64) for c in classes)


def _position_table(ctx, call: ast.Call) -> bool:
    """An outer product of positions and frequencies (``einsum("i,j->ij", t, inv_freq)``,
    ``torch.outer(t, inv_freq)``): a position table, which wants fp32 (half loses the
    positions above 2048; AMP602 judges it), not Tensor Cores."""
    found = position_tables.outer_operands(ctx, call)
    return found is not None and found[0] in ("einsum", "outer") and any(
        positions.is_position_like(ctx, operand) for operand in found[1:])


def _listed_functions(ctx, survey: "CallSurvey") -> list:
    """Custom Functions named in the module's ``__all__`` and applied nowhere in it
    (DeBERTa's ``ops.XSoftmax``): the module exports them for its importers' models, which
    call ``.apply`` -- one use each, at the ``__all__`` entry."""
    classes = survey.function_classes(ctx)
    applied = {u.qualname for u in survey.uses if u.kind == "function"}
    out = []
    for stmt in ctx.tree.body:
        if not (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets)
                and isinstance(stmt.value, (ast.List, ast.Tuple))):
            continue
        for entry in stmt.value.elts:
            if isinstance(entry, ast.Constant) and entry.value in classes and entry.value not in applied:
                applied.add(entry.value)
                out.append(Use(entry, "function", entry.value, exported=True))
    return out


def _check_function(ctx, survey: "CallSurvey", use: Use, engine: str, registered: set) -> Optional[Pending]:
    node, cls_name = use.node, use.qualname
    cls = survey.function_classes(ctx)[cls_name]
    forward = ctx.method(cls, "forward")
    backward = ctx.method(cls, "backward")
    if forward is None:
        return None
    decorators = {}
    for dec in forward.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        qn = ctx.qualname(target) or ""
        if qn in _CUSTOM_FWD:
            decorators["custom_fwd"] = dec
        elif last_name(target) in _DECORATORS:
            decorators["amp"] = dec
    bwd_decorated = backward is not None and any(
        (ctx.qualname(d.func if isinstance(d, ast.Call) else d) or "") in _CUSTOM_BWD for d in backward.decorator_list)
    # custom_fwd counts under both policies (issue 6); amplint.amp does not honour it yet
    # (it is autocast-only), so the amplint fix also adds @amp.float_function
    if "custom_fwd" in decorators or "amp" in decorators:
        return None
    if (f"@{ctx.path}:{cls_name}", "apply") in registered:
        return None
    device = "cpu" if ctx.settings.device == "cpu" else "cuda"
    if engine == "amplint":
        message = (f"`{cls_name}.apply`: a custom autograd Function is on no O1 list: its forward gets "
                   f"fp16 or mixed inputs; decorate `forward` with `@amp.float_function` (and "
                   f"`@torch.amp.custom_fwd(device_type=\"{device}\", cast_inputs=torch.float32)` for autocast)")
    else:
        message = (f"`{cls_name}.apply`: the custom autograd Function's forward lacks "
                   f"`@torch.amp.custom_fwd(device_type=\"{device}\", cast_inputs=torch.float32)`: it gets fp16 "
                   f"inputs under autocast and its backward runs outside autocast")
    torch_name = torch_alias(ctx, unconditional=True)
    edits = []
    forward_text = ""
    if torch_name is not None and "custom_fwd" not in decorators:
        forward_text += (f"@{torch_name}.amp.custom_fwd(device_type=\"{device}\", "
                         f"cast_inputs={torch_name}.float32)\n{ctx.indentation(forward)}")
    # @amp.float_function only in a project that trains with an apex-style amp (never an
    # import of an engine the project does not use, nor a new import of apex's removed amp,
    # which AMP501 would turn into amplint's); custom_fwd alone otherwise
    amp_name, import_line = amp_alias(ctx) if engine == "amplint" and ctx.settings.amp_module else ("", "-")
    if ctx.settings.amp_module == "apex" and import_line:
        import_line = "-"
    if import_line != "-":
        anchor = fixes.import_anchor(ctx)
        if anchor is not None or not import_line:
            # closest to `def`: under O1 it casts to fp32; under autocast custom_fwd already did
            forward_text += f"@{amp_name}.float_function\n{ctx.indentation(forward)}"
            if import_line:
                edits.append(fixes.insert_lines_after(ctx, anchor, import_line))
    if forward_text:
        edits.append(Edit.insert_at(forward.lineno, forward.col_offset, forward_text))
    if torch_name is not None and backward is not None and not bwd_decorated:
        text = f"@{torch_name}.amp.custom_bwd(device_type=\"{device}\")\n{ctx.indentation(backward)}"
        edits.append(Edit.insert_at(backward.lineno, backward.col_offset, text))
    if engine == "amplint" and ctx.settings.opt_level in ("O2", "O3"):
        edits = []  # the model is half and nothing is patched: cast inside forward by hand
        message = (f"`{cls_name}.apply`: the custom autograd Function gets half inputs at "
                   f"{ctx.settings.opt_level}; cast them to fp32 inside `forward` if its kernel needs fp32")
    fix = Fix(edits, "unsafe", "Run the Function's forward in fp32 (custom_fwd / custom_bwd)") if edits else None
    keeping = function_dtypes.dtype_keeping_ops(ctx, cls)
    if keeping is not None:  # XDropout: masked_fill and a scalar multiply compute in any dtype
        done = " and ".join(keeping) if keeping else "no op"
        message = (f"`{cls_name}.apply`: a custom autograd Function on no cast list, but its forward and "
                   f"backward only do {done}, which keep the input's dtype: fp16 inputs are fine and "
                   f"nothing needs casting")
        return Pending(node, message, Severity.INFO, None, None, at=cls)
    return Pending(node, message, Severity.WARNING, None, fix, at=cls)


def _check_opaque(ctx, survey: "CallSurvey", use: Use, engine: str) -> Optional[Pending]:
    node, what, qualname = use.node, use.kind, use.qualname
    cls = ctx.enclosing_class(node)
    if cls is not None and cls.name in survey.function_classes(ctx):
        return None  # inside a custom Function: its `.apply` is what gets reported
    if what == "torch.ops":
        ns = qualname.split(".")[2]
        if ns in ("aten", "prims") and engine == "torch":
            return None  # autocast sees aten ops however they are called
        if ns == "torchvision" and engine == "torch":
            return None  # torchvision registers autocast kernels for its ops
        if ns in ("aten", "prims"):
            if ctx.settings.opt_level in ("O2", "O3"):
                return None  # nothing is patched there: the Python name is no better
            python = "torch." + qualname.split(".")[3]
            if ops.cast(python, engine, "cuda") is None:
                return None  # not cast through its Python name either
        message = (f"`{ctx.segment(node.func)}` calls a dispatcher op directly: "
                   + ("amplint's O1 patches Python functions and never sees it" if engine == "amplint" else
                      "autocast casts only ops that register an Autocast kernel")
                   + "; cast its inputs yourself (`.float()` or `.half()`)")
    elif what == "imported function":
        message = (f"`{ctx.segment(node.func)}` runs a custom autograd Function from `{qualname.rsplit('.', 1)[0]}`: "
                   f"no mixed-precision policy casts its inputs, and a kernel written for fp32 fails or "
                   f"misreads fp16; call it on fp32 inputs (`.float()`) with autocast disabled, or wrap it "
                   f"with `@torch.amp.custom_fwd(..., cast_inputs=torch.float32)`")
    else:
        message = (f"`{ctx.segment(node.func)}` calls into a compiled extension: no mixed-precision policy "
                   f"casts its inputs, and a kernel built for fp32 fails or misreads fp16; wrap it in a "
                   f"custom autograd Function with `@torch.amp.custom_fwd(..., cast_inputs=torch.float32)`")
    return Pending(node, message, Severity.WARNING, None, None)


def _bound_at_module_level(ctx, expr) -> bool:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id in module_level_names(ctx)


def after_registrations(ctx, anchor: ast.stmt) -> ast.stmt:
    """Skip the top-level registration calls right after ``anchor``."""
    body = ctx.tree.body
    i = body.index(anchor)
    while i + 1 < len(body):
        stmt = body[i + 1]
        if (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                and last_name(stmt.value.func) in REGISTER):
            i += 1
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            i += 1
        else:
            break
    return body[i]
