"""AMP604 unscaled-attention-logits: q @ k^T in fp16 before the 1/sqrt(d) scaling."""
from __future__ import annotations

import ast
import re
from typing import Optional

from amplint.numerics import FP16
from amplint.rule import Edit, Fix, Invalid, Related, Rule, Severity, Valid

_SCALE_NAME = re.compile(r"scale|scaling|sqrt|norm_factor|temperature|inv_scale", re.I)
_TRANSPOSES = frozenset({"transpose", "permute", "mT", "T", "t"})
_KEY_NAME = re.compile(r"^(k|keys?)$|^keys?_|_keys?$", re.I)


def _is_key_transpose(expr: ast.AST) -> bool:
    """``k.transpose(-2, -1)``, ``k.permute(0, 1, 3, 2)``, ``k.mT``, ``k.T``, ``k.t()``."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        return expr.func.attr in _TRANSPOSES
    return isinstance(expr, ast.Attribute) and expr.attr in ("mT", "T")


def _is_key(ctx, expr: ast.AST) -> bool:
    """A transposed key: directly, or a name assigned a transpose / permute / reshape on an
    earlier line (``k = k.reshape(b, c, h * w)`` after ``q = q.permute(0, 2, 1)``), or a
    name that says it is the keys (``self.keys``, ``key_layer``)."""
    from amplint.analysis.reductions import reaching_value

    if _is_key_transpose(expr):
        return True
    if isinstance(expr, ast.Name):
        value = reaching_value(ctx, expr)
        if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                and value.func.attr in _TRANSPOSES | {"reshape", "view"}):
            return True
    name = expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else ""
    return bool(_KEY_NAME.search(name))


def _qk_product(ctx, expr: ast.AST) -> Optional[tuple[ast.AST, ast.AST]]:
    """(q, k-transposed) when ``expr`` is ``q @ k.transpose(...)`` / ``torch.matmul`` /
    ``torch.bmm`` of that shape."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.MatMult) and _is_key_transpose(expr.right):
        return expr.left, expr.right
    if isinstance(expr, ast.Call) and (ctx.qualname(expr.func) or "") in ("torch.matmul", "torch.bmm") \
            and len(expr.args) == 2 and not expr.keywords and any(_is_key(ctx, a) for a in expr.args):
        return expr.args[0], expr.args[1]
    if isinstance(expr, ast.Call) and (ctx.qualname(expr.func) or "") == "torch.einsum" and len(expr.args) == 3 \
            and _is_logits_spec(expr.args[0]):
        return expr.args[1], expr.args[2]
    return None


def _is_logits_spec(spec: ast.AST) -> bool:
    """``'b h i d, b h j d -> b h i j'`` (also f-strings ending in the same shape): two
    operands that share a contracted index and each keep one of their own -- the
    ``q k^T`` of attention, not a weight product."""
    if isinstance(spec, ast.JoinedStr):
        parts = [v.value for v in spec.values if isinstance(v, ast.Constant)]
        text = "".join(parts)
        if "->" not in text:
            return False
        lhs, _, out = text.partition("->")
        first = lhs.split(",")[0]
        return bool(set(first.split()) - set(out.split())) and len(out.split()) >= 3
    if not (isinstance(spec, ast.Constant) and isinstance(spec.value, str)) or "->" not in spec.value:
        return False
    lhs, _, out = spec.value.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != 2:
        return False
    orders = [part.split() if " " in part.strip() else list(part.strip()) for part in inputs]
    tokens = [set(order) for order in orders]
    out_tokens = set(out.split()) if " " in out.strip() else set(out.strip())
    contracted = (tokens[0] & tokens[1]) - out_tokens
    own = (tokens[0] - tokens[1]) & out_tokens, (tokens[1] - tokens[0]) & out_tokens
    batch = tokens[0] & tokens[1] & out_tokens  # heads / batch: q and k share them, a weight does not
    # q and k lay the contracted feature out alike (`bhid,bhjd`); `attn @ v` contracts the
    # last index of one with an inner index of the other (`bhij,bhjd`)
    alike = all(orders[0][::-1].index(t) == orders[1][::-1].index(t) for t in contracted)
    # k may carry the query's index too (edge-augmented keys, `b i d, b i j d -> b i j`)
    return bool(contracted) and any(own) and bool(batch) and alike


