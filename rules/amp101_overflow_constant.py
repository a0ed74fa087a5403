"""AMP101 overflow-constant: a constant beyond the target dtype's range used as a tensor value."""
from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from amplint.analysis.constants import (
    feeds_softmax,
    float_cast_name,
    fp32_evidence,
    origin_has_default,
    tensor_name,
)
from amplint.dtypes import dtype_literal
from amplint.evaluate import Value
from amplint.numerics import FORMATS, Format, fmt
from amplint.fixes import finfo_text
from amplint.analysis.calls import argument
from amplint.analysis import flow
from amplint.rule import Edit, Fix, Invalid, Rule, Severity, Valid

_FILL_METHODS = ("masked_fill", "masked_fill_", "fill_", "new_full", "full", "full_like", "where", "clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_max", "clamp_min_", "clamp_max_")
_ONES = frozenset({"torch.ones_like", "torch.ones", "torch.full_like"})
_NON_TENSOR_CALLS = ("len", "int", "float", "round", "abs", "min", "max", "sum", "range", "str", "bool")
_NON_TENSOR_MODULES = ("time.", "math.", "numpy.", "random.", "datetime.", "os.", "sys.")


@dataclasses.dataclass(frozen=True)
class _Overflow:
    """A use whose value overflows: ``at`` is the expression to report and replace (for
    ``-1e4 if half else -1e9``, the branch that runs in half)."""

    at: ast.AST
    value: Value


