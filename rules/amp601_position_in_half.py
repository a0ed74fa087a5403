"""AMP601 position-in-half: integer positions or timesteps cast to half beyond its exact-integer range."""
from __future__ import annotations

import ast
from typing import Optional

from amplint.analysis import positions
from amplint.numerics import fmt
from amplint.rule import Invalid, Rule, Severity, Valid

_CASTS = frozenset({"to", "type", "type_as", "half", "bfloat16"})


def _range_end(ctx, expr: ast.AST, depth: int = 0) -> Optional[ast.AST]:
    """The ``end`` argument of the ``torch.arange`` the positions come from, if any."""
    root = positions.position_root(expr)
    if isinstance(root, ast.Call) and ctx.qualname(root.func) == "torch.arange":
        if not root.args:
            return next((k.value for k in root.keywords if k.arg == "end"), None)
        return root.args[0] if len(root.args) == 1 else root.args[1]
    if isinstance(root, ast.Name) and depth < 4:
        value = positions.reaching_value(ctx, root)
        if value is not None:
            return _range_end(ctx, value, depth + 1)
    return None


class PositionInHalf(Rule):
    code = "AMP601"
    name = "position-in-half"
    summary = "integer positions / timesteps cast to half where they exceed its exact-integer range (bf16 256, fp16 2048)"
    severity = Severity.WARNING
    options = ("target", "opt-level")
    markers = ("arange", "position", "timestep", "pos")
    docs = """
## What it does
Flags integer-valued tensors -- `torch.arange` positions, `position_ids`, `timesteps` --
cast to half: `torch.arange(n, dtype=x.dtype)`, `.to(x.dtype)`, `.type_as(x)`, `.half()`,
`.bfloat16()`, or `dtype=self.inv_freq.dtype` where `inv_freq` is a buffer that
`model.half()` / `model.to(torch.bfloat16)` / O2 casts.

The range comes from value flow: `torch.arange(max_position_embeddings, ...)` with
`max_position_embeddings = 4096` in the config is a `warning`; a length amplint cannot
follow is `info`; a known length within the exact range is not reported. Casts to the
activation dtype count under O1 and above, casts to a buffer's dtype under O2/O3 (`info`
under O1: they become half once the model is cast). The limit is the format's: 256 for
bf16, 2048 for fp16 (`target`, or the literal dtype written). Not flagged: integers that
only reach an exponent (`exp(arange(d / 2) * -c)`, `p ** (arange(h) / h)`): a sinusoid's
frequency index along the model width, not positions.

## Why is this bad?
bf16 has 8 significant bits: the first integer it cannot represent is 257, and positions
0..8191 collapse to 897 distinct values (fp16: 2049 and 4097). Positions 4097 and 4098
are the same bf16 number, so two tokens get the same rotary angle and the same sinusoidal
embedding. [transformers#25681](https://github.com/huggingface/transformers/issues/25681) and [#29285](https://github.com/huggingface/transformers/pull/29285) (Llama, Gemma),
[gpt-neox#1003](https://github.com/EleutherAI/gpt-neox/issues/1003) and
[TransformerEngine#1245](https://github.com/NVIDIA/TransformerEngine/issues/1245) (Llama 3.1 instability) were all this, found from a loss curve
(measured: `bench/bf16_facts.py`).

## Example
```python
import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    def forward(self, x):
        t = torch.arange(4096, device=x.device, dtype=x.dtype)
        return t
```

## Use instead
```python
import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    def forward(self, x):
        t = torch.arange(4096, device=x.device, dtype=torch.float32)
        return t
```
"""

    VALID = [
        Valid("""
            import torch
            from torch import nn
            class Rope(nn.Module):
                def forward(self, x):
                    return torch.arange(4096, device=x.device).float()
            """),
        # a short range is exact in bf16
        Valid("""
            import torch
            from torch import nn
            class Patches(nn.Module):
                def forward(self, x):
                    return torch.arange(196, dtype=x.dtype)
            """,
            settings={"target": "bf16"},
        ),
        # fp16 holds every integer up to 2048
        Valid("""
            import torch
            from torch import nn
            class Rope(nn.Module):
                def forward(self, x):
                    return torch.arange(1024, dtype=x.dtype)
            """),
        # pure fp32 training: the activation dtype is fp32
        Valid("""
            import torch
            from torch import nn
            class Rope(nn.Module):
                def forward(self, x, n):
                    return torch.arange(n).type_as(x)
            """,
            settings={"opt_level": "O0"},
        ),
        # fractional coordinates, not positions
        Valid("""
            import torch
            from torch import nn
            class Grid(nn.Module):
                def forward(self, x, n):
                    return torch.linspace(-1, 1, n, dtype=x.dtype)
            """),
    ]
    INVALID = [
        Invalid("""
            import torch
            from torch import nn
            class Rope(nn.Module):
                def forward(self, x):
                    t = torch.arange(8192, device=x.device)
                    return t.type_as(x)
            """,
            line=6,
            severity="warning",
            message="up to 8191",
        ),
        Invalid("""
            import torch
            from torch import nn
            MAX_LEN = 2048
            class Rope(nn.Module):
                def forward(self, x):
                    return torch.arange(MAX_LEN, dtype=x.dtype)
            """,
            settings={"target": "bf16"},
            severity="warning",
            message="256",
        ),
        # the length is a forward argument: info
        Invalid("""
            import torch
            from torch import nn
            class Rope(nn.Module):
                def forward(self, x, seq_len):
                    return torch.arange(seq_len, device=x.device).to(x.dtype)
            """,
            severity="info",
        ),
        # positions built as an fp32 arange, then cast to the activation dtype: still integers
        Invalid("""
            import torch
            from torch import nn
            class FourierPosEnc(nn.Module):
                def forward(self, x):
                    pos = torch.arange(0, x.size(1), dtype=torch.float32).unsqueeze(1).to(x)
                    return pos
            """,
            severity="info",
        ),
        # an explicit cast is half at every opt level
        Invalid("""
            import torch
            def timestep_embedding(timesteps):
                return timesteps.half()
            """,
            settings={"opt_level": "O0"},
            severity="info",
            message="fp16",
        ),
        # the dtype of a registered buffer: half once the model is cast
        Invalid("""
            import torch
            from torch import nn
            class Rope(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim))
                def forward(self, x, seq_len=4096):
                    return torch.arange(seq_len, dtype=self.inv_freq.dtype)
            """,
            line=8,
            severity="info",
            message="model.half()",
        ),
        Invalid("""
            import torch
            from torch import nn
            class Rope(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.register_buffer("inv_freq", torch.ones(dim))
                def forward(self, x, seq_len=4096):
                    return torch.arange(seq_len, dtype=self.inv_freq.dtype)
            """,
            settings={"opt_level": "O2", "target": "bf16"},
            severity="warning",
        ),
    ]

    def visit_Call(self, node: ast.Call, ctx) -> None:
        func = node.func
        qn = ctx.qualname(func)
        if qn == "torch.arange":
            if not any(k.arg == "dtype" for k in node.keywords):
                return
            end = _range_end(ctx, node)
            self._check(ctx, node, node, end)
        elif isinstance(func, ast.Attribute) and func.attr in _CASTS:
            receiver = func.value
            before = ctx.precision_of(receiver)
            end = _range_end(ctx, receiver)
            if before is not None and (before.kind == "half" or before.kind == "fp32" and end is None):
                return  # already half (reported where it became half) or a float value, not an fp32 arange
            root = positions.position_root(receiver)
            # a position name, or arithmetic on positions (ALiBi's `(j - i).abs()` distances)
            named = isinstance(root, (ast.Name, ast.BinOp)) and positions.is_position_like(ctx, root)
            if end is None and not named:
                return
            self._check(ctx, node, node, end)

    def _check(self, ctx, node: ast.Call, cast: ast.Call, end: Optional[ast.AST]) -> None:
        prec = ctx.precision_of(cast)
        if prec is None or prec.kind != "half":
            return
        if positions.frequency_index(ctx, node):
            return  # `exp(arange(d / 2) * -c)`: a sinusoid's frequency index along the width, not a position
        half = prec.half
        func = ctx.enclosing_function(node)
        if half.mode == "activation" and func is not None and func.name == "__init__":
            return  # no activation exists at construction: `.to(weight)` there is fp32
        level = ctx.settings.opt_level
        later = half.mode == "buffer" and level == "O1"
        if not half.is_half_at(level) and not later:
            return
        value = ctx.evaluate(end) if end is not None else None
        if value is not None and value.value - 1 <= positions.limit(half):
            return
        if value is not None:
            severity = Severity.INFO if later else Severity.WARNING
            size = f"positions up to {fmt(value.value - 1)}"
        else:
            severity = Severity.INFO
            size = "positions whose range amplint cannot follow"
        if later:
            how = f"{positions.when(half)} (fp32 under O1)"
        else:
            how = positions.when(half)
        message = (f"{size} {how}: {half.short} holds integers exactly only up to {positions.limit(half)}, "
                   f"so nearby positions collide; keep positions in fp32 (or int64)")
        related = list(value.origin) if value is not None else []
        ctx.report(self, node, message, severity=severity, related=related)
