"""AMP103 all-masked-row-nan: ``masked_fill(mask, -inf)`` feeding a softmax, where a whole row can be masked."""
from __future__ import annotations

import ast
import math

from amplint.analysis.constants import (
    ATTENTION_CONSUMERS,
    SOFTMAX_ATTRS,
    feeds_softmax,
    may_hold_inf,
    mask_kind,
    origin_has_default,
    tensor_name,
)
from amplint.analysis.calls import argument
from amplint.analysis.padded_rows import added_to_softmax_scores, diagonal_inf_triangle, padded_query_rows
from amplint.dtypes import Assignments
from amplint.fixes import finfo_text
from amplint.rule import Edit, Fix, Invalid, Rule, Severity, Valid


def _self_threshold(mask, target) -> bool:
    """``x < threshold`` masks on ``x`` itself (top-k / top-p filtering of logits)."""
    base = tensor_name(target) if target is not None else None
    if not isinstance(mask, ast.Compare) or not isinstance(base, ast.Name) or len(mask.ops) != 1:
        return False
    if not isinstance(mask.ops[0], (ast.Lt, ast.LtE)):
        return False
    left = mask.left
    while isinstance(left, ast.Subscript):
        left = left.value
    return isinstance(left, ast.Name) and left.id == base.id


class AllMaskedRowNan(Rule):
    code = "AMP103"
    name = "all-masked-row-nan"
    summary = "`masked_fill(mask, -inf)` before a softmax gives NaN for a row the mask covers entirely"
    severity = Severity.WARNING
    fix_applicability = "unsafe"
    markers = ("masked_fill", "where", "inf")
    docs = """
## What it does
Flags `x.masked_fill(mask, float("-inf"))` (also `masked_fill_`, `torch.where(mask, x,
-inf)`, `x[mask] = -inf`; the infinity written as `float("-inf")`, `-float("inf")`,
`-math.inf`, `-np.inf`, `-torch.inf`, or reached through a name) whose result feeds a
softmax (or `scaled_dot_product_attention`) in the same function, where the mask can
cover a whole row.

- Padding on both axes of the scores: two padding masks combined (`m[:, :, None] &
  m[:, None, :]`, `*`, `|`, `logical_and`, `bmm`), or a padding mask combined with a causal
  one (a left-padded prefix keeps no key): `warning`. A padding mask is a name, helper or
  source mentioning `pad`, `attention_mask`, lengths... followed back through local names
  and `self.X` assignments in any method.
- Whatever the names say, `warning` also for: the union of a query mask and a key mask
  broadcast against each other (`~(q_mask[:, :, None] * kv_mask[:, None, :])`, LoFTR); a
  padding mask viewed as a sliding window of keys (`as_strided` / `unfold`) or added to
  scores that carry a `triu + tril` band (LightHuBERT); `triu(-inf, diagonal=0)` (row 0).
- A mask the linter cannot classify (a `mask` argument): `info`.
- A padding mask alone (`key_padding_mask`, `make_pad_mask(lengths)`, `attention_mask ==
  0`) is not flagged: it masks keys, and every sequence keeps its real positions (length
  at least 1), so no row is empty. The blind real-code labels judge it so on every
  attention module they read (espnet, speechbrain, fairseq/ESM, pytext, Graphormer).
- Causal masks are not flagged: masks built with `tril` / `triu` (directly, through a local
  name, or a buffer registered in `__init__` as in nanoGPT's
  `self.register_buffer("bias", torch.tril(...))` then
  `att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))`), and masks named
  `causal_mask` / `subsequent_mask`: they always keep the diagonal, so no row is empty.
  A causal mask combined with an unclassified one (`causal & mask`) is unclassified, and
  combined with a padding mask it is a padding mask.
- Top-k / top-p filtering is not flagged (`logits[logits < v[:, [-1]]] = -inf`,
  `indices_to_remove`): the largest logit always survives.
- Results that do not reach a softmax (a masked `max`) are not flagged.
- Probabilities zeroed on the same mask after the softmax (`softmax(s).masked_fill(mask, 0)`,
  `attn[mask] = 0`) are not flagged: the NaN row is replaced by zeros and its gradient is
  zero. Zeroing the output after `@ v` is still flagged: v's gradient reads the NaN row.

## Why is this bad?
The softmax of a row that is entirely `-inf` is NaN in every dtype (fp32 too):
`exp(-inf - (-inf))` is `exp(nan)`. That happens whenever a mask covers every key of a
row -- a padded query row of a pairwise mask, a left-padded prefix under a combined
causal+padding mask, a sequence of length 0 -- and the NaN then spreads
through the next layer's attention and into the loss. With `torch.finfo(dtype).min` (or
-1e4 in fp16) the row comes out uniform, and the padded positions are normally ignored
downstream anyway. Measured: softmax over an all-masked row with `-inf` fill is all
NaN; with -1e4, -65504 or `finfo.min` it is uniform (`docs/fp16-facts.md`).

## Example
```python
import torch


def attention(scores, pad):
    pairwise = pad[:, :, None] | pad[:, None, :]  # padded queries and keys
    scores = scores.masked_fill(pairwise, float("-inf"))
    return scores.softmax(dim=-1)
```

## Use instead
```python
import torch


def attention(scores, pad):
    pairwise = pad[:, :, None] | pad[:, None, :]  # padded queries and keys
    scores = scores.masked_fill(pairwise, torch.finfo(scores.dtype).min)
    return scores.softmax(dim=-1)
```

## Fix safety
`unsafe`: it changes fp32 results (a fully masked row becomes uniform instead of NaN,
which is the point, but it is a behaviour change). The fix needs a nameable tensor (the
receiver of `masked_fill`, the other branch of `where`, the subscripted tensor) and a
`torch` import; without them it is not offered. When the infinity comes through a
parameter default, the use is not rewritten (a caller may pass another value).
"""

    VALID = [
        # the probabilities are zeroed where the mask is (funasr, rl4co): no NaN forward or backward
        Valid("""
            import torch
            def attend(scores, mask):
                scores = scores.masked_fill(mask, float("-inf"))
                return torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
            """),
        Valid("""
            import torch
            def attend(compat, mask):
                compat[mask] = float("-inf")
                attn = torch.softmax(compat, dim=-1)
                attnc = attn.clone()
                attnc[mask] = 0
                return attnc
            """),
        # one fixed column of every row (OpenNMT's copy generator masks the pad token)
        Valid("""
            import torch
            def f(logits, pad_idx):
                logits[:, pad_idx] = -float('inf')
                return torch.softmax(logits, 1)
            """),
        # nanoGPT: a registered causal buffer
        Valid("""
            import math
            import torch
            import torch.nn as nn
            import torch.nn.functional as F
            class CausalSelfAttention(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.register_buffer('bias', torch.tril(torch.ones(n, n)).view(1, 1, n, n))
                def forward(self, q, k, v):
                    T = q.size(-2)
                    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                    att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
                    att = F.softmax(att, dim=-1)
                    return att @ v
            """
        ),
        # a causal mask built locally with triu
        Valid("""
            import torch
            def attend(s):
                n = s.size(-1)
                m = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
                return s.masked_fill(m, float('-inf')).softmax(-1)
            """
        ),
        Valid("""
            import torch
            def f(s, causal_mask):
                return torch.softmax(s.masked_fill(causal_mask, -torch.inf), -1)
            """),
        # top-k filtering (nanoGPT's generate): the largest logit is never masked
        Valid("""
            import torch
            import torch.nn.functional as F
            def sample(logits, top_k):
                v, _ = torch.topk(logits, top_k)
                logits[logits < v[:, [-1]]] = -float('Inf')
                return F.softmax(logits, dim=-1)
            """
        ),
        Valid("""
            import torch
            def f(logits, indices_to_remove):
                return logits.masked_fill(indices_to_remove, -float('inf')).softmax(-1)
            """),
        # not feeding a softmax (a masked max)
        Valid("""
            import torch
            def f(x, pad):
                return x.masked_fill(pad, float('-inf')).max(dim=1).values
            """),
        # finite fill
        Valid("""
            import torch
            def f(s, pad):
                return s.masked_fill(pad, torch.finfo(s.dtype).min).softmax(-1)
            """),
        # a padding mask alone masks keys: every sequence keeps its real positions
        Valid("""
            import torch
            def attend(scores, key_padding_mask):
                scores = scores.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2), float('-inf'))
                return scores.softmax(dim=-1)
            """),
        # ... also through a `self.mask` set in another method from lengths
        Valid("""
            import torch
            class Att(torch.nn.Module):
                def reset(self):
                    self.mask = None
                def forward(self, e, enc_hs_len):
                    if self.mask is None:
                        self.mask = make_pad_mask(enc_hs_len)
                    e.masked_fill_(self.mask, -float("inf"))
                    return torch.softmax(e, dim=1)
            """),
    ]
    INVALID = [
        # zeroing the output after `@ v` leaves the NaN row in v's gradient
        Invalid("""
            import torch
            def attend(scores, v, mask):
                scores = scores.masked_fill(mask, float("-inf"))
                out = torch.softmax(scores, dim=-1) @ v
                return out.masked_fill(mask, 0.0)
            """, line=3, severity="info",
            expected_fix="""
                import torch
                def attend(scores, v, mask):
                    scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
                    out = torch.softmax(scores, dim=-1) @ v
                    return out.masked_fill(mask, 0.0)
                """),
        # an nn.Softmax layer built and called inline still consumes the -inf row; the
        # mask pads queries and keys
        Invalid("""
            import torch
            import torch.nn as nn
            def attend(scores, attention_mask):
                scores.masked_fill_(attention_mask[:, None, :] * attention_mask[:, :, None] == 0, -float('inf'))
                return nn.Softmax(dim=-1)(scores)
            """, line=4, severity="warning", message="queries as well as keys",
            expected_fix="""
                import torch
                import torch.nn as nn
                def attend(scores, attention_mask):
                    scores.masked_fill_(attention_mask[:, None, :] * attention_mask[:, :, None] == 0, torch.finfo(scores.dtype).min)
                    return nn.Softmax(dim=-1)(scores)
                """),
        # unknown mask: info
        Invalid("""
            import math
            import torch.nn.functional as F
            import torch
            def attend(s, mask):
                return F.softmax(s.masked_fill(mask == 0, -math.inf), dim=-1)
            """,
            severity="info",
            expected_fix="""
                import math
                import torch.nn.functional as F
                import torch
                def attend(s, mask):
                    return F.softmax(s.masked_fill(mask == 0, torch.finfo(s.dtype).min), dim=-1)
                """,
        ),
        # -inf through a module constant
        Invalid("""
            import numpy as np
            import torch
            NEG = -np.inf
            def f(s, pad_mask):
                s.masked_fill_(pad_mask[:, :, None] | pad_mask[:, None, :], NEG)
                p = torch.softmax(s, -1)
                return p
            """,
            line=5,
            expected_fix="""
                import numpy as np
                import torch
                NEG = -np.inf
                def f(s, pad_mask):
                    s.masked_fill_(pad_mask[:, :, None] | pad_mask[:, None, :], torch.finfo(s.dtype).min)
                    p = torch.softmax(s, -1)
                    return p
                """,
        ),
        # a causal mask combined with padding is not causal any more
        Invalid("""
            import torch
            def f(s, attention_mask):
                n = s.size(-1)
                m = torch.tril(torch.ones(n, n)).bool() & attention_mask[:, None, :].bool()
                return torch.where(m, s, float('-inf')).softmax(-1)
            """,
            line=5,
            expected_fix="""
                import torch
                def f(s, attention_mask):
                    n = s.size(-1)
                    m = torch.tril(torch.ones(n, n)).bool() & attention_mask[:, None, :].bool()
                    return torch.where(m, s, torch.finfo(s.dtype).min).softmax(-1)
                """,
        ),
        # an additive mask for scaled_dot_product_attention
        Invalid("""
            import torch
            import torch.nn.functional as F
            def f(q, k, v, pad):
                bias = torch.zeros(pad.shape, dtype=q.dtype).masked_fill(torch.logical_or(pad[:, :, None], pad[:, None, :]), float('-inf'))
                return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            """,
            expected_fix=None,
        ),
        # the receiver cannot be named: no fix
        Invalid("""
            import torch
            def f(q, k, pad):
                return (q @ k.T).masked_fill(pad.unsqueeze(-1) | pad.unsqueeze(-2), float('-inf')).softmax(-1)
            """,
            expected_fix=None,
        ),
    ]

    def begin_file(self, ctx) -> bool:
        """The file's state: whether it can hold -inf at all -- spelled with "inf"
        (float("-inf"), math.inf, np.NINF...) or from a config."""
        return may_hold_inf(ctx.source)

    def _is_neg_inf(self, ctx, expr):
        if expr is None or not ctx.state(self):
            return None
        if not isinstance(expr, (ast.Call, ast.UnaryOp, ast.Name, ast.Attribute)):
            return None
        value = ctx.evaluate(expr)
        if value is not None and isinstance(value.value, float) and math.isinf(value.value) and value.value < 0:
            return value
        return None

    def _check(self, ctx, node, value_expr, mask, target, produced=None):
        value = self._is_neg_inf(ctx, value_expr)
        if value is None:
            return
        if (not feeds_softmax(ctx, node, produced, SOFTMAX_ATTRS + ATTENTION_CONSUMERS)
                and added_to_softmax_scores(ctx, node) is None):  # bias = ...fill(-inf); scores += bias
            return
        kind = mask_kind(ctx, mask, node) if mask is not None else "unknown"
        rows = padded_query_rows(ctx, node, mask, kind)
        kind = "pairwise" if rows is not None else kind
        if kind in ("causal", "padding"):
            return  # a padding mask alone masks keys: every sequence keeps its real positions
        if _self_threshold(mask, target):
            return  # logits[logits < v[:, [-1]]] = -inf: top-k filtering keeps the largest value
        if mask is not None and _zeroed_after(ctx, node, mask):
            return  # softmax(...).masked_fill(mask, 0): the NaN rows are zeroed, and so is their gradient
        fix = None
        tensor = tensor_name(target) if target is not None else None
        if tensor is not None and not origin_has_default(value):
            text = finfo_text(ctx, tensor, True)
            if text is not None:
                fix = Fix([Edit.replace(value_expr, text)], "unsafe", f"Fill with `{text}` (a fully masked row becomes uniform, not NaN)")
        shown = ctx.segment(value_expr)
        literal = isinstance(value_expr, (ast.Call, ast.UnaryOp))
        desc = f"`{shown}`" if literal else f"`{shown}` (= -inf)"
        if rows in _ROW_REASONS:
            message = f"{desc} fill before a softmax: {_ROW_REASONS[rows]}, so that row becomes NaN, in every dtype"
        elif kind == "pairwise":
            message = (f"{desc} fill before a softmax: the mask pads queries as well as keys (or adds "
                       "padding to a causal mask), so a padded row is masked entirely and becomes NaN, "
                       "in every dtype")
        else:
            message = (f"{desc} fill before a softmax: if the mask can cover a whole row, that row "
                       "becomes NaN in every dtype (not flagged for causal tril/triu masks or a padding "
                       "mask alone)")
        ctx.report(self, value_expr, message, fix=fix, related=value.origin,
                   severity=Severity.WARNING if kind == "pairwise" else Severity.INFO)

    def visit_Call(self, node: ast.Call, ctx) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name == "triu":
            self._check_triangle(ctx, node)
            return
        if name not in ("masked_fill", "masked_fill_", "where"):
            return
        qn = ctx.qualname(func)
        if qn is not None and not qn.startswith("torch."):
            return
        args = node.args
        if name == "where":
            if qn is not None and len(args) == 3:
                cond, a, b = args
                self._check(ctx, node, b, cond, a)
                self._check(ctx, node, a, cond, b)
            elif qn is None and isinstance(func, ast.Attribute) and len(args) == 2:
                self._check(ctx, node, args[1], args[0], func.value)
            return
        if qn is not None:  # torch.masked_fill(x, mask, value)
            target, first = argument(node, "input", 0), 1
        elif isinstance(func, ast.Attribute):  # x.masked_fill(mask, value)
            target, first = func.value, 0
        else:  # a helper of the same name (ONNX symbolics' masked_fill(g, ...)): not torch's
            return
        mask, value = argument(node, "mask", first), argument(node, "value", first + 1)
        produced = {target.id} if name.endswith("_") and isinstance(target, ast.Name) else None
        self._check(ctx, node, value, mask, target, produced)

    def _check_triangle(self, ctx, node: ast.Call) -> None:
        """``scores += torch.triu(-inf, diagonal=0)``: the diagonal is masked too."""
        if not ctx.state(self):
            return
        d = diagonal_inf_triangle(ctx, node, lambda e: self._is_neg_inf(ctx, e) is not None)
        if d is not None:
            ctx.report(self, node, f"`triu` of -inf with diagonal={d} before a softmax masks the diagonal too: "
                       "the first row is all -inf and becomes NaN, in every dtype (a causal mask uses "
                       "diagonal=1)", severity=Severity.WARNING)

    def visit_Assign(self, node: ast.Assign, ctx) -> None:
        if not ctx.state(self) or len(node.targets) != 1 or node.targets[0].__class__ is not ast.Subscript:
            return
        if self._is_neg_inf(ctx, node.value) is None:
            return
        sub = node.targets[0]
        if _fixed_column(sub.slice):
            return  # logits[:, pad_idx] = -inf: one column of every row, the rest survives
        target = tensor_name(sub)
        produced = {target.id} if isinstance(target, ast.Name) else None
        self._check(ctx, node.value, node.value, sub.slice, sub, produced)


