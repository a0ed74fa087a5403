"""AMP303 handwritten-softmax: ``exp(x) / exp(x).sum(dim, keepdim=True)`` and its log form."""
from __future__ import annotations

import ast

from amplint.analysis import calls, reductions
from amplint.rule import Edit, Fix, Invalid, Position, Rule, Severity, Valid


def _int_text(ctx, node) -> str | None:
    """Source text of a dim argument that is a known integer (literal or folded constant)."""
    if node is None:
        return None
    value = ctx.evaluate(node)
    if value is None or value.value != int(value.value) or isinstance(value.value, float):
        return None
    return ctx.segment(node)


def _stable_operand(ctx, operand):
    """``x`` when ``operand`` is ``x - <row max>`` (softmax is shift-invariant), else None."""
    if isinstance(operand, ast.BinOp) and isinstance(operand.op, ast.Sub):
        if reductions.max_subtracted(ctx, ast.BinOp(ast.Constant(0), ast.Sub(), operand.right)):
            return operand.left
    return None


def _loads(func: ast.AST, name: str, outside: list[ast.AST]) -> int:
    spans = [(n.lineno, n.col_offset, n.end_lineno, n.end_col_offset) for n in outside]
    count = 0
    for sub in ast.walk(func):
        if isinstance(sub, ast.Name) and sub.id == name and isinstance(sub.ctx, ast.Load):
            pos = (sub.lineno, sub.col_offset)
            if not any((a, b) <= pos < (c, d) for a, b, c, d in spans):
                count += 1
    return count


# the fused kernel subtracts the row maximum: the same function, not the same bits
_ULP = " (fp32 results change in the last bits: the fused kernel subtracts the row maximum)"


