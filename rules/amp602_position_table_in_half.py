"""AMP602 rotary-or-sinusoidal-table-in-half: position x frequency angles and their sin/cos computed in half."""
from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from amplint import fixes
from amplint.analysis import calls, position_tables, positions
from amplint.rule import Edit, Fix, Invalid, Rule, Severity, Valid


@dataclasses.dataclass
class _FileState:
    casts: set = dataclasses.field(default_factory=set)  # angle casts reported (one per sin/cos pair)
    helpers: dict = dataclasses.field(default_factory=dict)  # id(helper) -> line of its half table, or None

class PositionTableInHalf(Rule):
    code = "AMP602"
    name = "rotary-or-sinusoidal-table-in-half"
    summary = "rotary / sinusoidal angles (positions x frequencies) and their sin/cos computed in half"
    severity = Severity.WARNING
    options = ("target", "opt-level", "device", "engine")
    fix_applicability = "safe"
    markers = ("sin", "cos", "outer", "einsum", "freq", "rotary", "Rotary")
    docs = """
## What it does
Flags the outer product of positions and frequencies -- `torch.outer(t, inv_freq)`,
`torch.einsum("i,j->ij", t, inv_freq)`, `t[:, None] * inv_freq[None, :]`,
`pos * div_term` -- computed in half inside position-encoding code (a class or function
named for rotary / sinusoidal / positional / timestep embeddings, or one computing both
`sin` and `cos`). Half means: an operand cast to the activation dtype (O1 and above), a
registered buffer such as `inv_freq` that `model.half()` / `model.to(torch.bfloat16)` / O2
casts (`info` under O1), an explicit `.half()` / `.bfloat16()`, or a product the selected
autocast policy runs in half (`einsum` under `engine = "torch"`). Also flags, in the same
code, an angle table cast to half right before its `sin` / `cos` (`freqs = freqs.to(t)`
then `freqs.cos()`; `torch.sin(angles.to(x))`): the cast, once per table. A call that
hands such a helper the activations' dtype (`create_sin_embedding(pos, d, dtype=x.dtype)`)
is reported too: that is where `torch.float32` goes.

## Why is this bad?
The angle `t * inv_freq` reaches the sequence length in radians, where half keeps few
bits: RoPE (dim 128, base 10000) computed in bf16 at T=4096 has a maximum phase error of
19.4 rad (fp16: 2.8 rad) and its `cos` table is off by 2.0 -- meaningless -- while the same
table computed in fp32 and cast to bf16 at the end is off by 0.002
(`bench/bf16_facts.py`). [transformers#25681](https://github.com/huggingface/transformers/issues/25681) and [#29285](https://github.com/huggingface/transformers/pull/29285),
[gpt-neox#1003](https://github.com/EleutherAI/gpt-neox/issues/1003) and
[TransformerEngine#1245](https://github.com/NVIDIA/TransformerEngine/issues/1245) (Llama 3.1 training instability) were this bug.

## Example
```python
import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim))

    def forward(self, x, seq_len):
        t = torch.arange(seq_len, device=x.device).type_as(x)
        freqs = torch.outer(t, self.inv_freq.to(x.dtype))
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()
```

## Use instead
Compute the angle and the tables in fp32 and cast `cos` / `sin` to the activation dtype at
the end (the pattern transformers settled on):
```python
import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim))

    def forward(self, x, seq_len):
        t = torch.arange(seq_len, device=x.device).float()
        freqs = torch.outer(t, self.inv_freq.float())
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)
```

## Fix safety
The fix is `safe`: in fp32 every edit is a no-op (`.float()` on an fp32 tensor, a cast
to the dtype it already has, an outer product written as the same single multiply per
element), so fp32 results are bit-identical; in half the table error drops from ~2 to the
final rounding (0.002 in bf16 at T=4096). It rewrites the cast that made the positions
half (`.type_as(x)` -> `.float()`, `dtype=x.dtype` -> `dtype=torch.float32`), upcasts the
other operand, writes an autocast-listed `einsum` / `outer` as a broadcast multiply, and
casts each `sin` / `cos` of the product back to the dtype the table had. It is offered only
when those `sin` / `cos` calls are in the same function (otherwise the fp32 table would
reach half code). A buffer that `model.half()` already rounded stays rounded: keep such
`inv_freq` in fp32 (recompute it, or exclude it from the cast).
"""

    VALID = [
        # the transformers pattern
        Valid("""
            import torch
            from torch import nn
            class RotaryEmbedding(nn.Module):
                def forward(self, x, seq_len):
                    t = torch.arange(seq_len, device=x.device).float()
                    freqs = torch.outer(t, self.inv_freq.float())
                    emb = torch.cat((freqs, freqs), dim=-1)
                    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)
            """),
        # int positions times an fp32 table computed here: fp32
        Valid("""
            import math
            import torch
            from torch import nn
            class SinusoidalPosEmb(nn.Module):
                def forward(self, x):
                    half_dim = 64
                    emb = torch.exp(torch.arange(half_dim) * -(math.log(10000) / (half_dim - 1)))
                    emb = x[:, None] * emb[None, :]
                    return torch.cat((emb.sin(), emb.cos()), dim=-1)
            """),
        # attention, not a position table
        Valid("""
            import torch
            from torch import nn
            class Attention(nn.Module):
                def forward(self, q, k):
                    return (q @ k.transpose(-2, -1)).to(q.dtype)
            """),
        # pure fp32 training
        Valid("""
            import torch
            from torch import nn
            class Rotary(nn.Module):
                def forward(self, x, n):
                    t = torch.arange(n).type_as(x)
                    return torch.outer(t, self.inv_freq.type_as(x)).cos()
            """,
            settings={"opt_level": "O0"},
        ),
    ]
    INVALID = [
        # x.new_tensor(range(n)) has the activation dtype: pos / 10000 ** (2i / d) runs in half
        Invalid("""
            import torch
            from torch import nn
            class SinusoidPositionalEmbedding(nn.Module):
                def forward(self, x):
                    n, d = x[0].shape
                    pos = x.new_tensor(range(n)).unsqueeze(-1) / 10000 ** (x.new_tensor(range(d)) // 2 * 2 / d)
                    return pos.sin()
            """,
            severity="warning",
            expected_fix="""
            import torch
            from torch import nn
            class SinusoidPositionalEmbedding(nn.Module):
                def forward(self, x):
                    n, d = x[0].shape
                    pos = x.new_tensor(range(n)).unsqueeze(-1).float() / (10000 ** (x.new_tensor(range(d)) // 2 * 2 / d)).float()
                    return pos.sin().to(torch.float16)
            """,
        ),
        # an fp32 angle table cast to the activation dtype before its sin / cos: the cast
        Invalid("""
            import torch
            class Rotary(torch.nn.Module):
                def forward(self, x, freqs):
                    angles = freqs.to(x)
                    return x * angles.cos() + x * angles.sin()
            """,
            line=4,
            count=1,
            expected_fix=None,
        ),
        Invalid("""
            import torch
            from torch import nn
            class RotaryEmbedding(nn.Module):
                def forward(self, x, seq_len):
                    t = torch.arange(seq_len, device=x.device).type_as(x)
                    freqs = torch.outer(t, self.inv_freq.to(x.dtype))
                    emb = torch.cat((freqs, freqs), dim=-1)
                    return emb.cos(), emb.sin()
            """,
            line=6,
            severity="warning",
            expected_fix="""
                import torch
                from torch import nn
                class RotaryEmbedding(nn.Module):
                    def forward(self, x, seq_len):
                        t = torch.arange(seq_len, device=x.device).float()
                        freqs = torch.outer(t, self.inv_freq.float())
                        emb = torch.cat((freqs, freqs), dim=-1)
                        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)
                """,
        ),
        # gpt-neox#1003 / transformers#25681: positions in the buffer's dtype, under O2
        Invalid("""
            import torch
            from torch import nn
            class RotaryEmbedding(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim))

                def forward(self, x, seq_len):
                    t = torch.arange(seq_len, device=x.device, dtype=self.inv_freq.dtype)
                    freqs = torch.einsum("i,j->ij", t, self.inv_freq)
                    emb = torch.cat((freqs, freqs), dim=-1)
                    return emb.cos()[None, None, :, :], emb.sin()[None, None, :, :]
            """,
            line=10,
            settings={"opt_level": "O2", "target": "bf16"},
            severity="warning",
            message="bf16",
            expected_fix="""
                import torch
                from torch import nn
                class RotaryEmbedding(nn.Module):
                    def __init__(self, dim):
                        super().__init__()
                        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim))

                    def forward(self, x, seq_len):
                        t = torch.arange(seq_len, device=x.device, dtype=torch.float32)
                        freqs = torch.einsum("i,j->ij", t, self.inv_freq.float())
                        emb = torch.cat((freqs, freqs), dim=-1)
                        return emb.cos().to(self.inv_freq.dtype)[None, None, :, :], emb.sin().to(self.inv_freq.dtype)[None, None, :, :]
                """,
        ),
        # the same buffer under O1: half only once the model is cast
        Invalid("""
            import torch
            from torch import nn
            class Rotary(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.register_buffer("inv_freq", torch.ones(dim))

                def forward(self, x, seq_len):
                    t = torch.arange(seq_len, device=x.device, dtype=self.inv_freq.dtype)
                    return torch.einsum("i,j->ij", t, self.inv_freq)
            """,
            severity="info",
            expected_fix=None,
        ),
        # torch.autocast runs einsum in half even on fp32 operands (x-clip's pattern)
        Invalid("""
            import torch
            from torch import nn
            class Rotary(nn.Module):
                def forward(self, x, n):
                    t = torch.arange(n, device=x.device).float()
                    freqs = torch.einsum("i , j -> i j", t, self.inv_freq)
                    return freqs.sin(), freqs.cos()
            """,
            settings={"engine": "torch"},
            expected_fix="""
                import torch
                from torch import nn
                class Rotary(nn.Module):
                    def forward(self, x, n):
                        t = torch.arange(n, device=x.device).float()
                        freqs = (t[:, None] * self.inv_freq.float()[None, :])
                        return freqs.sin(), freqs.cos()
                """,
        ),
        # sinusoidal table of a diffusion timestep cast to half explicitly
        Invalid("""
            import math
            import torch
            def timestep_embedding(timesteps, dim):
                freqs = torch.exp(-math.log(10000) * torch.arange(dim // 2).float() / (dim // 2))
                args = timesteps[:, None].half() * freqs[None].half()
                return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
            """,
            settings={"opt_level": "O0"},
            message="fp16",
            expected_fix="""
                import math
                import torch
                def timestep_embedding(timesteps, dim):
                    freqs = torch.exp(-math.log(10000) * torch.arange(dim // 2).float() / (dim // 2))
                    args = timesteps[:, None].float() * freqs[None].float()
                    return torch.cat([torch.cos(args).to(torch.float16), torch.sin(args).to(torch.float16)], dim=-1)
                """,
        ),
    ]

    def visit_BinOp(self, node: ast.BinOp, ctx) -> None:
        self._check(ctx, node)

    def begin_file(self, ctx) -> "_FileState":
        return _FileState()

    def visit_Call(self, node: ast.Call, ctx) -> None:
        self._check(ctx, node)
        if node.args or node.keywords:
            self._passes_activation_dtype(ctx, node)
        cast = position_tables.cast_angles(ctx, node)
        prec = ctx.precision_of(cast) if cast is not None else None
        if prec is None or prec.kind != "half" or id(cast) in ctx.state(self).casts:
            return
        ctx.state(self).casts.add(id(cast))
        half, level = prec.half, ctx.settings.opt_level
        later = half.mode == "buffer" and level == "O1"
        if not half.is_half_at(level) and not later:
            return
        how = f"{positions.when(half)}{' (fp32 under O1)' if later else ''}"
        ctx.report(self, cast, f"angles {how} before `{node.func.attr}`: at T=4096 a bf16 rotary `cos` table is "
                   f"off by 2.0 (fp16: 1.96); take sin/cos in fp32 and cast their result", severity=Severity.INFO if later else Severity.WARNING)

    def _check(self, ctx, node: ast.AST) -> None:
        verdict = self._verdict(ctx, node)
        if verdict is not None:
            ctx.report(self, node, verdict[0], fix=verdict[1], severity=verdict[2])

    def _passes_activation_dtype(self, ctx, call: ast.Call) -> None:
        """``create_sin_embedding(pos, d, dtype=x.dtype)``: the call that makes a helper's
        table half, where the fix goes (pass ``torch.float32``, cast the result)."""
        helper = position_tables.helper_given_activation_dtype(ctx, call)
        if helper is None:
            return
        helpers = ctx.state(self).helpers
        if id(helper) not in helpers:
            inner = next((n for n in ast.walk(helper) if n.__class__ in (ast.BinOp, ast.Call)
                          and (v := self._verdict(ctx, n)) is not None and v[2] is Severity.WARNING), None)
            helpers[id(helper)] = inner.lineno if inner is not None else None
        if helpers[id(helper)] is not None:
            ctx.report(self, call, f"passes the activation dtype to `{ctx.segment(call.func)}`, which computes position "
                       f"x frequency angles in it (line {helpers[id(helper)]}): pass `torch.float32` and cast the "
                       "table after", severity=Severity.WARNING)

    def _verdict(self, ctx, node: ast.AST):
        """(message, fix, severity) when ``node`` computes position x frequency angles in half."""
        found = position_tables.outer_operands(ctx, node)
        if found is None:
            return None
        kind, a, b = found
        a_pos, b_pos = positions.is_position_like(ctx, a), positions.is_position_like(ctx, b)
        if a_pos == b_pos or not position_tables.in_table_code(ctx, node):
            return None
        level = ctx.settings.opt_level
        pa, pb = ctx.precision_of(a), ctx.precision_of(b)
        product = ctx.precision_of(node)
        known_pos = pa if a_pos else pb
        if (product is None or product.kind != "half") and known_pos is None \
                and not position_tables.autocast_half(ctx, node, kind):
            product = pb if a_pos else pa  # positions of unseen dtype are integers: the table has the other's
        elif product is None and known_pos is not None and known_pos.kind == "half" and (pb if a_pos else pa) is None:
            product = known_pos  # half positions, frequencies of unseen dtype: the table is the positions' dtype
        half = product.half if product is not None and product.kind == "half" else None
        autocast = half is None and position_tables.autocast_half(ctx, node, kind)
        if half is None and not autocast:
            return None
        if half is not None and not half.is_half_at(level):
            if not (half.mode == "buffer" and level == "O1"):
                return None
            later = True
        else:
            later = False
        fmt_name = half.short if half is not None else positions.SHORT.get(positions.target_format(ctx.settings) or "", "half")
        if autocast:
            why = f"the {ctx.settings.engine} O1 policy runs `{kind}` in {fmt_name}"
        elif later:
            why = f"an operand is {positions.when(half)} (fp32 under O1)"
        else:
            why = f"an operand is {positions.when(half)}"
        message = (f"position x frequency angles computed in {fmt_name} ({why}): at T=4096 a bf16 rotary "
                   f"`cos` table is off by 2.0 (fp16: 1.96); compute the angle and sin/cos in fp32, "
                   f"cast the tables at the end")
        fix = None if later else self._fix(ctx, node, kind, (a, pa), (b, pb), half, autocast)
        return message, fix, Severity.INFO if later else Severity.WARNING

    # --- fix ---------------------------------------------------------------------------

    def _fix(self, ctx, node, kind, a_pair, b_pair, half, autocast) -> Optional[Fix]:
        torch = calls.torch_alias(ctx)
        trig = position_tables.trig_consumers(ctx, node)
        if torch is None or not trig:
            return None  # the tables leave this function: an fp32 table would reach half code
        func = ctx.enclosing_function(node)
        edits: list[Edit] = []
        texts = []
        for operand, prec in (a_pair, b_pair):
            cause = prec.half.cause if prec is not None and prec.kind == "half" else None
            if cause is not None and not _within(cause, operand):
                rewrite = self._rewrite_cause(ctx, cause, torch) if ctx.enclosing_function(cause) is func else None
                if rewrite is None:
                    return None  # half from a cast elsewhere: the positions are rounded before we see them
                edits.append(rewrite)
                texts.append(ctx.segment(operand))
            elif cause is not None and isinstance(cause, ast.Call) and cause is not operand:
                rewrite = self._rewrite_cause(ctx, cause, torch)
                if rewrite is None:
                    return None
                edits.append(rewrite)
                texts.append(None)
            elif prec is not None and prec.kind in ("fp32", "int"):
                texts.append(ctx.segment(operand))
            else:
                text = _upcast_text(ctx, _strip_cast(operand))
                edits.append(Edit.replace(operand, text))
                texts.append(text)
        if autocast:
            spec = node.args[0].value if kind == "einsum" else "i,j->ij"
            m = position_tables.OUTER_SPEC.match(spec)
            if kind not in ("einsum", "outer") or None in texts or m is None:
                return None  # a matmul under autocast needs `torch.autocast(..., enabled=False)`
            a_text, b_text = _postfix(texts[0]), _postfix(texts[1])
            if m.group(1) and m.group(4) and not m.group(2) and not m.group(5):
                product = f"({a_text}[..., None] * {b_text})"
            elif not m.group(1) and not m.group(4) and m.group(2) and (m.group(2), m.group(3)) == (m.group(5), m.group(6)):
                product = f"({a_text}[:, None] * {b_text}[None, :])"
            else:
                return None
            edits = [e for e in edits if not _within_pos(e, node)]
            edits.append(Edit.replace(node, product))
        if half is not None:
            source = half.source
            if source is not None and ("\n" in ctx.segment(source) or not _visible(ctx, source, node)):
                return None
            for call in trig:
                if position_tables.cast_follows(ctx, call):
                    continue
                if source is not None:
                    edits += fixes.cast_back(ctx, call, source)
                else:
                    edits.append(Edit.insert_after(call, f".to({torch}.{half.format})"))
        what = "the angle and sin/cos in fp32" + (", cast the tables back at the end" if half is not None else "")
        return Fix(edits, "safe", f"Compute {what}")

    @staticmethod
    def _rewrite_cause(ctx, cause: ast.AST, torch: str) -> Optional[Edit]:
        """``x.type_as(y)`` / ``x.to(y.dtype)`` / ``x.half()`` -> ``x.float()``;
        ``arange(..., dtype=x.dtype)`` -> ``dtype=torch.float32``."""
        if not isinstance(cause, ast.Call):
            return None
        if (ctx.qualname(cause.func) or "").startswith("torch."):
            kw = calls.keyword(cause, "dtype")
            return Edit.replace(kw.value, f"{torch}.float32") if kw is not None else None
        if isinstance(cause.func, ast.Attribute) and cause.func.attr in ("to", "type", "type_as", "half", "bfloat16"):
            if len(cause.args) + len(cause.keywords) > 1:
                return None
            receiver = cause.func.value
            return Edit.replace(cause, _upcast_text(ctx, receiver))
        return None