class OverflowConstant(Rule):
    code = "AMP101"
    name = "overflow-constant"
    summary = "A constant beyond the target dtype's range (fp16: 65504) is used as a tensor value"
    severity = Severity.ERROR
    options = ("target", "opt-level")
    fix_applicability = ("safe", "unsafe")
    markers = ("torch",)
    collect_markers = ("masked_fill", "mask")
    docs = """
## What it does
Flags a number whose magnitude exceeds the largest finite value of the target dtype
(fp16: 65504; fp8 e4m3: 448; bf16 has fp32's range, so nothing is flagged for
`target = "bf16"`) where it becomes a tensor value:

- `x.masked_fill(mask, -1e9)`, `masked_fill_`, `x.fill_(-1e9)`, `x.new_full(..., -1e9)`,
  `torch.full(..., -1e9, dtype=x.dtype)`, `torch.full_like(x, -1e9)`;
- `torch.where(mask, x, -1e9)`, `x[mask] = -1e9`;
- tensor arithmetic: `x + (-1e9)`, additive masks `(1.0 - mask) * -1e9`, `x -= 1e9`;
- `x.clamp(max=1e10)`, `clamp(min=-1e10)`, `clamp_min` / `clamp_max` / `clip`.

The constant may be written at the use or reached through a name: a module constant
(`NEG_INF = -1e9`), a default argument (`def attention(q, k, v, mask_value=-1e9)`),
`self.attr` set in `__init__`, or a config-class default used as `config.attr` -- also
when the config class lives in another linted file -- or a module constant of another
linted file (`constant.INFINITY_NUMBER`), a value the callers in the file pass (a dict
of keyword arguments, `config.attr = ...` set before the call). The finding points at
the use and its related locations name the definitions.

Calls into helpers are followed too: a function (of this file or another linted one)
whose parameter reaches a `masked_fill` value or an additive mask gets the value a call
passes checked (`masked_scores(s, m, -1e9)`), and a table of library helpers that fill
with a default (allennlp 0.9 `util.masked_softmax(..., memory_efficient=True)`: -1e32,
`util.masked_max`: -1e7, `util.replace_masked_values`) reports the call that leaves the
default in place.

Not flagged: values that fit (`-1e4`, `-65500`, `torch.finfo(x.dtype).min`), infinities
(see AMP103), `torch.full` without a `dtype` (it makes fp32), anything at opt level O0
(fp32 training), and code a dtype check
keeps out of half: in `if x.dtype == torch.float16: ... else: -1e30` or
`-1e4 if x.dtype == torch.half else -1e9` only the branch that runs in half counts.

## Why is this bad?
Measured on fp16 tensors (CPU and CUDA; `docs/fp16-facts.md`):

- `x.masked_fill(m, -1e9)` raises `RuntimeError: value cannot be converted to type
  c10::Half without overflow` -- for any magnitude above 65504, even -65519. The same
  happens inside `torch.autocast`, where attention scores come out of a matmul as fp16.
- `torch.full(..., -1e9, dtype=torch.half)`, `x.fill_(-1e9)`, `x.new_full(...)`,
  `torch.full_like(x, -1e9)` and `x.clamp(max=1e10)` raise the same error.
- `x[m] = -1e9`, `x + (-1e9)` and `(1.0 - mask) * -1e9` silently give `-inf`;
  `torch.where(m, x, -1e9)` gives `-inf` on CPU and raises on CUDA. An `-inf` score turns
  a fully masked softmax row into NaN, and `0 * -inf` is NaN.

## Example
```python
import torch


def attention(scores, mask):
    scores = scores.masked_fill(mask == 0, -1e9)
    return scores.softmax(dim=-1)
```

## Use instead
```python
import torch


def attention(scores, mask):
    scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
    return scores.softmax(dim=-1)
```

## Fix safety
The fix writes `torch.finfo(<tensor>.dtype).min` (`.max` for positive constants), naming
the tensor the value goes into: the receiver of `masked_fill` / `fill_` / `new_full` /
`clamp`, the other branch of `torch.where`, the subscripted tensor, the `dtype=` of
`torch.full`, or the other operand of the arithmetic.

- `safe` for `masked_fill` / `where` / `x[m] = ...` whose result feeds a softmax in the
  same function: in fp32, `exp(-1e9 - max)` and `exp(finfo.min - max)` are both exactly 0,
  and a fully masked row is uniform either way, so the fp32 output is unchanged.
- `unsafe` for everything else, above all additive use: `finfo(fp16).min` plus a score
  below about -16 rounds past -65504 to `-inf`, so a mask added to scores (or two masks
  added together, [transformers#17306](https://github.com/huggingface/transformers/pull/17306)) can still overflow. Check additive masks by hand;
  `-1e4` (BERT's original constant) is often the better value there.
- No fix when the tensor cannot be named (the receiver is a call), when the constant comes
  through a parameter or config default (a caller may pass another value; fix the
  definition instead), or when `torch` is not imported.
"""

    VALID = [
        Valid("""
            import torch
            def f(x, m):
                return x.masked_fill(m, -1e4)
            """),
        Valid("""
            import torch
            def f(x, m):
                return x.masked_fill(m, -65500)
            """),
        Valid("""
            import torch
            def f(x, m):
                return x.masked_fill(m, torch.finfo(x.dtype).min)
            """),
        Valid("""
            import torch
            def f(x, m):
                return x.masked_fill(m, float('-inf'))
            """),
        Valid("""
            import torch
            def f(x, m):
                return x.masked_fill(m, -1e9)
            """, settings={"target": "bf16"}),
        Valid("""
            import torch
            def f(x, m):
                return x.masked_fill(m, -1e9)
            """, settings={"opt_level": "O0"}),
        Valid("""
            import torch
            def f(x, m):
                if x.dtype == torch.float16:
                    return x.masked_fill(m, -1e4)
                else:
                    return x.masked_fill(m, -1e30)
            """
        ),
        Valid("""
            import torch
            def f(x, m):
                fill = -1e4 if x.dtype in (torch.float16, torch.bfloat16) else -1e9
                return x.masked_fill(m, fill)
            """
        ),
    ]
    INVALID = [
        Invalid("""
            import torch
            def attend(scores, mask):
                scores = scores.masked_fill(mask == 0, -1e9)
                return torch.softmax(scores, dim=-1)
            """,
            line=3,
            message="`-1e9` exceeds float16's largest value (65504)",
            expected_fix="""
                import torch
                def attend(scores, mask):
                    scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
                    return torch.softmax(scores, dim=-1)
                """,
        ),
        Invalid("""
            import torch.nn.functional as F
            import torch as th
            def attend(s, m):
                return F.softmax(s.masked_fill_(m, value=-1e10), -1)
            """,
            expected_fix="""
                import torch.nn.functional as F
                import torch as th
                def attend(s, m):
                    return F.softmax(s.masked_fill_(m, value=th.finfo(s.dtype).min), -1)
                """,
        ),
        Invalid("""
            import torch
            NEG_INF = -1e9
            def f(x, m):
                return x.masked_fill(m, NEG_INF).softmax(-1)
            """,
            line=4,
            message="NEG_INF",
            expected_fix="""
                import torch
                NEG_INF = -1e9
                def f(x, m):
                    return x.masked_fill(m, torch.finfo(x.dtype).min).softmax(-1)
                """,
        ),
        # reached through a default argument: finding, but no fix (a caller may pass another value)
        Invalid("""
            import torch
            def attention(q, k, v, mask, mask_value=-1e9):
                s = (q @ k.T).masked_fill(mask, mask_value)
                return s.softmax(-1) @ v
            """,
            line=3,
            message="mask_value",
            expected_fix=None,
        ),
        # self.attr from an __init__ default
        Invalid("""
            import torch
            class Attn(torch.nn.Module):
                def __init__(self, fill=-1e9):
                    super().__init__()
                    self.fill = fill
                def forward(self, s, m):
                    return s.masked_fill(m, self.fill).softmax(-1)
            """,
            line=7,
            expected_fix=None,
        ),
    ]

    def begin_file(self, ctx) -> Optional[Format]:
        """The file's state: the target's format (None: nothing to do in this file)."""
        if ctx.settings.opt_level == "O0":
            return None  # O0 trains in fp32
        if ctx.format.wide_exponent or not ctx.format.value_format:
            return None  # bf16: fp32's range; int8: quantisation, not a tensor value dtype
        return ctx.format

    # --- helpers ---------------------------------------------------------------------

    def _overflow(self, ctx, expr: ast.AST, fmt_) -> Optional[_Overflow]:
        """Where and by how much ``expr`` overflows the target, else None."""
        if expr is None:
            return None
        if isinstance(expr, ast.IfExp):  # -1e4 if x.dtype == torch.half else -1e9
            for branch in (expr.body, expr.orelse):
                found = self._overflow(ctx, branch, fmt_)
                if found is not None and ctx.branch_runs_in_half(branch) is not False:
                    return found
            return None
        if isinstance(expr, (ast.Constant, ast.UnaryOp, ast.Name, ast.Attribute, ast.BinOp, ast.Call)):
            if isinstance(expr, ast.Call) and not (isinstance(expr.func, ast.Name) and expr.func.id in ("float", "int")):
                return None
            value = ctx.evaluate(expr)
            if value is not None and isinstance(value.value, (int, float)) and fmt_.overflows(value.value):
                return _Overflow(expr, value)
        return None

    def _report(self, ctx, found: _Overflow, fmt_, what, tensor, *, safe, dtype_expr=False, receiver=None):
        use, value = found.at, found.value
        if ctx.branch_runs_in_half(use) is False:
            return
        probe = receiver if receiver is not None else None if dtype_expr else tensor
        if probe is not None and fp32_evidence(ctx, probe, use):
            return  # torch.zeros(..., dtype=torch.float) / x.float(): the tensor is fp32
        text = ctx.segment(use)
        shown = fmt(value.value)
        literal = isinstance(use, ast.Constant) or isinstance(use, ast.UnaryOp) and isinstance(use.operand, ast.Constant)
        desc = f"`{text}`" if literal else f"`{text}` (= {shown})"
        if getattr(value, "huge", False):  # an integer power too large to compute: a bound, not the number
            desc = f"`{text}` ({'below -1e308' if value.value < 0 else 'above 1e308'})"
        message = (
            f"{desc} exceeds {fmt_.name}'s largest value ({fmt(fmt_.max)}): {what}"
        )
        fix = None
        if tensor is not None and not origin_has_default(value):
            replacement = finfo_text(ctx, tensor, value.value < 0, dtype_expr)
            if replacement is not None:
                fix = Fix([Edit.replace(use, replacement)], "safe" if safe else "unsafe",
                          f"Use `{replacement}`" + ("" if safe else " (check additive use: it can still overflow when added)"))
        ctx.report(self, use, message, fix=fix, related=value.origin)

    # --- calls -----------------------------------------------------------------------

    def visit_Call(self, node: ast.Call, ctx) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name not in _FILL_METHODS:
            if name is not None:
                self._helper_call(node, ctx)
            return
        fmt_ = ctx.state(self)
        if fmt_ is None:
            return
        qn = ctx.qualname(func)
        if qn is not None and not qn.startswith("torch."):
            return  # numpy.where, numpy.full, math...
        is_function = qn is not None  # torch.where(...) rather than x.where(...)
        receiver = func.value if isinstance(func, ast.Attribute) and not is_function else None
        args, kw = node.args, {k.arg: k.value for k in node.keywords if k.arg}

        if name in ("masked_fill", "masked_fill_"):
            if is_function:  # torch.masked_fill(x, mask, value)
                target, value_expr = (args[0] if args else kw.get("input")), (args[2] if len(args) > 2 else kw.get("value"))
            else:
                target, value_expr = receiver, (args[1] if len(args) > 1 else kw.get("value"))
            found = self._overflow(ctx, value_expr, fmt_)
            if found is not None:
                safe = feeds_softmax(ctx, node, {target.id} if name.endswith("_") and isinstance(target, ast.Name) else None)
                self._report(ctx, found, fmt_,
                             "`masked_fill` raises `RuntimeError: value cannot be converted to type c10::Half without overflow` on a half tensor",
                             tensor_name(target) if target is not None else None, safe=safe, receiver=target)
        elif name == "where":
            if is_function:
                if len(args) != 3:
                    return
                cond, a, b = args
            elif receiver is not None and len(args) == 2:  # x.where(cond, other)
                a, b = receiver, args[1]
            else:
                return
            if ctx.evaluate(a) is not None and ctx.evaluate(b) is not None:
                return  # torch.where(m, 0.0, -1e10): two Python scalars make an fp32 tensor
            for value_expr, other in ((b, a), (a, b)):
                found = self._overflow(ctx, value_expr, fmt_)
                if found is not None:
                    self._report(ctx, found, fmt_,
                                 "`torch.where` gives -inf on CPU and raises on CUDA for a half tensor",
                                 tensor_name(other), safe=feeds_softmax(ctx, node), receiver=other)
        elif name in ("fill_", "new_full"):
            if receiver is None:
                return
            value_expr = args[0] if name == "fill_" and args else args[1] if len(args) > 1 else kw.get("fill_value" if name == "new_full" else "value")
            found = self._overflow(ctx, value_expr, fmt_)
            if found is not None:
                self._report(ctx, found, fmt_, f"`{name}` raises `RuntimeError` on a half tensor", tensor_name(receiver), safe=False,
                             receiver=receiver)
        elif name in ("full", "full_like"):
            if not is_function:
                return
            value_expr = args[1] if len(args) > 1 else kw.get("fill_value")
            found = self._overflow(ctx, value_expr, fmt_)
            if found is None:
                return
            dtype = kw.get("dtype")
            if name == "full":
                if dtype is None or dtype_literal(ctx, dtype) in ("float32", "float64", "int64", "int32", "bool"):
                    return  # fp32 by default
                if isinstance(dtype, ast.Attribute) and dtype.attr == "dtype" and tensor_name(dtype.value) is not None:
                    tensor, as_dtype = dtype.value, False
                elif dtype_literal(ctx, dtype) is not None:
                    tensor, as_dtype = dtype, True
                else:
                    tensor, as_dtype = None, False
            else:
                if dtype is not None and dtype_literal(ctx, dtype) in ("float32", "float64"):
                    return
                tensor, as_dtype = (tensor_name(args[0]) if args else None), False
            self._report(ctx, found, fmt_, f"`torch.{name}` raises `RuntimeError` for a half dtype", tensor, safe=False, dtype_expr=as_dtype)
        else:  # clamp / clip family
            if is_function:
                target = args[0] if args else kw.get("input")
                positional = args[1:]
            else:
                target, positional = receiver, args
            if name.startswith(("clamp_min", "clamp_max")):
                bounds = [(positional[0] if positional else kw.get("min" if "min" in name else "max"))]
            else:
                bounds = [positional[0] if positional else kw.get("min"), positional[1] if len(positional) > 1 else kw.get("max")]
            for bound in bounds:
                found = self._overflow(ctx, bound, fmt_)
                if found is not None:
                    self._report(ctx, found, fmt_, f"`{name}` raises `RuntimeError` on a half tensor",
                                 tensor_name(target) if target is not None else None, safe=False, receiver=target)

    # --- helpers that fill: masked_softmax(..., mask_fill_value=-1e32) ----------------

    @classmethod
    def collect(cls, ctx):
        return flow.collect_facts(ctx, flow.FILL)

    def _helper_call(self, node: ast.Call, ctx) -> None:
        """A call to a function whose parameter reaches a fill or a mask addition (this
        file's, another linted file's, or a library helper's): the value it passes, or
        the default it leaves in place, overflows."""
        fmt_ = ctx.state(self)
        sinks = flow.sinks_of_call(ctx, node, flow.FILL, self.code) if fmt_ is not None else ()
        if not sinks or not ctx.in_model_code(node):
            return
        callee = ctx.segment(node.func)
        for sink in (s for s in sinks if flow.call_runs_sink(ctx, node, s)):
            arg = argument(node, sink.param, sink.position)
            what = (f"`{callee}` uses its `{sink.param}` as a fill value or additive mask "
                    f"({sink.source or f'{sink.path}:{sink.line}'}): half scores overflow")
            found = self._overflow(ctx, arg, fmt_) if arg is not None else None
            if found is not None:
                self._report(ctx, found, fmt_, what, None, safe=False)
            elif arg is None and sink.source and sink.default is not None and fmt_.overflows(sink.default) \
                    and ctx.branch_runs_in_half(node) is not False:  # a linted helper's default is reported in it
                ctx.report(self, node, f"`{callee}` leaves its default `{sink.param}={fmt(sink.default)}` in place, "
                           f"beyond {fmt_.name}'s largest value ({fmt(fmt_.max)}): {what}; pass "
                           f"`{sink.param}=torch.finfo(<scores>.dtype).min`")

    # --- x[m] = -1e9 -------------------------------------------------------------------

    def visit_Assign(self, node: ast.Assign, ctx) -> None:
        if len(node.targets) != 1 or node.targets[0].__class__ is not ast.Subscript:
            return
        if not isinstance(node.value, (ast.Constant, ast.UnaryOp, ast.Name, ast.Attribute, ast.Call, ast.IfExp)):
            return
        fmt_ = ctx.state(self)
        if fmt_ is None:
            return
        found = self._overflow(ctx, node.value, fmt_)
        if found is None:
            return
        target = tensor_name(node.targets[0])
        if target is None:
            return
        produced = {target.id} if isinstance(target, ast.Name) else None
        softmax = feeds_softmax(ctx, node.value, produced)
        if not softmax and not ctx.in_model_code(node):
            return  # cfg["max_len"] = 1e6
        self._report(ctx, found, fmt_, "assigning it into a half tensor stores -inf", target, safe=softmax)

    def visit_AugAssign(self, node: ast.AugAssign, ctx) -> None:
        if not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            return
        fmt_ = ctx.state(self)
        if fmt_ is None:
            return
        found = self._overflow(ctx, node.value, fmt_)
        if found is None or not ctx.in_model_code(node):
            return
        self._report(ctx, found, fmt_, "half tensor arithmetic with it gives inf",
                     tensor_name(node.target), safe=False)

    # --- arithmetic ------------------------------------------------------------------

    def visit_BinOp(self, node: ast.BinOp, ctx) -> None:
        if not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            return
        left, right, candidates = node.left, node.right, []  # cheap: one side must look like a constant
        for side, other in ((right, left), (left, right)):
            if isinstance(side, (ast.Constant, ast.UnaryOp, ast.BinOp)) or isinstance(side, ast.Call) and isinstance(side.func, ast.Name) and side.func.id == "float":
                candidates.append((side, other))  # a BinOp only as a constant expression: `-2 ** 32 + 1`
            elif isinstance(side, (ast.Name, ast.Attribute)):
                candidates.append((side, other))
        if not candidates:
            return
        fmt_ = ctx.state(self)
        if fmt_ is None:
            return
        for side, other in candidates:
            found = self._overflow(ctx, side, fmt_)
            if found is None:
                continue
            if isinstance(found.value.value, int) and (ctx.qualname(getattr(other, "func", None)) or "") not in _ONES:
                # a Python int added to a tensor is index / token arithmetic (`ids + config.token_offset`,
                # `vocab * n`); masks are floats, or an int times ones: `ones_like(s) * (-2 ** 32 + 1)`
                continue
            if not self._tensorish(ctx, other) or not ctx.in_model_code(node):
                return
            # (1.0 - mask) * -1e9 inside `scores + ...`: report the innermost binop only once
            func = ctx.enclosing_function(node)
            self._report(ctx, found, fmt_, "half tensor arithmetic with it gives -inf (softmax of a fully masked row is then NaN)",
                         float_cast_name(ctx, other, func), safe=False, receiver=other)
            return

    def _tensorish(self, ctx, expr: ast.AST) -> bool:
        if ctx.evaluate(expr) is not None:
            return False  # both sides constant: part of a bigger constant
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Name) and func.id in _NON_TENSOR_CALLS:
                return False
            qn = ctx.qualname(func)
            if qn is not None and qn.startswith(_NON_TENSOR_MODULES):
                return False
        if isinstance(expr, ast.Constant):
            return False
        return True
