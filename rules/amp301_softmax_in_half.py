"""AMP301 softmax-in-half: softmax / log_softmax / softmin computed in fp16 inside forward."""
from __future__ import annotations

import ast

from amplint import fixes
from amplint.analysis import calls, reductions
from amplint.rule import Edit, Fix, Invalid, Rule, Severity, Valid

_NAMES = frozenset({"softmax", "log_softmax", "softmin", "gumbel_softmax"})
#: what each op is called as a module (the seed's "define it as a layer in __init__")
_MODULES = {"softmax": "Softmax", "log_softmax": "LogSoftmax", "softmin": "Softmin"}
_FUNCTIONS = {
    "torch.nn.functional.softmax", "torch.nn.functional.log_softmax", "torch.nn.functional.softmin",
    "torch.nn.functional.gumbel_softmax", "torch.softmax", "torch.log_softmax",
    "torch.special.softmax", "torch.special.log_softmax",
    "torch.Tensor.softmax", "torch.Tensor.log_softmax",
}


class SoftmaxInHalf(Rule):
    code = "AMP301"
    name = "softmax-in-half"
    summary = "softmax / log_softmax computed in half precision inside `forward`"
    severity = Severity.WARNING
    options = ("target", "opt-level", "device", "engine", "fix-style")
    fix_applicability = "safe"
    uses_engine = True
    markers = ("softmax", "softmin", "Softm")
    docs = """
## What it does
Flags `F.softmax`, `F.log_softmax`, `torch.softmax`, `torch.log_softmax`, `x.softmax(...)`,
`x.log_softmax(...)`, `F.softmin` and `F.gumbel_softmax` called in model code (an
`nn.Module`'s `forward`, or a function or method `forward` calls in the same file) without
`dtype=torch.float32` and on an operand that is not already fp32 (`.float()`,
`.to(torch.float32)`, an fp32 weight under O1: the shared dtype flow). Also through an alias
(`self.attn_fn = F.softmax if ...`, `functools.partial`) or `nn.Softmax(dim)(x)` built inline.

Severity follows the settings: under `opt-level = "O1"` the finding is `info` when the
selected op policy (`engine`, `device`) already runs the op in fp32 (CUDA autocast and the
bundled engine's O1 do); it is a `warning` under O2/O3 (pure half: nothing is upcast) and
on CPU autocast, which keeps softmax in fp16. At O0 nothing is reported. Scores that are
fp32 under O1 only because an fp32 buffer or weight promotes them (GPT-2's `w * self.bias`
with a `tril` buffer) are `info` under O1: O2/O3 and `model.half()` cast the buffer to half.

## Why is this bad?
The fused kernel subtracts the row maximum, so fp16 softmax does not overflow, but its
*result* is stored in fp16: any probability below 5.96e-8 (the smallest fp16 subnormal)
becomes exactly 0. Measured on CPU and on an H200: `torch.softmax(torch.tensor([0., -18.])
.half(), -1)` gives `[1, 0]` (fp32: `1.5e-8`), so a following `log` gives `-inf` and an
entropy term `(p * p.log()).sum()` gives NaN. `log_softmax` in fp16 keeps only 11
significant bits (-30.123456 is stored as -30.125). CUDA autocast returns softmax in fp32, but CPU autocast
keeps it in fp16, and under pure-half training (apex O2/O3, `model.half()`) nothing is
upcast (`docs/fp16-facts.md`).

## Example
```python
import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def forward(self, q, k, v):
        scores = q @ k.transpose(-2, -1)
        attn = F.softmax(scores, dim=-1)
        return attn @ v
```

## Use instead
`fix-style = "functional"` (default): compute in fp32 with the fused kernel and cast the
result back to the operand's dtype, so the next half matmul still gets half (an fp32
softmax meeting a half matmul would be a new crash under `model.half()`):
```python
import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def forward(self, q, k, v):
        scores = q @ k.transpose(-2, -1)
        attn = F.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
        return attn @ v
```
`fix-style = "module"` (the seed's advice: define softmax as a layer in `__init__`, so
the engine's O2 can keep it in fp32 with `keep_fp32_modules`):
```python
    def __init__(self):
        super().__init__()
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, q, k, v):
        attn = self.softmax(scores)
```

## Fix safety
Both fixes are `safe`: in fp32 they compute exactly what the original did. The module fix
needs a literal `dim` and an `__init__` that calls the base initialiser; where it cannot
be written (a helper function outside a class, no `__init__`, `F.gumbel_softmax`), the
functional fix is offered. No fix when the dtype cannot be restored (the operand has no
tensor name to take `.dtype` from) or the call passes `*args` / `**kwargs`.
No fix either for an `info` finding the engine already handles (O1 with a policy that runs
the op in fp32): the fix would round that fp32 result back to half (`x.log_softmax(-1)`
under O1: max error 0.026 after the cast back, against 0 before). Under O2/O3 the original
is half and the fix is at least as precise (tests/test_safe_fix_fp32.py runs every golden
under the engine at each level).
"""

    VALID = [
        # already fp32
        Valid("""
            import torch
            import torch.nn.functional as F
            class A(torch.nn.Module):
                def forward(self, x):
                    return F.softmax(x, dim=-1, dtype=torch.float32)
            """),
        Valid("""
            import torch.nn as nn
            import torch.nn.functional as F
            class A(nn.Module):
                def forward(self, x):
                    return F.softmax(x.float(), dim=-1)
            """),
        Valid("""
            import torch
            class A(torch.nn.Module):
                def forward(self, x):
                    x = x.to(torch.float32)
                    return x.softmax(-1)
            """),
        Valid("""
            import torch
            class A(torch.nn.Module):
                def forward(self, x):
                    return torch.log_softmax(x.type(torch.float32), 1)
            """),
        # not model code
        Valid("""
            import torch.nn.functional as F
            def probs(x):
                return F.softmax(x, dim=-1)
            """),
        Valid("""
            import torch.nn.functional as F
            class A:
                def forward(self, x):
                    return F.softmax(x, dim=-1)
            """),
        # the stable log-sum-exp is not a softmax
        Valid("""
            import torch
            class A(torch.nn.Module):
                def forward(self, x):
                    return torch.logsumexp(x, -1)
            """),
        # a module's own method, numpy
        Valid("""
            import torch
            import numpy as np
            class A(torch.nn.Module):
                def forward(self, x):
                    return self.softmax(x) + np.softmax(x)
            """),
        # pure fp32 training
        Valid("""
            import torch.nn.functional as F
            import torch.nn as nn
            class A(nn.Module):
                def forward(self, x):
                    return F.softmax(x, dim=-1)
            """,
            settings={"opt_level": "O0"},
        ),
        # a dtype we cannot see
        Valid("""
            import torch.nn as nn
            import torch.nn.functional as F
            class A(nn.Module):
                def forward(self, x, dt):
                    return F.softmax(x, dim=-1, dtype=dt)
            """),
        # the layer kept in __init__ (the module-style fix's own form); an alias of a
        # function that is not a softmax; softmax of an nn.Parameter (fp32 under O1)
        Valid("""
            import torch
            import torch.nn as nn
            import torch.nn.functional as F
            class A(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.softmax = nn.Softmax(dim=-1)
                    self.act = F.gelu
                    self.weights = nn.Parameter(torch.zeros(n))
                def forward(self, x):
                    return self.softmax(x) + self.act(x) + F.softmax(self.weights, 0)
            """),
    ]

    INVALID = [
        Invalid("""
            import torch
            import torch.nn as nn
            import torch.nn.functional as F

            class Attention(nn.Module):
                def forward(self, q, k, v):
                    scores = q @ k.transpose(-2, -1)
                    attn = F.softmax(scores, dim=-1)  # probabilities
                    return attn @ v
            """,
            line=8,
            severity="info",
            message="6e-8",
            # O1: the engine already runs softmax in fp32; a fix casting back would round
            # its result to half, so none is offered (issue 24)
            expected_fix=None,
        ),
        # O2: a warning; method form; operand with a constant scale
        Invalid("""
            import torch

            class Head(torch.nn.Module):
                def forward(self, x):
                    return (x / self.t).log_softmax(-1)
                def __init__(self):
                    super().__init__()
                    self.t = 2.0
            """,
            severity="warning",
            settings={"opt_level": "O2"},
            expected_fix="""
                import torch

                class Head(torch.nn.Module):
                    def forward(self, x):
                        return (x / self.t).log_softmax(-1, dtype=torch.float32).to(x.dtype)
                    def __init__(self):
                        super().__init__()
                        self.t = 2.0
                """,
        ),
        # torch.autocast on CPU keeps softmax in half: a warning even at O1
        Invalid("""
            import torch
            class A(torch.nn.Module):
                def forward(self, x):
                    return torch.softmax(x, 1)
            """,
            severity="warning",
            settings={"engine": "torch", "device": "cpu"},
            expected_fix="""
                import torch
                class A(torch.nn.Module):
                    def forward(self, x):
                        return torch.softmax(x, 1, dtype=torch.float32).to(x.dtype)
                """,
        ),
        # reached from forward through a helper function; gumbel_softmax takes no dtype
        Invalid("""
            import torch.nn as nn
            import torch.nn.functional as F

            def route(logits):
                return F.gumbel_softmax(logits, tau=0.5)

            class Router(nn.Module):
                def forward(self, x):
                    return route(x)
            """,
            line=5,
            severity="warning",
            settings={"opt_level": "O2"},
            expected_fix="""
                import torch.nn as nn
                import torch.nn.functional as F

                def route(logits):
                    return F.gumbel_softmax(logits.float(), tau=0.5).to(logits.dtype)

                class Router(nn.Module):
                    def forward(self, x):
                        return route(x)
                """,
        ),
        # an explicit half dtype is still half; no fix offered for it
        Invalid("""
            import torch
            class A(torch.nn.Module):
                def forward(self, x):
                    return torch.softmax(x, -1, dtype=torch.half)
            """,
            expected_fix=None,
        ),
        # module style: a layer in __init__, called in forward; existing alias `nn`
        Invalid("""
            import torch
            from torch import nn
            import torch.nn.functional as F

            class Attention(nn.Module):
                def __init__(self, d):
                    super().__init__()  # base init
                    self.proj = nn.Linear(d, d)

                def forward(self, x):
                    s = self.proj(x) @ x.transpose(-2, -1)
                    return F.softmax(s, dim=-1) @ x
            """,
            settings={"fix_style": "module", "opt_level": "O2"},
            expected_fix="""
                import torch
                from torch import nn
                import torch.nn.functional as F

                class Attention(nn.Module):
                    def __init__(self, d):
                        super().__init__()  # base init
                        self.softmax = nn.Softmax(dim=-1)
                        self.proj = nn.Linear(d, d)

                    def forward(self, x):
                        s = self.proj(x) @ x.transpose(-2, -1)
                        return self.softmax(s) @ x
                """,
        ),
        # built inline in forward (the layer is not kept in __init__): upcast, cast back
        Invalid("""
            import torch.nn as nn

            class Attention(nn.Module):
                def forward(self, scores):
                    return nn.Softmax(dim=-1)(scores)
            """,
            line=5, message="is `F.softmax` here", settings={"opt_level": "O2"},
            expected_fix="""
                import torch.nn as nn

                class Attention(nn.Module):
                    def forward(self, scores):
                        return nn.Softmax(dim=-1)(scores.float()).to(scores.dtype)
                """,
        ),
        # a local alias of softmax or another normaliser (attributes, functools.partial:
        # fixtures/dtypes/hazards.py)
    ]

    def visit_Call(self, node: ast.Call, ctx) -> None:
        call = reductions.half_call(ctx, node, _NAMES, _FUNCTIONS) or reductions.aliased_call(ctx, node, _FUNCTIONS)
        if call is None:
            return
        attr, qualname, operand, is_method, shown = call.attr, call.qualname, call.operand, call.is_method, call.shown
        severity = reductions.severity_for(ctx.settings, qualname)
        if severity is None:
            return
        note = reductions.policy_note(ctx.settings, qualname, severity)
        if call.later:
            severity, note = Severity.INFO, reductions.later_note(ctx, operand)
        if call.dtype == "low":
            message = f"`{shown}` with a half `dtype` stores probabilities in fp16 ({note}); use `dtype=torch.float32`"
            ctx.report(self, node, message, severity=severity)
            return
        # each target's own measured numbers (docs/fp16-facts.md), never fp16's under bf16
        if ctx.format.wide_exponent:
            why = ("log-probabilities keep 8 significant bits (-3.3 is stored as -3.297)" if attr == "log_softmax"
                   else "probabilities keep 8 significant bits (softmax([0, -7]) is [1, 0.000912]: 1 - p is lost)")
        elif attr == "log_softmax":
            why = "log-probabilities keep 11 significant bits (-30.123456 is stored as -30.125)"
        else:
            why = "probabilities below 6e-8 are stored as 0"
        if call.aliased:
            message = f"`{shown}` is `{qualname.replace('torch.nn.functional.', 'F.')}` here, in half inside `forward`: {why} ({note})"
        else:
            message = f"`{shown}` in half inside `forward`: {why} ({note})"
        fix = None
        if call.later or not reductions.engine_upcasts(ctx.settings, qualname):
            fix = self._fix(ctx, node, attr, operand, is_method, call.aliased)
        ctx.report(self, node, message, fix=fix, severity=severity)

    def _fix(self, ctx, node: ast.Call, attr: str, operand, is_method: bool, aliased: bool):
        if aliased:
            return self._upcast_fix(ctx, node, attr, operand)
        fix = None
        if operand is not None and not calls.has_double_star(node):
            if ctx.settings.fix_style == "module":
                fix = self._module_fix(ctx, node, attr, operand, is_method)
                if fix is False:
                    fix = None
                elif fix is None:
                    fix = self._functional_fix(ctx, node, attr, operand)
            else:
                fix = self._functional_fix(ctx, node, attr, operand)
        return fix

    # --- fixes ------------------------------------------------------------------------

    @staticmethod
    def _functional_fix(ctx, node: ast.Call, attr: str, operand: ast.AST):
        source = reductions.dtype_source(ctx, operand)
        if source is None:
            return None
        torch = calls.torch_alias(ctx)
        if attr != "gumbel_softmax" and torch is not None:
            edits = [fixes.add_keyword(node, f"dtype={torch}.float32")]
            how = f"pass `dtype={torch}.float32`"
        else:
            edits = fixes.upcast(operand)
            how = "upcast the operand with `.float()`"
        edits += reductions.cast_back_edits(ctx, node, source)
        return Fix(edits, "safe", f"Compute `{attr}` in fp32 ({how}) and cast back to `{ctx.segment(source)}.dtype`")

    @staticmethod
    def _upcast_fix(ctx, node: ast.Call, attr: str, operand: ast.AST):
        """An alias may not take ``dtype=`` (``entmax15``): upcast the operand instead."""
        source = reductions.dtype_source(ctx, operand)
        if source is None or calls.has_double_star(node):
            return None
        edits = fixes.upcast(operand) + reductions.cast_back_edits(ctx, node, source)
        return Fix(edits, "safe", f"Compute `{attr}` on an fp32 operand (`.float()`) and cast back to `{ctx.segment(source)}.dtype`")

    @staticmethod
    def _module_fix(ctx, node: ast.Call, attr: str, operand: ast.AST, is_method: bool):
        """A Fix, ``None`` when the module style cannot be written here (use the
        functional fix), or ``False`` when no fix should be offered (a non-literal dim)."""
        module = _MODULES.get(attr)
        if module is None:
            return None
        cls, method = ctx.enclosing_method(node)
        if cls is None or method is None or not ctx.is_module_class(cls) or not method.args.args:
            return None
        self_name = method.args.args[0].arg
        init = ctx.method(cls, "__init__")
        if init is None or not init.args.args:
            return None
        anchor = reductions.find_super_init(ctx, init)
        if anchor is None or ctx.line_text(anchor.lineno)[: anchor.col_offset].strip():
            return None  # no base initialiser, or one sharing its line (`def __init__(self): super()...`)
        init_self = init.args.args[0].arg
        # which arguments the call passes: the operand, the dim, nothing else
        args = list(node.args)
        if not is_method:
            args = args[1:] if args and args[0] is operand else args
        dim_node = args[0] if args else None
        if len(args) > 1:
            return False
        for kw in node.keywords:
            if kw.arg == "dim" and dim_node is None:
                dim_node = kw.value
            elif kw.arg not in ("input", "dim"):
                return False
        dim = reductions.literal_int(dim_node)
        if dim is None:
            return False
        nn = calls.nn_alias(ctx)
        if nn is None:
            return None
        assigned = reductions.class_self_assignments(cls, (init_self, self_name))
        taken = set(assigned) | {
            s.name for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        } | {
            t.id for s in cls.body if isinstance(s, (ast.Assign, ast.AnnAssign))
            for t in (s.targets if isinstance(s, ast.Assign) else [s.target]) if isinstance(t, ast.Name)
        }
        wanted = f"torch.nn.{module}"
        edits = []
        name = None
        for i in range(0, 50):
            candidate = attr if i == 0 else f"{attr}_{i}"
            values = assigned.get(candidate, [])
            if len(values) == 1 and isinstance(values[0], ast.Call) and ctx.qualname(values[0].func) == wanted:
                existing = values[0]
                existing_dim = existing.args[0] if existing.args else (
                    calls.keyword(existing, "dim").value if calls.keyword(existing, "dim") else None)
                if reductions.literal_int(existing_dim) == dim and len(existing.args) + len(existing.keywords) == 1:
                    name = candidate  # reuse the layer
                    break
            if candidate not in taken:
                name = candidate
                indent = ctx.indentation(anchor)
                text = f"{indent}{init_self}.{name} = {nn}.{module}(dim={dim})"
                if anchor.end_lineno < len(ctx.lines):
                    edits.append(Edit.insert_at(anchor.end_lineno + 1, 0, text + "\n"))
                else:
                    edits.append(Edit.insert_after(anchor, "\n" + text))
                break
        if name is None:
            return None
        edits.append(Edit.replace(node, f"{self_name}.{name}({ctx.segment(operand)})"))
        how = "reuse" if len(edits) == 1 else "define"
        return Fix(edits, "safe", f"{how.capitalize()} `{self_name}.{name} = {nn}.{module}(dim={dim})` in `__init__` and call it")