def _is_scale(ctx, expr: ast.AST, op: ast.operator, depth: int = 0) -> bool:
    """``math.sqrt(d)`` / ``d ** 0.5`` / ``self.scale`` after a division; ``d ** -0.5`` /
    ``self.scale`` after a multiplication."""
    if isinstance(expr, ast.Call):
        qn = ctx.qualname(expr.func) or ""
        name = expr.func.attr if isinstance(expr.func, ast.Attribute) else getattr(expr.func, "id", "")
        return isinstance(op, ast.Div) and (name == "sqrt" or qn.endswith(".sqrt"))
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div) and isinstance(op, ast.Mult):
        return ctx.evaluate(expr.left) is not None and _is_scale(ctx, expr.right, expr.op)  # `* (1.0 / math.sqrt(d))`
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Pow) and isinstance(expr.right, (ast.Constant, ast.UnaryOp)):
        value = ctx.evaluate(expr.right)
        return value is not None and value.value == (0.5 if isinstance(op, ast.Div) else -0.5)
    if isinstance(expr, (ast.Name, ast.Attribute)):
        name = expr.id if isinstance(expr, ast.Name) else expr.attr
        if _SCALE_NAME.search(name):
            return True
    if isinstance(expr, ast.Name) and depth < 2:  # `dimension = k.size(-1) ** 0.5` on an earlier line
        from amplint.analysis.reductions import reaching_value

        value = reaching_value(ctx, expr)
        return value is not None and _is_scale(ctx, value, op, depth + 1)
    return False


def _reached_products(ctx, expr: ast.AST, depth: int = 0) -> list:
    """The q·k products a scaled name holds, each as (product node, (q, k)): ``w =
    torch.bmm(q, k)`` on an earlier line, a sum holding one (``(matrix_ac + matrix_bd) *
    self.scale``, ``(w + bias) / s``: the product was formed unscaled all the same), or a
    call handed one (``bd = self.rel_shift(bd)``: a shift keeps the magnitudes)."""
    from amplint.analysis.reductions import reaching_value

    if depth > 3:
        return []
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)):
        return _reached_products(ctx, expr.left, depth + 1) + _reached_products(ctx, expr.right, depth + 1)
    if isinstance(expr, ast.Call) and depth:
        return [p for a in expr.args if isinstance(a, ast.Name) for p in _reached_products(ctx, a, depth + 1)]
    if isinstance(expr, ast.Name):
        value = reaching_value(ctx, expr)
        if value is None:
            return []
        product = _qk_product(ctx, value)
        return [(value, product)] if product is not None else _reached_products(ctx, value, depth + 1)
    return []


def _prescaled(ctx, operand: ast.AST) -> bool:
    """``q = self.q_proj(x) * self.scaling`` (or ``/ math.sqrt(d)``) before ``q @ k^T``,
    through one name and layout changes."""
    from amplint.analysis.reductions import reaching_value

    for _ in range(4):
        if isinstance(operand, ast.Name):
            operand = reaching_value(ctx, operand)
        elif isinstance(operand, ast.Call) and isinstance(operand.func, ast.Attribute) and operand.func.attr in _TRANSPOSES | {
                "reshape", "view", "contiguous"}:
            operand = operand.func.value
        else:
            break
    if not isinstance(operand, ast.BinOp) or not isinstance(operand.op, (ast.Mult, ast.Div)):
        return False
    return _is_scale(ctx, operand.right, operand.op) or isinstance(operand.op, ast.Mult) and _is_scale(ctx, operand.left, operand.op)