def _strip_cast(node: ast.AST) -> ast.AST:
    """``x.to(y.dtype)`` / ``x.half()`` / ``x.type_as(y)`` -> ``x`` (the fix upcasts instead)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
            "to", "type", "type_as", "half", "bfloat16") and len(node.args) + len(node.keywords) <= 1:
        return node.func.value
    return node


def _upcast_text(ctx, node: ast.AST) -> str:
    text = ctx.segment(node)
    return _postfix(text) + ".float()" if not text.endswith(".float()") else text


def _postfix(text: str) -> str:
    try:
        expr = ast.parse(text, mode="eval").body
    except SyntaxError:
        return f"({text})"
    return text if isinstance(expr, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) else f"({text})"


def _within(inner: ast.AST, outer: ast.AST) -> bool:
    return any(n is inner for n in ast.walk(outer))


def _within_pos(edit: Edit, node: ast.AST) -> bool:
    start, end = (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)
    return start <= (edit.start.line, edit.start.col) and (edit.end.line, edit.end.col) <= end


def _visible(ctx, source: ast.AST, node: ast.AST) -> bool:
    """The cast-back source can be written where the tables are: ``self.x`` or a name of
    the same function."""
    root = source
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name):
        return False
    return ctx.enclosing_function(source) is ctx.enclosing_function(node)
