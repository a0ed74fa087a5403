"""AMP102 underflow-epsilon: a stabilising epsilon below the target's smallest normal number."""
from __future__ import annotations

import ast
from typing import Optional

from amplint import fixes
from amplint.analysis.calls import argument
from amplint.analysis import flow
from amplint.analysis.stabilisers import at_least_one, discarded, stabiliser_use
from amplint.analysis.constants import known_not_half, literal_text as _literal_text, normal_replacement
from amplint.dtypes import DtypeClass
from amplint.analysis.reductions import upcast_by_policy
from amplint.evaluate import Value
from amplint.numerics import FORMATS, Format, fmt
from amplint.rule import Edit, Fix, Invalid, Rule, Severity, Valid

#: functions / methods for which an argument of the form `x + eps` is a stabiliser
_CLAMPS = ("clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_min_")
_EPS_WORDS = ("eps", "epsilon", "tiny", "small", "delta", "stab", "smooth")
#: optimizers with an `eps` added to the denominator of the update, and their defaults
_OPTIMIZERS = {
    "Adam": 1e-8, "AdamW": 1e-8, "Adamax": 1e-8, "NAdam": 1e-8, "RAdam": 1e-8, "SparseAdam": 1e-8,
    "RMSprop": 1e-8, "Adagrad": 1e-10, "Adadelta": 1e-6,
    "FusedAdam": 1e-8, "FusedLAMB": 1e-6, "FusedNovoGrad": 1e-8, "FusedAdagrad": 1e-10,
}


_IMPLICIT_EPS_ATTRS = frozenset(q.rsplit(".", 1)[1] for q in flow.EPS_FUNCTIONS)


def _last_argument(call: ast.Call) -> Optional[ast.AST]:
    return max(list(call.args) + [k.value for k in call.keywords], key=lambda n: (n.end_lineno, n.end_col_offset), default=None)


def _feeds_log_or_root(ctx, clamp: ast.Call) -> bool:
    """``torch.log10(x.clamp(min=floor))``: the clamp is the argument of a log or a root."""
    parent = ctx.parent(clamp)
    if not isinstance(parent, ast.Call) or clamp not in parent.args:
        return False
    name = parent.func.attr if isinstance(parent.func, ast.Attribute) else getattr(parent.func, "id", "")
    return name in ("log", "log2", "log10", "sqrt", "rsqrt", "reciprocal")


def _has_call(expr: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) for n in ast.walk(expr))