def _unit_bounded(ctx, operand: ast.AST) -> bool:
    bound = ctx.magnitude_bound(operand)
    return bound is not None and bound <= 1


class UnscaledAttentionLogits(Rule):
    code = "AMP604"
    name = "unscaled-attention-logits"
    summary = "attention logits `q @ k^T` computed in fp16 before the `1/sqrt(d)` scaling"
    severity = Severity.WARNING
    options = ("target", "opt-level")
    fix_applicability = "unsafe"
    #: every hand-written attention has this shape; whether it overflows depends on the
    #: activations, so the rule is opt-in (`select = ["AMP604"]`)
    enabled_by_default = False
    markers = ("transpose", ".mT", ".T", "permute", "einsum", "matmul", "bmm")
    docs = """
## What it does
Flags `q @ k.transpose(-2, -1)` (or `torch.matmul` / `torch.bmm` with a key transposed
there or on an earlier line, or named a key, or
`einsum("b h i d, b h j d -> b h i j", q, k)`) in any function (a module's
`forward`, or an attention helper defined at module level and called from elsewhere), divided by `math.sqrt(d)` / `d ** 0.5` / `self.scale` (or multiplied by
`d ** -0.5` / `1 / math.sqrt(d)` / `self.scale`) only *after* the product -- in the same
expression, or on a later line through a variable, or a sum of such products (Transformer-XL's
`(ac + bd) / sqrt(d)`) -- when the target is fp16 and the
matmul runs in half (O1 and above: `matmul` is on every autocast half list). bf16 (fp32's
range) is never reported. Off by default -- every hand-written attention has this shape,
and whether it overflows depends on the activations -- turn it on with
`select = ["AMP604"]` (or `extend-select`). Not flagged: a product of l2-normalised `q`
or `k` (`F.normalize`, a helper returning it: cosine attention), whose dot products are
bounded by the head dim or the other vector's norm (normalised on every path: not only
under an `if`), a `q` already scaled before the product, and `attn @ v` einsums (the
contracted index is laid out differently in the two operands).

## Why is this bad?
The dot product sums `d` products before anything scales it: with head dim 128 and `q`,
`k` elements of magnitude 23, `q @ k^T` is 67712 > 65504, so the logit is `inf` and the
softmax row NaN, although the scaled logit (5985) fits easily (`bench/bf16_facts.py`).
Large models grow such activations (unnormalised q/k, outlier features); Megatron's
query-key layer scaling and transformers' GPT-2 `reorder_and_upcast_attn` exist for this.
Scaling `q` first keeps the product `sqrt(d)` times smaller.

## Example
```python
import math
from torch import nn


class Attention(nn.Module):
    def forward(self, q, k, v):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        return scores.softmax(-1) @ v
```

## Use instead
```python
import math
from torch import nn


class Attention(nn.Module):
    def forward(self, q, k, v):
        scores = (q / math.sqrt(q.size(-1))) @ k.transpose(-2, -1)
        return scores.softmax(-1) @ v
```
or `torch.nn.functional.scaled_dot_product_attention(q, k, v)`, which scales inside.

## Fix safety
The fix is `unsafe`: scaling before the product rounds differently, so even fp32 logits
change in the last bits. It is offered when the scaling applies directly to the product
(`(q @ k.transpose(-2, -1)) / s`), not when the product is stored in a variable first.
"""

    VALID = [
        Valid("""
            import math
            from torch import nn
            class A(nn.Module):
                def forward(self, q, k):
                    return (q / math.sqrt(64)) @ k.transpose(-2, -1)
            """),
        Valid("""
            import math
            from torch import nn
            class A(nn.Module):
                def forward(self, q, k):
                    return q @ k.transpose(-2, -1) / math.sqrt(64)
            """,
            settings={"target": "bf16", "select": ["AMP604"]},
        ),
        # a weight product, not q k^T
        Valid("""
            import torch
            from torch import nn
            class A(nn.Module):
                def forward(self, x, w):
                    return torch.einsum("b n d, d e -> b n e", x, w) * self.scale
            """),
        # not attention: no transposed key
        Valid("""
            import math
            from torch import nn
            class A(nn.Module):
                def forward(self, x, w):
                    return x @ w / math.sqrt(64)
            """),
        # cosine attention: l2-normalised q and k, dot products bounded by the head dim
        Valid("""
            import torch.nn.functional as F
            from torch import nn
            class A(nn.Module):
                def forward(self, q, k):
                    q, k = map(lambda t: F.normalize(t, dim=-1), (q, k))
                    return (q @ k.transpose(-2, -1)) * self.scale
            """),
    ]
    INVALID = [
        # the key transposed on an earlier line, the scale on a later one: at the scaling
        Invalid("""
            import torch
            from torch import nn
            class A(nn.Module):
                def forward(self, q, k, c):
                    k = k.reshape(2, c, -1)
                    w = torch.bmm(q, k)
                    w = w * (int(c) ** (-0.5))
                    return w.softmax(-1)
            """,
            line=7,
            expected_fix=None,
        ),
        Invalid("""
            import math
            from torch import nn
            class A(nn.Module):
                def forward(self, q, k, v):
                    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
                    return scores.softmax(-1) @ v
            """,
            line=5,
            message="65504",
            expected_fix="""
                import math
                from torch import nn
                class A(nn.Module):
                    def forward(self, q, k, v):
                        scores = (q / math.sqrt(q.size(-1))) @ k.transpose(-2, -1)
                        return scores.softmax(-1) @ v
                """,
        ),
        Invalid("""
            import torch
            from torch import nn
            class A(nn.Module):
                def forward(self, q, k):
                    return (torch.matmul(q, k.transpose(-1, -2)) * self.scale).softmax(-1)
            """,
            expected_fix="""
                import torch
                from torch import nn
                class A(nn.Module):
                    def forward(self, q, k):
                        return (torch.matmul(q * self.scale, k.transpose(-1, -2))).softmax(-1)
                """,
        ),
        Invalid("""
            from torch import nn, einsum
            class A(nn.Module):
                def forward(self, q, k):
                    return einsum('b h i d, b h j d -> b h i j', q, k) * self.scale
            """,
            expected_fix="""
                from torch import nn, einsum
                class A(nn.Module):
                    def forward(self, q, k):
                        return einsum('b h i d, b h j d -> b h i j', q * self.scale, k)
                """,
        ),
        # scaled from the left: `norm_factor * matmul(Q, K^T)`
        Invalid("""
            import torch
            from torch import nn
            class A(nn.Module):
                def forward(self, q, k):
                    return self.norm_factor * torch.matmul(q, k.transpose(2, 3))
            """,
            expected_fix="""
                import torch
                from torch import nn
                class A(nn.Module):
                    def forward(self, q, k):
                        return torch.matmul(q * self.norm_factor, k.transpose(2, 3))
                """,
        ),
        # in place, by a name holding the square root, a sum with a shifted product
        Invalid("""
            import torch
            from torch import nn
            class A(nn.Module):
                def forward(self, q, k):
                    w = torch.einsum("bnik,bnjk->bnij", q, k)
                    w /= q.size(-1) ** 0.5
                    return w
            """,
            line=6,
            expected_fix=None,
        ),
        Invalid("""
            import torch
            from torch import nn
            class A(nn.Module):
                def forward(self, q, k, p):
                    ac = torch.matmul(q, k.transpose(-2, -1))
                    bd = self.rel_shift(torch.matmul(q, p.transpose(-2, -1)))
                    d = torch.as_tensor(k.size(-1)).sqrt()
                    return (ac + bd) / d
            """,
            line=8,
            expected_fix=None,
        ),
        # a module-level attention helper (a fallback SDPA, a surgery function): reported too
        Invalid("""
            import torch
            def sdpa(q, k, v):
                scores = torch.matmul(q, k.transpose(-2, -1)) / (k.size(-1) ** 0.5)
                return scores.softmax(-1) @ v
            """,
            line=3,
            expected_fix="""
                import torch
                def sdpa(q, k, v):
                    scores = torch.matmul(q / k.size(-1) ** 0.5, k.transpose(-2, -1))
                    return scores.softmax(-1) @ v
                """,
        ),
        # through a variable: reported, no fix
        Invalid("""
            from torch import nn
            class A(nn.Module):
                def forward(self, q, k):
                    w = q @ k.transpose(-2, -1)
                    w = w / self.head_dim ** 0.5
                    return w
            """,
            line=5,
            expected_fix=None,
        ),
    ]

    def visit_BinOp(self, node: ast.BinOp, ctx) -> None:
        if not isinstance(node.op, (ast.Div, ast.Mult)):
            return
        left, right = node.left, node.right
        # `self.norm_factor * torch.matmul(Q, K^T)`: a product scales from either side
        if isinstance(node.op, ast.Mult) and not _is_scale(ctx, right, node.op) and _is_scale(ctx, left, node.op):
            left, right = right, left
        self._check(node, left, right, node.op, ctx)

    def visit_AugAssign(self, node: ast.AugAssign, ctx) -> None:
        """``inner_product /= d ** 0.5`` after ``inner_product = einsum(...)``."""
        if isinstance(node.op, (ast.Div, ast.Mult)) and isinstance(node.target, ast.Name):
            self._check(node, node.target, node.value, node.op, ctx)

    def _check(self, node: ast.AST, left: ast.AST, right: ast.AST, op: ast.operator, ctx) -> None:
        if ctx.format is not FP16 or ctx.settings.opt_level == "O0":
            return
        if not _is_scale(ctx, right, op):
            return
        product = _qk_product(ctx, left) if isinstance(node, ast.BinOp) else None
        direct = product is not None
        reached = [(left, product)] if direct else _reached_products(ctx, left)
        products = [pair for _, pair in reached]
        if not products or ctx.enclosing_function(node) is None:
            return
        # l2-normalised q or k (cosine attention, LSH): the dot product is bounded by d or |q|;
        # q already scaled before the product (the safe form), scaled again after
        if all(any(_unit_bounded(ctx, side) or _prescaled(ctx, side) for side in pair) for pair in products):
            return
        q, kt = products[0]
        message = ("attention logits `q @ k^T` computed in fp16 before the scaling: a head-dim-128 dot product of "
                   "elements of magnitude 23 is 67712 > 65504 (inf, then a NaN softmax row); scale `q` first or use "
                   "`scaled_dot_product_attention`")
        # the products formed on earlier lines: where the overflow happens (and the fix goes)
        related = [Related(ctx.path, at.lineno, ctx.char_col(at.lineno, at.col_offset) + 1,
                           "the unscaled `q @ k^T` product is formed here")
                   for at, _ in reached if not direct and at.lineno != node.lineno]
        fix = None
        if direct:
            op_text = "/" if isinstance(op, ast.Div) else "*"
            q_text = ctx.segment(q)
            if not isinstance(q, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
                q_text = f"({q_text})"
            scaled = f"{q_text} {op_text} {ctx.segment(right)}"
            if isinstance(left, ast.Call) and len(left.args) == 3:
                text = f"{ctx.segment(left.func)}({ctx.segment(left.args[0])}, {scaled}, {ctx.segment(kt)})"
            elif isinstance(left, ast.Call):
                text = f"{ctx.segment(left.func)}({scaled}, {ctx.segment(kt)})"
            else:
                text = f"({scaled}) @ {ctx.segment(kt)}"
            parent = ctx.parent(node)
            if isinstance(parent, (ast.UnaryOp,)) or isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Pow):
                text = f"({text})"
            fix = Fix([Edit.replace(node, text)], "unsafe", "Scale `q` before the product")
        ctx.report(self, node, message, fix=fix, related=related)
