"""AMP302 reduction-in-half: sums, products, norms, variances, exp and pow in fp16 inside forward."""
from __future__ import annotations

import ast
import re

from amplint import fixes
from amplint.analysis import calls, reductions
from amplint.rule import Fix, Invalid, Rule, Severity, Valid

#: ops whose API takes ``dtype=`` (accumulate and return in that dtype)
_DTYPE_OPS = frozenset({"sum", "nansum", "cumsum", "cumprod", "prod", "norm", "vector_norm"})
#: ops without ``dtype=``: the operand is upcast with ``.float()``
_UPCAST_OPS = frozenset({"var", "exp", "expm1", "pow"})
_NAMES = _DTYPE_OPS | _UPCAST_OPS  # `mean` cannot overflow (docs): only a square under it
_MODULES = ("torch.", "torch.Tensor.", "torch.linalg.")
_QUALNAMES = frozenset(module + name for module in _MODULES for name in _NAMES)

_WHY = {
    "sum": "a sum above 65504 is inf in fp16 (100,000 fp16 ones sum to inf)",
    "nansum": "a sum above 65504 is inf in fp16 (100,000 fp16 ones sum to inf)",
    "cumsum": "a running sum above 65504 is inf in fp16",
    "prod": "a product above 65504 is inf in fp16",
    "cumprod": "a running product above 65504 is inf in fp16",
    "norm": "a norm above 65504 is inf in fp16 (100,000 values of 300 give inf)",
    "vector_norm": "a norm above 65504 is inf in fp16 (100,000 values of 300 give inf)",
    "var": "a variance above 65504 is inf in fp16 (values spread by +-300 already overflow)",
    "exp": "exp overflows fp16 above 11.09 (exp(11.1) is inf)",
    "expm1": "expm1 overflows fp16 above 11.09 (expm1(11.1) is inf)",
}
_WHY_BF16 = {
    "sum": "a bf16 sum keeps 8 significant bits (100,000 bf16 ones sum to 99840)",
    "nansum": "a bf16 sum keeps 8 significant bits (100,000 bf16 ones sum to 99840)",
    "exp": "exp in bf16 keeps 8 significant bits and overflows above 88.7 (exp(89) is inf)",
}
#: operands that are counts, masks or indices, not activations: summing them is exact
_INTEGER_NAME = re.compile(
    r"mask|one_?hot|^is_|^has_|(^|_)(ids|idx|index|indices|count|counts|len|lens|lengths?|labels?|targets?|"
    r"valid|positions?|grid|grids|sizes?|shapes?|thw|frames|num_\w+)\d*$"
)
_INTEGER_METHODS = frozenset(
    "long int bool short byte ne eq gt lt ge le isnan isinf isfinite logical_not logical_and "
    "logical_or logical_xor any all nonzero".split()
)
#: methods through which an integer / mask tensor stays one
_SHAPE_METHODS = frozenset("flip view reshape transpose permute unsqueeze squeeze flatten roll expand contiguous "
                           "cumsum sum prod to float half double type type_as".split())
#: constructors of integer-valued tensors (a sum of them is a count)
_INTEGER_TENSORS = frozenset({"torch.nn.functional.one_hot", "torch.ones_like", "torch.ones"})
_INTEGER_DTYPES = frozenset({"torch.long", "torch.int64", "torch.int", "torch.int32", "torch.bool"})
#: consumers that make a sum's overflow harmless or show it counts (``.prod(-1) // 4``, ``int(x.sum())``)
_INTEGER_CONSUMERS = frozenset({"tolist", "item", "long", "int", "bool", "nonzero"})


def _integer_like(ctx, operand, depth: int = 0) -> bool:
    if depth > 6:
        return False
    if isinstance(operand, (ast.Compare, ast.BoolOp)):
        return True
    if isinstance(operand, ast.UnaryOp):
        return isinstance(operand.op, (ast.Invert, ast.Not)) or _integer_like(ctx, operand.operand, depth + 1)
    if isinstance(operand, ast.BinOp):
        if isinstance(operand.op, (ast.BitOr, ast.BitAnd, ast.BitXor, ast.FloorDiv)):
            return True
        if isinstance(operand.op, (ast.Add, ast.Sub)):  # `(1 - attention_mask)`
            sides = (operand.left, operand.right)
            return all(isinstance(x, ast.Constant) or _integer_like(ctx, x, depth + 1) for x in sides)
        return False
    if isinstance(operand, ast.Call) and ctx.qualname(operand.func) in _INTEGER_TENSORS:
        return True
    if isinstance(operand, ast.Call) and isinstance(operand.func, ast.Attribute):
        if operand.func.attr in _INTEGER_METHODS:
            return True
        if operand.func.attr in _SHAPE_METHODS:
            return _integer_like(ctx, operand.func.value, depth + 1)
        return False
    base = operand
    while isinstance(base, (ast.Attribute, ast.Subscript)):
        if isinstance(base, ast.Attribute) and _INTEGER_NAME.search(base.attr):
            return True
        base = base.value
    return isinstance(base, ast.Name) and bool(_INTEGER_NAME.search(base.id))