class UnderflowEpsilon(Rule):
    code = "AMP102"
    name = "underflow-epsilon"
    summary = "A stabilising epsilon below the target's smallest normal number (fp16: 6.1e-5) vanishes in half"
    severity = Severity.WARNING
    options = ("target", "opt-level", "device", "engine")
    fix_applicability = ("safe", "unsafe")
    markers = ("torch",)
    collect_markers = ("eps", "clamp", "normalize", "cosine_similarity", "pairwise_distance", "sqrt", "log")
    docs = """
## What it does
Flags a positive constant below the target dtype's smallest normal number (fp16:
6.1e-5) used as a stabiliser in arithmetic that runs in half:

- a denominator `x / (norm + 1e-8)`, `torch.div(x, y + eps)`;
- the argument of `log`, `sqrt`, `rsqrt`, `reciprocal`: `torch.log(p + 1e-10)`,
  `torch.sqrt(var + self.eps)` in hand-written norms, `(var + eps).rsqrt()`,
  `(var + eps) ** -0.5`;
- a lower bound `x.clamp(min=1e-12)`, `clamp_min(1e-12)`;
- the `eps` argument of a hand-written normalisation module or helper function whose
  parameter is added as an epsilon (`MyLayerNorm(d, eps=1e-12)`, `l2norm(t, 1e-12)`) --
  defined in this file, in another linted file (`from .modeling import BertLayerNorm`),
  or as the `except ImportError:` fallback of a fused import (which is what runs
  without the fused package);
- an epsilon recognised by its role whatever its name: `self.e` added to a variance
  inside `sqrt`, `var.add(eps).sqrt_()`;
- the implicit epsilon of `F.normalize` (1e-12), `F.cosine_similarity` (1e-8) and
  `F.pairwise_distance` (1e-6), or one passed to them, when the operand is half and the
  policy does not run them in fp32 (O2/O3; O1 upcasts them): a zero vector gives 0/0;
- at opt level O3 (half optimizer state, no fp32 master weights): an optimizer's `eps`
  (`torch.optim.Adam(..., eps=1e-8)`, also the default).

The epsilon may be reached through names: a module constant, a default argument, the
`self.eps` a hand-written norm sets from its `__init__(..., eps=1e-6)`, a config default
(`config.layer_norm_eps`, also in another linted file). An epsilon that **becomes 0**
(below about 3e-8 in fp16) is an error; one that becomes **subnormal** (3e-8 to 6.1e-5)
a warning. Under `opt-level = "O1"`, where the operand is fp32 only because the selected
policy upcasts it (a `norm`, `pow` or softmax output) or it is an fp32 weight or buffer,
the finding is `info`: the eps is added in fp32 there and vanishes only once the model
runs in half (O2/O3, `model.half()`).

Not flagged: the `eps` of `nn.LayerNorm`, `F.layer_norm`, `nn.GroupNorm`,
`nn.BatchNorm*` and other library kernels (they add eps in fp32), `F.normalize` under O1, optimizer
`eps` below O3, anything at O0 (fp32 training), operands the shared dtype analysis
(`amplint/dtypes.py`, explicit casts only: a hand-written norm is still flagged under O1,
whose upcasts O2/O3 drop) knows are not half -- computed in fp32 (`x.float()`,
`.to(torch.float32)`, as in LLaMA's RMSNorm), integer, Python numbers (`n + 1e-16` with
`n = mask.size(0)`) -- tensors built in a module's `__init__` (before any cast to half),
code a dtype check keeps out of half, and numpy / math arithmetic.

## Why is this bad?
Measured (`docs/fp16-facts.md`): in fp16, `1e-8` and `1e-12` round to 0 and `1e-6` becomes the
subnormal 1.01e-6. `x + 1e-8` on an fp16 tensor stores 0 where `x` is 0, so the
following division or `rsqrt` gives inf and `log` gives -inf; `x.clamp(min=1e-8)` keeps
0. Subnormal epsilons survive, but with few significant bits, and are flushed to zero
where the hardware or kernel does so. By contrast `nn.LayerNorm(d, eps=1e-12).half()`
on a constant row gives 0, not inf: the fused kernel adds eps in fp32. Adam's
`eps=1e-8` underflows only when its state is half (apex O3).

## Example
```python
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-8):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
```

## Use instead
```python
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-8):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        input_dtype = x.dtype
        x = x.float()
        return (self.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(input_dtype)
```
(the norm computed in fp32 and cast back, as Llama's RMSNorm does); outside a norm, an
epsilon chosen by dtype: `x / (n + (1e-8 if n.dtype != torch.float16 else 1e-4))`.

## Fix safety
Three fixes, in order of preference; the first two keep fp32 output bit-identical, and
only the first is `safe`:

1. **A hand-written norm** (eps under `sqrt`/`rsqrt`/a negative power in a module's
   `forward`, a `*Norm*` module's denominator, or its call site `MyNorm(d, eps=1e-12)`):
   `forward` computes in fp32 and casts back (`input_dtype = x.dtype; x = x.float()` ...
   `return (...).to(input_dtype)`). In fp32 `x.float()` is `x`, so the output is
   `torch.equal` to before; in fp16 the square, variance, `+ eps` and root run in fp32,
   curing the eps underflow and the square's overflow together (tested at run time).
2. **Any other epsilon** added to, or clamping, a tensor `x`: the half-safe value for
   fp16 only, `(1e-8 if x.dtype != torch.float16 else 1e-4)`; other dtypes keep it.
   `F.normalize(x)` with its default eps gets `eps=(1e-12 if x.dtype != torch.float16 else 1e-4)`.
   It is `unsafe`: fp16 results move by up to 1e-4 / x (a contrastive loss's
   `log(p + 1e-8)` under O2: max error 0.0012 -> 0.11 on its example).
3. Only where neither can be written (no tensor to test, an O3 optimizer default): the
   plain raise to the smallest "round" normal number (fp16: `1e-4`, fp8 e4m3: `0.02`), or
   `eps=1e-4`. It is `unsafe`: its description states the fp32 change.

No fix when the constant lives in another file (fix the config there). `fix` then
`fix --unsafe-fixes` writes what `fix --unsafe-fixes` writes alone.
"""

    VALID = [
        # a bare clip() of unknown origin is not torch's
        Valid("""
            import torch
            x = clip(value=1, min_val=16)
            """),
        # the norm computes in fp32 (Qwen2/Llama RMSNorm): its eps is added in fp32
        Valid("""
            import torch
            import torch.nn as nn

            class RMSNorm(nn.Module):
                def __init__(self, d, eps=1e-6):
                    super().__init__()
                    self.eps = eps

                def forward(self, x):
                    h = x.to(torch.float32)
                    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

            class Block(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.norm = RMSNorm(64, eps=1e-6)
            """
        ),
    ]
    INVALID = [
        Invalid("""
            import torch
            def f(x):
                return x / (x.norm(dim=-1, keepdim=True) + 1e-8)
            """,
            line=3, severity="error", message="becomes 0", settings={"opt_level": "O2"},
            expected_fix="""
                import torch
                def f(x):
                    return x / (x.norm(dim=-1, keepdim=True) + (1e-8 if x.dtype != torch.float16 else 1e-4))
                """,
        ),
        Invalid("""
            import torch
            def nll(p):
                return -torch.log(p + 1e-10).mean()
            """,
            expected_fix="""
                import torch
                def nll(p):
                    return -torch.log(p + (1e-10 if p.dtype != torch.float16 else 1e-4)).mean()
                """,
        ),
        # no tensor to test the dtype of: the plain raise, unsafe
        Invalid("import torch\ndef nll(a, b):\n    return -torch.log(a * b + 1e-10).mean()\n", message="becomes 0",
                expected_fix="import torch\ndef nll(a, b):\n    return -torch.log(a * b + 1e-4).mean()\n"),
        Invalid("""
            import torch
            import torch.nn as nn
            class LayerNorm(nn.Module):
                def __init__(self, d, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                def forward(self, x):
                    u = x.mean(-1, keepdim=True)
                    s = (x - u).pow(2).mean(-1, keepdim=True)
                    return (x - u) / torch.sqrt(s + self.eps)
            """,
            line=10, severity="info", message="fp32 under O1 only",  # O1 runs pow in fp32
            expected_fix="""
                import torch
                import torch.nn as nn
                class LayerNorm(nn.Module):
                    def __init__(self, d, eps=1e-6):
                        super().__init__()
                        self.eps = eps
                    def forward(self, x):
                        input_dtype = x.dtype
                        x = x.float()
                        u = x.mean(-1, keepdim=True)
                        s = (x - u).pow(2).mean(-1, keepdim=True)
                        return ((x - u) / torch.sqrt(s + self.eps)).to(input_dtype)
                """,
        ),
    ]

    # --- helpers ---------------------------------------------------------------------

    def _format(self, ctx):
        if ctx.settings.opt_level == "O0":
            return None  # O0 trains in fp32
        return ctx.format if ctx.format.value_format else None

    def _tiny(self, ctx, expr: ast.AST, fmt_, by_name=True, any_name=False):
        """The folded value of ``expr`` when it is a positive constant below the
        format's smallest normal number."""
        if isinstance(expr, ast.Constant):
            v = expr.value
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < fmt_.smallest_normal:
                return None
        elif isinstance(expr, (ast.Name, ast.Attribute)):
            word = (expr.id if isinstance(expr, ast.Name) else expr.attr).lower()
            if not any_name and (not by_name or not (any(w in word for w in _EPS_WORDS) or word.isupper())):
                return None
        elif not isinstance(expr, ast.BinOp):
            return None
        value = ctx.evaluate(expr)
        if value is None or not isinstance(value.value, (int, float)) or not 0 < value.value < fmt_.smallest_normal:
            return None
        return value

    def _report(self, ctx, use, value, fmt_, where: str, opt_default=None, at=None, operand=None, norm=None):
        v = value.value
        zero = fmt_.underflows_to_zero(v)
        text = ctx.segment(use) if use is not None else ""
        shown = fmt(v)
        literal = isinstance(use, ast.Constant)
        desc = f"`{text}`" if literal else f"`{text}` (= {shown})" if text else f"the default eps={shown}"
        if zero:
            message = (f"{desc} becomes 0 in {fmt_.name} (below half its smallest subnormal, "
                       f"{fmt(fmt_.smallest_subnormal / 2)}): {where}")
        else:
            message = (f"{desc} is subnormal in {fmt_.name} (smallest normal {fmt(fmt_.smallest_normal)}): "
                       f"it keeps few significant bits and is flushed to 0 where denormals are: {where}")
        fix = fixes.epsilon_fix(ctx, use, value, fmt_.name, _literal_text(normal_replacement(fmt_.smallest_normal)),
                                opt_default, operand, norm)
        severity = Severity.ERROR if zero else Severity.WARNING
        if operand is not None and ctx.settings.opt_level == "O1" and ctx.dtype_of(operand).known_not_half:
            severity = Severity.INFO  # fp32 only because O1 upcasts it or it is an fp32 weight / buffer
            message += (f" (`{ctx.segment(operand)}` is fp32 under O1 only because the O1 policy or an fp32 weight "
                        "or buffer makes it so; under O2/O3 or `model.half()` it is half)")
        ctx.report(self, use if use is not None else at, message, fix=fix, related=value.origin,
                   severity=severity)

    def _runs_in_half(self, ctx, node, operand) -> bool:
        if ctx.branch_runs_in_half(node) is False:
            return False
        if ctx.settings.opt_level != "O3":
            cls = ctx.enclosing_class(node)
            if cls is not None and any("Optimizer" in ast.unparse(b) for b in cls.bases):
                return False  # optimizer state is fp32 below O3
        if operand is None:
            return True
        # the shared dtype analysis, without O1's upcasts (a hand-written norm is still one at
        # O2/O3): no finding, so no fix, on what it knows is not half; the explicit-cast
        # reading of constants.py where it does not follow a name yet (x.float().sum(), ints)
        dtype = ctx.dtype_of(operand, explicit=True)
        if dtype.known_not_half or dtype is DtypeClass.SCALAR or dtype is DtypeClass.UNKNOWN and known_not_half(ctx, operand, node):
            return False
        # a module's __init__ runs before any cast to half: buffers built there are fp32/fp64
        func = ctx.enclosing_function(node)
        return not (func is not None and func.name == "__init__" and ctx.enclosing_class(func) is not None
                    and dtype is not DtypeClass.HALF)

    # --- x + eps in a stabilising position --------------------------------------------

    def begin_file(self, ctx) -> Optional[Format]:
        """The file's state: the target's format (None: nothing to do in this file)."""
        return self._format(ctx)

    def visit_BinOp(self, node: ast.BinOp, ctx) -> None:
        if not isinstance(node.op, ast.Add):
            return
        fmt_ = ctx.state(self)
        if fmt_ is None:
            return
        for side, other in ((node.right, node.left), (node.left, node.right)):
            value = self._tiny(ctx, side, fmt_)
            if value is None and side.__class__ in (ast.Name, ast.Attribute) and stabiliser_use(ctx, node) is not None:
                # an epsilon by role, whatever its name (`self.e` of a hand-written LayerNorm)
                value = self._tiny(ctx, side, fmt_, any_name=True)
            if value is None:
                continue
            if isinstance(other, ast.Constant) or ctx.evaluate(other) is not None:
                return  # 1 + 1e-8: plain Python arithmetic
            if at_least_one(ctx, other):
                return  # log(cosh(x) + eps): the eps is never what keeps it away from 0
            use = stabiliser_use(ctx, node)
            if use is None or not self._runs_in_half(ctx, node, other):
                return
            if not use.op and not ctx.in_model_code(node) and not _has_call(other):
                return  # step / (total + 1e-8) in a schedule: Python numbers, not tensors
            self._report(ctx, side, value, fmt_, use.why, operand=other, norm=fixes.norm_forward(ctx, node, use.rooted))
            return

    # --- clamp(min=eps) and optimizers -------------------------------------------------

    def visit_Call(self, node: ast.Call, ctx) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name in _CLAMPS:
            self._clamp(node, name, ctx)
        elif name in _OPTIMIZERS and ctx.settings.opt_level == "O3":
            self._optimizer(node, name, ctx)
        elif name in ("add", "add_") and isinstance(func, ast.Attribute) and len(node.args) == 1 and not node.keywords:
            self._method_add(node, ctx)
        elif name in _IMPLICIT_EPS_ATTRS and ctx.qualname(func) in flow.EPS_FUNCTIONS:
            self._library_eps(node, ctx.qualname(func), ctx)
        elif name is not None and (node.args or node.keywords):
            self._helper_call(node, ctx)

    @classmethod
    def collect(cls, ctx):
        return flow.collect_facts(ctx, flow.EPS)

    def _method_add(self, node, ctx):
        """``var.add(self.eps).sqrt_()``: the method spelling of ``x + eps`` (timm EvoNorm)."""
        fmt_ = ctx.state(self)
        if fmt_ is None or ctx.qualname(node.func) is not None:
            return
        value = self._tiny(ctx, node.args[0], fmt_)
        if value is None:
            return
        receiver = node.func.value
        if isinstance(receiver, ast.Constant) or ctx.evaluate(receiver) is not None:
            return
        use = stabiliser_use(ctx, node)
        if use is None or not self._runs_in_half(ctx, node, receiver) or not ctx.in_model_code(node):
            return
        self._report(ctx, node.args[0], value, fmt_, use.why, operand=receiver, norm=fixes.norm_forward(ctx, node, use.rooted))

    def _helper_call(self, node, ctx):
        """``MyLayerNorm(d, eps=1e-12)`` / ``l2norm(t, eps=1e-12)``: a hand-written norm or
        helper (of this file, of another linted file) whose parameter is added as an
        epsilon in half precision.  Defaults left in place are reported where the
        helper uses them."""
        fmt_ = ctx.state(self)
        if fmt_ is None:
            return
        for sink, arg in flow.passed_arguments(ctx, node, flow.EPS, self.code):
            value = ctx.evaluate(arg)
            if value is None or not isinstance(value.value, (int, float)) or not 0 < value.value < fmt_.smallest_normal:
                continue
            if ctx.branch_runs_in_half(node) is False:
                continue
            callee = ctx.segment(node.func)
            where = "" if sink.path == ctx.path else f" ({sink.path}:{sink.line})"
            self._report(ctx, arg, value, fmt_,
                         f"`{callee}` adds its `{sink.param}` as a stabilising epsilon in half precision{where}",
                         norm=fixes.called_norm_forward(ctx, node, sink.param) if sink.path == ctx.path else None)

    def _library_eps(self, node, qualname, ctx):
        """``F.normalize`` (eps 1e-12), ``F.cosine_similarity`` (1e-8),
        ``F.pairwise_distance`` (1e-6) add their eps in the operand's dtype: in half,
        when the policy does not run them in fp32."""
        fmt_ = ctx.state(self)
        if fmt_ is None or ctx.settings.opt_level == "O1" and upcast_by_policy(qualname, ctx.settings):
            return
        keyword, position, default = flow.EPS_FUNCTIONS[qualname]
        operand = node.args[0] if node.args else None
        if operand is None or not self._runs_in_half(ctx, node, operand) or not ctx.in_model_code(node):
            return
        arg = argument(node, keyword, position)
        if arg is not None:
            value = ctx.evaluate(arg)
            if value is None or not isinstance(value.value, (int, float)) or not 0 < value.value < fmt_.smallest_normal:
                return
            self._report(ctx, arg, value, fmt_, f"`{ctx.segment(node.func)}` adds it to a norm computed in half "
                                                f"(a zero vector gives 0/0 = NaN)", operand=operand)
        elif default < fmt_.smallest_normal:
            note = "; diffusers computes F.normalize in fp32 for this reason" if qualname.endswith(".normalize") else ""
            self._report(ctx, None, Value(default), fmt_,
                         f"`{ctx.segment(node.func)}` adds its default eps to a norm computed in half (a zero vector "
                         f"gives 0/0 = NaN{note})",
                         opt_default=_last_argument(node), at=node, operand=operand)

    def _clamp(self, node, name, ctx):
        fmt_ = ctx.state(self)
        if fmt_ is None:
            return
        qn = ctx.qualname(node.func)
        if qn is not None and not qn.startswith("torch."):
            return
        if qn is not None:  # torch.clamp(x, min, max)
            target = node.args[0] if node.args else None
            bound = node.args[1] if len(node.args) > 1 else None
        elif isinstance(node.func, ast.Attribute):  # x.clamp(min)
            target = node.func.value
            bound = node.args[0] if node.args else None
        else:  # a bare `clip(...)` of unknown origin
            return
        for kw in node.keywords:
            if kw.arg == "min":
                bound = kw.value
        if bound is None:
            return
        value = self._tiny(ctx, bound, fmt_)
        if value is None and bound.__class__ in (ast.Name, ast.Attribute) and _feeds_log_or_root(ctx, node):
            value = self._tiny(ctx, bound, fmt_, any_name=True)  # log10(clamp(x, min=self.amin)): a floor by role
        if value is None or discarded(ctx, node) or not self._runs_in_half(ctx, node, target):
            return
        self._report(ctx, bound, value, fmt_, "the lower bound meant to keep values away from 0 is itself 0 (or nearly)",
                     operand=target)

    def _optimizer(self, node, name, ctx):
        qn = ctx.qualname(node.func)
        if qn is None or not (qn.startswith("torch.optim.") or qn.startswith("apex.optimizers.") or qn.startswith("amplint.")):
            return
        fmt_ = ctx.state(self)
        if fmt_ is None:
            return
        where = "at O3 the optimizer state is half (no fp32 master weights), so eps vanishes from the update's denominator"
        for kw in node.keywords:
            if kw.arg is None:
                return  # **kwargs may carry eps
            if kw.arg == "eps":
                value = self._tiny(ctx, kw.value, fmt_, by_name=True) if not isinstance(kw.value, (ast.Name, ast.Attribute)) else ctx.evaluate(kw.value)
                if value is not None and 0 < value.value < fmt_.smallest_normal:
                    self._report(ctx, kw.value, value, fmt_, where)
                return
        default = _OPTIMIZERS[name]
        if default >= fmt_.smallest_normal or len(node.args) > 3:
            return  # positional eps (rare) not modelled
        last = max(list(node.args) + [k.value for k in node.keywords], key=lambda n: (n.end_lineno, n.end_col_offset), default=None)
        if last is None:
            return
        value = Value(default)
        self._report(ctx, None, value, fmt_, where, opt_default=last, at=node)