class HandwrittenSoftmax(Rule):
    code = "AMP303"
    name = "handwritten-softmax"
    summary = "softmax or log-softmax written by hand with `exp`: overflows in fp16 above 11"
    severity = Severity.WARNING
    options = ("target", "opt-level", "device", "engine")
    fix_applicability = "unsafe"
    uses_engine = True
    markers = ("exp",)
    docs = """
## What it does
Flags a softmax written by hand in model code: `torch.exp(x) / torch.exp(x).sum(dim,
keepdim=True)`, `x.exp() / x.exp().sum(...)`, the same through intermediate names
(`e = x.exp(); e / e.sum(-1, keepdim=True)`), and a log-softmax written as
`x - x.exp().sum(dim, keepdim=True).log()` or `x - torch.log(torch.exp(x).sum(...))`.
`torch.logsumexp` is the stable form and is not flagged.

## Why is this bad?
`exp` overflows fp16 above 11.09: `exp(11.1)` is `inf`, so a row of scores of 12 gives
`inf / inf` = NaN (measured in fp16 on CPU and on an H200). The fused kernel subtracts the row maximum and
never overflows; it is also one kernel instead of three. CUDA autocast runs `exp` and `sum`
in fp32 (that hides the problem until about 88, where fp32 `exp` overflows too), CPU
autocast keeps them in fp16 (`docs/fp16-facts.md`: hand-written `exp(s) / exp(s).sum()` is
fp32 on CUDA, fp16 on CPU), and pure-half training (apex O2/O3) upcasts nothing. Under O1
with a policy that runs `exp` in fp32 the finding is `info`.

## Example
```python
import torch
from torch import nn


class Head(nn.Module):
    def forward(self, scores):
        return torch.exp(scores) / torch.exp(scores).sum(dim=-1, keepdim=True)
```

## Use instead
```python
import torch
from torch import nn


class Head(nn.Module):
    def forward(self, scores):
        return torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
```

## Fix safety
The fix is `unsafe`, offered where the dimension is known (a literal or constant `dim` with
`keepdim=True`): the fused softmax computes the same function, in fp32, and the result is
cast back to the operand's dtype so a half model keeps running, but it subtracts the row
maximum first, so fp32 results change in the last bits (up to 4.8e-7 on the fixtures,
`tests/test_safe_fix_fp32.py`); a safe fix keeps fp32 output bit-identical. Intermediate names that
only served the hand-written form are removed. No fix for a softmax over the whole tensor
(no `dim`), a non-constant `dim`, or `keepdim` missing.
"""

    VALID = [
        Valid("""
            import torch
            class H(torch.nn.Module):
                def forward(self, x):
                    return x - torch.logsumexp(x, dim=-1, keepdim=True)
            """),
        Valid("""
            import torch
            class H(torch.nn.Module):
                def forward(self, x, y):
                    return torch.exp(x) / torch.exp(y).sum(-1, keepdim=True)
            """),
        Valid("""
            import torch
            class H(torch.nn.Module):
                def forward(self, x):
                    return torch.softmax(x, -1, dtype=torch.float32)
            """),
        Valid("""
            import torch
            def softmax(x):
                return x.exp() / x.exp().sum(-1, keepdim=True)
            """),
        Valid("""
            import torch
            class H(torch.nn.Module):
                def forward(self, x):
                    return x.exp() / x.exp().sum(-1, keepdim=True)
            """, settings={"opt_level": "O0"}),
    ]

    INVALID = [
        Invalid("""
            import torch
            import torch.nn as nn

            class Head(nn.Module):
                def forward(self, scores):
                    return torch.exp(scores) / torch.exp(scores).sum(dim=-1, keepdim=True)  # probs
            """,
            line=6,
            severity="info",
            message="11.09",
            expected_fix="""
                import torch
                import torch.nn as nn

                class Head(nn.Module):
                    def forward(self, scores):
                        return torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)  # probs
                """,
        ),
        # through names, method form, O2: the helper names go away
        Invalid("""
            import torch as th

            class Head(th.nn.Module):
                def forward(self, x):
                    e = x.exp()
                    z = e.sum(1, keepdim=True)
                    p = e / z
                    return p
            """,
            line=7,
            severity="warning",
            settings={"opt_level": "O2"},
            expected_fix="""
                import torch as th

                class Head(th.nn.Module):
                    def forward(self, x):
                        p = th.softmax(x, dim=1, dtype=th.float32).to(x.dtype)
                        return p
                """,
        ),
        # an exp still used elsewhere stays
        Invalid("""
            import torch

            class Head(torch.nn.Module):
                def forward(self, x):
                    e = torch.exp(x)
                    return e / torch.sum(e, -1, True), e
            """,
            expected_fix="""
                import torch

                class Head(torch.nn.Module):
                    def forward(self, x):
                        e = torch.exp(x)
                        return torch.softmax(x, dim=-1, dtype=torch.float32).to(x.dtype), e
                """,
        ),
        # log-softmax by hand, CPU autocast: a warning
        Invalid("""
            import torch

            class LM(torch.nn.Module):
                def forward(self, logits):
                    return logits - logits.exp().sum(-1, keepdim=True).log()
            """,
            severity="warning",
            message="log-softmax",
            settings={"engine": "torch", "device": "cpu"},
            expected_fix="""
                import torch

                class LM(torch.nn.Module):
                    def forward(self, logits):
                        return torch.log_softmax(logits, dim=-1, dtype=torch.float32).to(logits.dtype)
                """,
        ),
        # the max-subtracted form does not overflow: info, and the fused kernel on `x`
        Invalid("""
            import torch

            class H(torch.nn.Module):
                def forward(self, x):
                    z = x - x.max(dim=-1, keepdim=True).values
                    return z.exp() / z.exp().sum(-1, keepdims=True)
            """,
            severity="info",
            message="no overflow",
            settings={"opt_level": "O2"},
            expected_fix="""
                import torch

                class H(torch.nn.Module):
                    def forward(self, x):
                        z = x - x.max(dim=-1, keepdim=True).values
                        return torch.softmax(z, dim=-1, dtype=torch.float32).to(z.dtype)
                """,
        ),
        Invalid("""
            import torch

            class H(torch.nn.Module):
                def forward(self, x):
                    return torch.exp(x - x.amax(-1, keepdim=True)) / torch.exp(x - x.amax(-1, keepdim=True)).sum(-1, keepdims=True)
            """,
            severity="info",
            settings={"opt_level": "O2"},
            expected_fix="""
                import torch

                class H(torch.nn.Module):
                    def forward(self, x):
                        return torch.softmax(x, dim=-1, dtype=torch.float32).to(x.dtype)
                """,
        ),
        # softmax over the whole tensor: reported, no fix
        Invalid("""
            import torch

            class H(torch.nn.Module):
                def forward(self, x):
                    return x.exp() / x.exp().sum()
            """,
            expected_fix=None,
        ),
    ]

    def visit_BinOp(self, node: ast.BinOp, ctx) -> None:
        if not isinstance(node.op, (ast.Div, ast.Sub)):
            return
        # cheap: the pattern needs an `exp` / `sum` / `log` call or a name on the right
        right = node.right
        if not isinstance(right, (ast.Call, ast.Name)):
            return
        found = reductions.match_handwritten(ctx, node)
        if found is None or not ctx.in_forward(node):
            return
        severity = reductions.severity_for(ctx.settings, "torch.exp")
        if severity is None:
            return
        note = reductions.policy_note(ctx.settings, "torch.exp", severity)
        what = "softmax" if found.kind == "softmax" else "log-softmax"
        if reductions.max_subtracted(ctx, ast.BinOp(ast.Constant(0), ast.Sub(), found.operand)) or _stable_operand(ctx, found.operand):
            severity = Severity.INFO  # the row maximum is subtracted: no overflow, only slower
            message = (
                f"hand-written {what} (maximum subtracted, so no overflow): three kernels where the fused "
                f"`torch.{found.kind}(..., dtype=torch.float32)` is one"
            )
        else:
            overflow = ("`exp` overflows bf16 above 88.7 (a row of 89s gives NaN)" if ctx.format.wide_exponent
                        else "`exp` overflows fp16 above 11.09 (a row of 12s gives NaN)")
            message = (
                f"hand-written {what}: {overflow} and it is "
                f"slower than the fused kernel ({note}); use `torch.{found.kind}(..., dtype=torch.float32)`"
            )
        ctx.report(self, node, message, fix=self._fix(ctx, node, found), severity=severity)

    @staticmethod
    def _fix(ctx, node, found):
        call = found.sum_call
        method = ctx.qualname(call.func) is None
        dim = calls.argument(call, "dim", 0 if method else 1)
        keepdim = calls.argument(call, "keepdim", 1 if method else 2) or calls.argument(call, "keepdims")
        if not (isinstance(keepdim, ast.Constant) and keepdim.value is True):
            return None
        dim_text = _int_text(ctx, dim)
        torch = calls.torch_alias(ctx)
        source = reductions.dtype_source(ctx, _stable_operand(ctx, found.operand) or found.operand)
        if dim_text is None or torch is None or source is None or "\n" in dim_text:
            return None
        func = ctx.enclosing_function(node)
        # names the match followed must still mean what they meant at their assignment
        operand_names = {n.id for n in ast.walk(found.operand) if isinstance(n, ast.Name)}
        statements = {id(stmt): (name, stmt) for name, stmt in found.bindings}
        for _, stmt in statements.values():
            if any(reductions.assignments_between(ctx, n, func, stmt.lineno, node.lineno) for n in operand_names):
                return None
        operand = _stable_operand(ctx, found.operand) or found.operand
        text = f"{torch}.{found.kind}({ctx.segment(operand)}, dim={dim_text}, dtype={torch}.float32)"
        if not reductions.already_cast_back(ctx, node):
            text += f".to({ctx.segment(source)}.dtype)"
        edits = [Edit.replace(node, text)]
        # drop helper assignments nothing else reads
        removable = {
            key: (name, stmt) for key, (name, stmt) in statements.items()
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and ctx.line_text(stmt.lineno)[: stmt.col_offset].strip() == ""
            and ctx.line_text(stmt.end_lineno)[stmt.end_col_offset:].strip() == ""
            and stmt.end_lineno < len(ctx.lines)
        }
        changed = True
        while changed:
            changed = False
            for key, (name, stmt) in list(removable.items()):
                outside = [node] + [s for k, (_, s) in removable.items() if k != key]
                if _loads(func, name, outside) or stmt.lineno >= node.lineno:
                    del removable[key]
                    changed = True
        for name, stmt in removable.values():
            parent_body = getattr(ctx.parent(stmt), "body", [])
            if sum(1 for s in parent_body if id(s) in removable) >= len(parent_body):
                return Fix(edits, "unsafe", f"Use the fused `{torch}.{found.kind}` in fp32{_ULP}")
        for name, stmt in removable.values():
            edits.append(Edit(Position(stmt.lineno, 0), Position(stmt.end_lineno + 1, 0), ""))
        return Fix(edits, "unsafe", f"Use the fused `{torch}.{found.kind}` in fp32 and cast back{_ULP}")
