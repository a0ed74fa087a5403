"""AMP701 linear-bypasses-module-swap: a parameter used through ``F.linear`` / ``matmul``
/ ``@`` in ``forward`` is never converted by fp8 module swapping."""
from __future__ import annotations

from amplint.fp8.setup import ProjectFp8Setup
from amplint.numerics import FP8
from amplint.rule import Invalid, Rule, Severity, Valid


class LinearBypassesModuleSwap(Rule):
    code = "AMP701"
    name = "linear-bypasses-module-swap"
    summary = "A weight used through F.linear / matmul / @ in forward stays bf16: fp8 conversion swaps only nn.Linear modules"
    severity = Severity.WARNING
    options = ("target",)
    doc_settings = {"target": "fp8"}
    markers = ("linear", "matmul", "@", "mm(", "einsum")
    docs = """
## What it does
With `--target fp8`, flags GEMMs in a module's `forward` (or what it calls) that read a
weight of the module directly: `F.linear(x, self.weight)`, `torch.matmul(x, self.w)`,
`x @ self.w.t()`, `torch.mm`/`bmm`/`addmm`/`einsum` on an `nn.Parameter` the class creates,
and products with a submodule's weight (`x @ self.wte.weight.T`, a tied output head).

## Why is this bad?
fp8 training in PyTorch converts *modules*: torchao's `convert_to_float8_training` walks
the model and replaces each `nn.Linear` with a `Float8Linear`; torchtitan's
`quantize.linear.float8` converter and accelerate's torchao backend call the same
function. A GEMM written as `F.linear` or `@` on a parameter is no module, so it is
silently left in bf16: the conversion reports success and the step is as slow as
before for that GEMM. In GPT-2 style code that writes the tied output head as
`x @ self.wte.weight.T`, that is the largest GEMM of the model (768 x 50257: a third of
GPT-2-small's matmul FLOPs at 1024 tokens per sequence).

Where fp8 pays (K and N >= 1024 and M x K x N >= 6.9e10 for the tensorwise recipe,
measured on an H200: see AMP703), the GEMM left in bf16 gives up 1.1-1.5x on its share of
the step; below that keeping it bf16 costs nothing -- but then it should be a decision,
not an accident of how the layer was written.

## Example
```python
import torch
import torch.nn as nn
import torch.nn.functional as F


class Proj(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_out, d_in))
        self.bias = nn.Parameter(torch.zeros(d_out))

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)
```

## Use instead
```python
import torch.nn as nn


class Proj(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.proj = nn.Linear(d_in, d_out)

    def forward(self, x):
        return self.proj(x)
```
For a tied head, keep the tie with a module: `self.lm_head = nn.Linear(d, vocab,
bias=False)` and `self.lm_head.weight = self.wte.weight` (the embedding lookup is no GEMM;
the head now is an `nn.Linear` conversion can see -- or keep it bf16 on purpose, AMP704).

No automatic fix: moving a parameter into an `nn.Linear` renames it in the `state_dict`
(`weight` becomes `proj.weight`), so saved checkpoints need their keys mapped, and only
`F.linear(x, self.w[, self.b])` on the module's own 2-D weight is a plain linear; products
with transposes, batched weights or einsum equations need a person to decide.
"""

    VALID = [
        Valid("""
            import torch.nn as nn
            import torch.nn.functional as F
            class Proj(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(1024, 1024)
                def forward(self, x):
                    return self.proj(x)
            """, settings={"target": "fp8"}),
        # activations times activations: no weight, nothing to convert (attention scores)
        Valid("""
            import torch.nn as nn
            class Attn(nn.Module):
                def forward(self, q, k):
                    return q @ k.transpose(-2, -1)
            """, settings={"target": "fp8"}),
        # not fp8: the rule is off
        Valid("""
            import torch, torch.nn as nn
            import torch.nn.functional as F
            class Proj(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.w = nn.Parameter(torch.empty(1024, 1024))
                def forward(self, x):
                    return F.linear(x, self.w)
            """),
        # a registered buffer (a fixed basis), not a trained weight
        Valid("""
            import torch, torch.nn as nn
            class Dct(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("basis", torch.eye(64))
                def forward(self, x):
                    return x @ self.basis
            """, settings={"target": "fp8"}),
    ]
    INVALID = [
        Invalid("""
            import torch, torch.nn as nn
            import torch.nn.functional as F
            class Proj(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.weight = nn.Parameter(torch.empty(1024, 1024))
                def forward(self, x):
                    return F.linear(x, self.weight)
            """, line=8, message="`self.weight` is used through `F.linear`", settings={"target": "fp8"}),
        Invalid("""
            import torch.nn as nn
            class GPT(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.wte = nn.Embedding(50304, 768)
                def forward(self, x):
                    return x @ self.wte.weight.T
            """, line=7, message="tied", settings={"target": "fp8"}),
        Invalid("""
            import torch, torch.nn as nn
            class Mix(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.w = nn.Parameter(torch.randn(2048, 2048))
                def forward(self, x):
                    return torch.matmul(x, self.w.t())
            """, count=1, message="torch.matmul", settings={"target": "fp8"}),
    ]

    def begin_file(self, ctx):
        return ctx.format is FP8

    def end_file(self, ctx) -> None:
        if not ctx.state(self):
            return
        # imported here: a file not linted for fp8 (most) never needs the fp8 survey
        from amplint.fp8.survey import Fp8Survey

        setup = ctx.get(ProjectFp8Setup).setup
        for b in ctx.get(Fp8Survey).bypasses:
            if b.submodule_weight:
                what = (f"`{b.operand}` (a submodule's weight: a tied output head when it is an embedding's) is multiplied through `{b.how}`"
                        if b.operand.endswith(".weight") else f"`{b.operand}` is used through `{b.how}`")
                fix = "use an `nn.Linear` head and tie its `.weight` to the embedding, or keep it bf16 on purpose (AMP704)"
            elif b.inherited:
                what = (f"`{b.operand}` (this `nn.Linear` subclass's own weight) is used through `{b.how}` in an "
                        f"overridden forward")
                fix = ("a swap to an fp8 Linear either skips this class or replaces it and drops this forward (the "
                       "LoRA path): convert the inner GEMM on purpose or keep the layer bf16")
            else:
                what = f"`{b.operand}` is used through `{b.how}` in forward"
                fix = ("this is a plain linear: make it an `nn.Linear` submodule" if b.plain_linear
                       else "write the GEMM as an `nn.Linear` submodule where it is a plain linear")
            how = ("fp8 conversion swaps only `nn.Linear` modules" if setup.swaps_linears else
                   "TransformerEngine runs fp8 only inside its own modules (`te.Linear`)")
            message = f"{what}: {how}, so this GEMM silently stays bf16; {fix} [{setup.label()}]"
            related = [ctx.related(b.parameter, f"`{b.operand}` is created here")] if b.parameter is not None else []
            ctx.report(self, b.node, message, related=related)