#: why a mask empties a row although its name says padding or nothing (analysis.padded_rows)
_ROW_REASONS = {
    "outer": "the mask fills the union of a query mask and a key mask (an outer product), so a masked query has every key masked",
    "window": "a padding mask over a sliding window of keys: a padded query whose whole window is padding keeps no key",
    "band": "a mask added to scores that already carry a band (sliding-window) mask: a query whose band it covers keeps no key",
}


def _zeroed_after(ctx, node: ast.AST, mask: ast.AST) -> bool:
    """Whether the softmax's output is later set to 0 where the same mask is --
    ``softmax(s).masked_fill(mask, 0)``, ``attn = attn.clone(); attn[mask] = 0`` (rl4co, funasr):
    a fully masked row's NaN is replaced by zeros, and its gradient is zero too (the -inf
    fill passes none to the masked scores).  Zeroing after ``@ v`` would not do: v's gradient
    would still read the NaN row."""
    func = ctx.enclosing_function(node)
    if func is None:
        return False
    shape, line = ast.dump(mask), getattr(node, "lineno", 0)
    bound = ctx.get(Assignments).of(func)  # name -> [(line, col, value or None, statement)]

    def probabilities(expr, depth=0) -> bool:
        if expr.__class__ is ast.Call:
            name = expr.func.attr if expr.func.__class__ is ast.Attribute else getattr(expr.func, "id", None)
            if name == "softmax":
                return True
            return name == "clone" and expr.func.__class__ is ast.Attribute and probabilities(expr.func.value, depth)
        if expr.__class__ is ast.Name and depth < 3:
            return any(e[2] is not None and probabilities(e[2], depth + 1) for e in bound.get(expr.id, ()))
        return False

    def zero(value) -> bool:
        return value.__class__ is ast.Constant and value.value in (0, 0.0) and not isinstance(value.value, bool)

    for other in ast.walk(func):
        if getattr(other, "lineno", 0) < line or other is node:
            continue
        if (other.__class__ is ast.Call and other.func.__class__ is ast.Attribute
                and other.func.attr in ("masked_fill", "masked_fill_") and len(other.args) == 2
                and zero(other.args[1]) and ast.dump(other.args[0]) == shape and probabilities(other.func.value)):
            return True
        if (other.__class__ is ast.Assign and len(other.targets) == 1 and other.targets[0].__class__ is ast.Subscript
                and zero(other.value) and ast.dump(other.targets[0].slice) == shape
                and probabilities(other.targets[0].value)):
            return True
    return False


def _fixed_column(index: ast.AST) -> bool:
    """``[:, i]`` / ``[..., i]``: full slices, then one position (a name, attribute or
    integer, not a mask) in the last dimension, the one a softmax normalises."""
    if index.__class__ is not ast.Tuple or len(index.elts) < 2:
        return False
    *leading, last = index.elts
    full = all((e.__class__ is ast.Slice and e.lower is None and e.upper is None and e.step is None)
               or (e.__class__ is ast.Constant and e.value is Ellipsis) for e in leading)
    scalar = (last.__class__ is ast.Constant and isinstance(last.value, int)) or (
        last.__class__ in (ast.Name, ast.Attribute)
        and not any(w in (last.id if last.__class__ is ast.Name else last.attr).lower() for w in ("mask", "remove", "pad_mask")))
    return full and scalar