def _integer_consumer(ctx, call) -> bool:
    parent = ctx.parent(call)
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.FloorDiv, ast.Mod)):
        return True
    if isinstance(parent, ast.Compare):
        return True
    if isinstance(parent, ast.Attribute) and parent.attr in _INTEGER_CONSUMERS:
        return True
    grand = ctx.parent(parent) if isinstance(parent, ast.Attribute) and parent.attr in ("to", "type") else None
    if isinstance(grand, ast.Call) and grand.args and ctx.qualname(grand.args[0]) in _INTEGER_DTYPES:
        return True  # `.sum(dim=1).to(torch.long)`
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in ("int", "bool", "len", "range"):
        return True
    return False


class ReductionInHalf(Rule):
    code = "AMP302"
    name = "reduction-in-half"
    summary = "sum / prod / norm / var / exp / pow computed in half precision inside `forward`"
    severity = Severity.WARNING
    options = ("target", "opt-level", "device", "engine")
    fix_applicability = "safe"
    uses_engine = True
    markers = ("sum", "prod", "norm", "var(", "exp", "pow", "mean", "square")
    docs = """
## What it does
Flags, in model code (an `nn.Module`'s `forward` and what it calls in the same file),
range-growing operations on possibly-half tensors without fp32 accumulation:
`sum`, `nansum`, `cumsum`, `cumprod`, `prod`, `norm` / `torch.linalg.vector_norm` /
`torch.linalg.norm`, `var`, `exp` / `expm1`, and `pow` with a constant exponent above 1, as tensor methods or `torch.*` functions, and squares summed or averaged (`x ** 2`, `x * x`, `torch.square`). Not flagged: an operand already fp32 (`.float()`,
`.to(torch.float32)`), a call with `dtype=torch.float32`, sums of masks, one-hot rows and
counts, weighted averages (a sum along a dimension of values times softmax or
`w / w.sum()` weights: no larger than the largest value), sums along a `torch.stack`'s
own dimension or a `view` dimension of at most 16 (`a + b`, not a long reduction), sums
of looked-up `nn.Embedding` rows over the fields (`self.fc(ids).sum(1)`) unless squared,
`exp` of a value clamped below 11.09, `torch.logsumexp` and `exp(x - x.max(...))`
(stable forms), and the exp / sum of a hand-written softmax (AMP303 reports those).

`mean` is not reported: fp16 `mean` accumulates in fp32 and its result cannot leave the
inputs' range -- measured on CPU (PyTorch 2.13) and on an H200 (PyTorch 2.11), the mean of
100,000 fp16 values of 300 is exactly 300 while their sum is `inf` -- so it never
overflows, and its rounding to fp16 is the rounding of any half activation. What can
overflow under a mean is a square (`(x - u).pow(2).mean(-1)`, `torch.mean(d ** 2)`): the
square is reported.
`std` is not reported for the same reason (fp16 `std` of values around +-300 is about 300
on both, while their `var` is `inf`).

Severity: under `opt-level = "O1"` an op the selected policy (`engine`, `device`) already
runs in fp32 is `info`; under O2/O3 (pure half) or on CPU autocast, which keeps `sum` in
fp16, it is a `warning`. With `target = "bf16"` every finding is `info` (bf16 has fp32's
exponent range).

## Why is this bad?
fp16's largest value is 65504. `torch.full((100000,), 1.0, dtype=torch.half).sum()` is
`inf`; with `dtype=torch.float32` it is 100000 (`docs/fp16-facts.md`). Measured in fp16
on CPU and on an H200: the variance of values around +-300 is `inf`, the norm of 100,000
values of 300 is `inf`, `exp(11.1)` is `inf` (`exp(11)` is 59872), `257 ** 2` is `inf`, the
cumulative sum of 100,000 ones is `inf`. CUDA autocast returns `sum`, `cumsum`, `prod`,
`norm`, `exp` and `pow` in fp32 but keeps `mean`, `var` and `std` in fp16 (measured, H200);
CPU autocast keeps all of them in fp16, and under pure-half training (apex O2/O3,
`model.half()`) nothing is upcast.

## Example
```python
import torch
from torch import nn


class Pool(nn.Module):
    def forward(self, x):
        return x / x.norm(dim=-1, keepdim=True)
```

## Use instead
Accumulate in fp32 and cast back where the value is bounded again (the normalising
division), so the rest of a half model still sees half:
```python
import torch
from torch import nn


class Pool(nn.Module):
    def forward(self, x):
        return (x / x.norm(dim=-1, keepdim=True, dtype=torch.float32)).to(x.dtype)
```

## Fix safety
The fix is `safe` (in fp32 it computes exactly what the original did). It passes
`dtype=torch.float32` where the API takes it (`sum`, `cumsum`, `prod`, `norm`...) and
upcasts the operand with `.float()` where it does not (`var`, `exp`, `pow`). It is offered
only where the result reaches a bounding division (or a product with its `rsqrt`) in the
same expression, or an in-place `w /= w.sum(...)` (the target keeps its dtype): casting an
unbounded sum back to fp16 would overflow again, and leaving it fp32 would crash the next
half matmul under `model.half()`. No fix for an `info` finding the engine already runs in
fp32 (O1 and an upcasting policy): casting its result back would make it less precise.
"""

    VALID = [
        Valid("""
            import torch
            class P(torch.nn.Module):
                def forward(self, x):
                    return x.sum(1, dtype=torch.float32)
            """),
        Valid("""
            import torch
            class P(torch.nn.Module):
                def forward(self, x):
                    return x.float().norm(dim=-1)
            """),
        Valid("""
            import torch
            class P(torch.nn.Module):
                def forward(self, x, attention_mask):
                    return attention_mask.sum(-1) + (x > 0).sum()
            """),
        Valid("""
            import torch
            class P(torch.nn.Module):
                def forward(self, x):
                    return torch.logsumexp(x, -1) + torch.exp(x - x.max(-1, keepdim=True).values)
            """),
        Valid("""
            import torch
            class P(torch.nn.Module):
                def forward(self, x):
                    return x.std(-1) + x.pow(0.5) + sum([1, 2])
            """),
        Valid("""
            import torch
            def total(x):
                return x.sum()
            """),
        Valid("""
            import torch
            import numpy as np
            class P(torch.nn.Module):
                def forward(self, x):
                    return np.sum(x) + np.linalg.norm(x)
            """),
        # counts, shapes and masks: exact in fp16, or consumed as integers
        Valid("""
            import torch
            class P(torch.nn.Module):
                def forward(self, x, grid_thw, attention_mask):
                    a = (grid_thw.prod(-1) // 4).tolist()
                    b = (1 - attention_mask).sum(-1)
                    c = attention_mask.flip([-1]).cumsum(-1)
                    d = int(x.sum())
                    return (x.sum(-1) != 0), a, b, c, d
            """),
        Valid("""
            import torch
            class P(torch.nn.Module):
                def forward(self, x, row_max):
                    return torch.exp(x - row_max - 1e4)
            """),
        # a hand-written softmax is AMP303's
        Valid("""
            import torch
            class P(torch.nn.Module):
                def forward(self, x):
                    return torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)
            """),
        # squares of fp32 tensors, of loader data, and a square that is not reduced
        Valid("""
            import torch
            class P(torch.nn.Module):
                def forward(self, x, targets):
                    h = x.float()
                    return (h * h).mean(-1), torch.sum(targets ** 2, -1), x ** 2
            """),
        # a softmax-weighted average, a sum of stacked branches (O2: would be warnings)
        Valid("""
            import torch
            class R(torch.nn.Module):
                def forward(self, x, e, a, b):
                    return (x * e.softmax(1)).sum(1) + torch.stack([a, b], 1).sum(1)
            """, settings={"opt_level": "O2"}),
        # a mean cannot overflow, even in pure half (O2): not reported
        Valid("""
            import torch
            class R(torch.nn.Module):
                def forward(self, x):
                    return x.mean((2, 3)) + torch.mean(x, -1, keepdim=True)
            """, settings={"opt_level": "O2"}),
    ]

    INVALID = [
        Invalid("""
            import torch
            import torch.nn as nn

            class Pool(nn.Module):
                def forward(self, x):
                    x = x / x.norm(dim=-1, keepdim=True)  # unit length
                    return x
            """,
            line=6,
            severity="info",
            message="65504",
            # O1: the engine already runs norm in fp32; casting back would round the
            # unit vector to half, so no fix (under O2 the fix below is written)
            expected_fix=None,
        ),
        # O2: a warning; masked mean pooling: the division bounds the sum
        Invalid("""
            import torch

            class Pool(torch.nn.Module):
                def forward(self, h, mask):
                    return (h * mask).sum(1) / mask.sum(1).clamp(min=1)
            """,
            severity="warning",
            settings={"opt_level": "O2"},
            expected_fix="""
                import torch

                class Pool(torch.nn.Module):
                    def forward(self, h, mask):
                        return ((h * mask).sum(1, dtype=torch.float32) / mask.sum(1).clamp(min=1)).to(h.dtype)
                """,
        ),
        # RMS norm by hand: pow upcast, bounded by the product with rsqrt
        Invalid("""
            import torch

            class RMSNorm(torch.nn.Module):
                def forward(self, x):
                    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
            """,
            count=1,  # the pow (a warning on CPU autocast); the mean around it cannot overflow
            settings={"engine": "torch", "device": "cpu"},
            expected_fix="""
                import torch

                class RMSNorm(torch.nn.Module):
                    def forward(self, x):
                        return (x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
                """,
        ),
        Invalid("""
            import torch
            class G(torch.nn.Module):
                def forward(self, x):
                    return torch.pow(x, 3.0)
            """,
            severity="warning",
            message="|x| above 40.31",
            settings={"engine": "torch", "device": "cpu"},
            expected_fix=None,
        ),
        # exp in a helper forward calls; no bounding point: no fix
        Invalid("""
            import torch

            def scale(s):
                return s.exp()

            class Clip(torch.nn.Module):
                def forward(self, a):
                    return a * scale(a)
            """,
            line=4,
            message="11.09",
            expected_fix=None,
        ),
        # a cumulative sum that flows on unbounded: reported, no fix
        Invalid("""
            import torch
            class C(torch.nn.Module):
                def forward(self, x):
                    return torch.cumsum(x, dim=1)
            """,
            severity="warning",
            settings={"opt_level": "O3"},
            expected_fix=None,
        ),
        # an in-place renormalisation: the target keeps its dtype, no cast back needed
        Invalid("""
            import torch
            class Router(torch.nn.Module):
                def forward(self, w):
                    w /= w.sum(dim=-1, keepdim=True)
                    return w
            """,
            settings={"opt_level": "O2"},
            expected_fix="""
                import torch
                class Router(torch.nn.Module):
                    def forward(self, w):
                        w /= w.sum(dim=-1, keepdim=True, dtype=torch.float32)
                        return w
                """,
        ),
        # an explicit `dtype=None` is the default: its value is replaced
        Invalid("""
            import torch
            class P(torch.nn.Module):
                def forward(self, x):
                    return x / torch.sum(x, -1, keepdim=True, dtype=None)
            """,
            settings={"opt_level": "O2"},
            expected_fix="""
                import torch
                class P(torch.nn.Module):
                    def forward(self, x):
                        return (x / torch.sum(x, -1, keepdim=True, dtype=torch.float32)).to(x.dtype)
                """,
        ),
        # var has no dtype argument: the operand is upcast
        Invalid("""
            import torch
            class N(torch.nn.Module):
                def forward(self, x):
                    return (x - x.mean(0)) / x.var(0).sqrt()
            """,
            count=1,  # the var; the mean cannot overflow
            settings={"opt_level": "O2"},
            expected_fix="""
                import torch
                class N(torch.nn.Module):
                    def forward(self, x):
                        return ((x - x.mean(0)) / x.float().var(0).sqrt()).to(x.dtype)
                """,
        ),
        # the square of a hand-written variance: a warning (x * x stays half under O1);
        # the fix computes the statistic in fp32 and casts back where it is bounded
    ]

    def visit_Call(self, node: ast.Call, ctx) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr == "square":
            self._square(node, ctx)
            return
        call = reductions.half_call(ctx, node, _NAMES, _QUALNAMES)
        if call is None or call.operand is None:
            return
        attr, qualname, operand, is_method, shown = call.attr, call.qualname, call.operand, call.is_method, call.shown
        if attr in ("sum", "nansum", "cumsum", "prod", "cumprod") and (
            _integer_like(ctx, operand) or _integer_consumer(ctx, node)
        ):
            return
        if isinstance(operand, ast.Constant) or reductions.bounded_reduction(ctx, node, attr, operand, is_method):
            return
        if attr in ("sum", "nansum", "cumsum") and reductions.sum_of_few_terms(ctx, node, operand, is_method):
            return
        exponent = None
        if attr == "pow":
            value = ctx.evaluate(calls.argument(node, "exponent", 0 if is_method else 1) or ast.Constant(None))
            if value is None or value.value <= 1:
                return
            exponent = value.value
        if attr in ("exp", "sum") and reductions.in_handwritten(ctx, node):
            return
        if attr in ("exp", "expm1") and reductions.max_subtracted(ctx, operand):
            return
        limit = reductions.upper_bound(ctx, operand) if attr in ("exp", "expm1") else None
        if limit is not None and limit < (88.7 if ctx.settings.target == "bf16" else 11.09):
            return  # `logit_scale.clamp(max=math.log(100)).exp()`: at most 100
        severity = reductions.severity_for(ctx.settings, qualname)
        if severity is None:
            return
        if ctx.format.wide_exponent:  # fp32's range: the cost is precision (docs/fp16-facts.md)
            why = _WHY_BF16.get(attr, "its result keeps 8 significant bits in bf16")
        else:
            why = _WHY.get(attr) or f"x ** {exponent:g} overflows fp16 for |x| above {65504 ** (1 / exponent):.4g}"
        note = reductions.policy_note(ctx.settings, qualname, severity)
        if call.later:
            severity, note = Severity.INFO, reductions.later_note(ctx, operand)
        message = f"`{shown}` in half inside `forward`: {why} ({note})"
        fix = self._fix(ctx, node, attr, operand) if call.later or not reductions.engine_upcasts(ctx.settings, qualname) else None
        ctx.report(self, node, message, fix=fix, severity=severity)

    def visit_BinOp(self, node: ast.BinOp, ctx) -> None:
        self._square(node, ctx)

    def _square(self, node, ctx) -> None:
        """``x ** 2`` / ``x * x`` / ``torch.square(x)`` summed or averaged in half: the
        square of a hand-written norm or variance overflows for |x| above 255.9."""
        operand = reductions.squared_operand(ctx, node)
        if operand is None or not reductions.square_reduced(ctx, node) or not ctx.in_model_forward(node):
            return
        bound = ctx.magnitude_bound(operand)  # |x| below 255.9 (unit vectors) squares below 65504
        if ctx.dtype_of(operand).known_not_half or isinstance(operand, ast.Constant) or bound is not None and bound < 255.9:
            return
        qualname = ("torch.Tensor.__pow__" if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow)
                    else "torch.Tensor.__mul__" if isinstance(node, ast.BinOp) else "torch.square")
        severity = reductions.severity_for(ctx.settings, qualname)
        if severity is None:
            return
        note = reductions.policy_note(ctx.settings, qualname, severity)
        message = (f"`{ctx.segment(node)}` squares in half before a sum / mean (a hand-written norm or variance): "
                   f"x ** 2 overflows fp16 for |x| above 255.9 ({note}); compute the statistic in fp32")
        fix = None if reductions.engine_upcasts(ctx.settings, qualname) else self._fix(ctx, node, "square", operand)
        ctx.report(self, node, message, fix=fix, severity=severity)

    @staticmethod
    def _fix(ctx, node: ast.AST, attr: str, operand: ast.AST):
        if isinstance(node, ast.Call) and calls.has_double_star(node):
            return None
        point = reductions.bounding_point_through_names(ctx, node)
        if point is None:
            return None
        source = reductions.dtype_source(ctx, operand)
        if source is None:
            return None
        torch = calls.torch_alias(ctx)
        if attr in _DTYPE_OPS and torch is not None and isinstance(node, ast.Call):
            edits = [fixes.add_keyword(node, f"dtype={torch}.float32")]
            how = f"`dtype={torch}.float32`"
        else:
            edits = reductions.upcast_edits(ctx, operand)
            how = "`.float()` on the operand"
        edits += reductions.cast_back_edits(ctx, point, source)
        return Fix(edits, "safe", f"Compute `{attr}` in fp32 ({how}) and cast the bounded result back to `{ctx.segment(source)}.dtype`")
