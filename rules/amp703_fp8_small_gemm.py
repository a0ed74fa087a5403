"""AMP703 fp8-small-gemm: an ``nn.Linear`` whose GEMM is below the measured fp8
break-even runs slower in fp8 than in bf16."""
from __future__ import annotations

from amplint.fp8.setup import ProjectFp8Setup
from amplint.numerics import FP8
from amplint.rule import Invalid, Rule, Severity, Valid


class Fp8SmallGemm(Rule):
    code = "AMP703"
    name = "fp8-small-gemm"
    summary = "nn.Linear GEMM below the measured fp8 break-even: converting it makes the step slower"
    severity = Severity.WARNING
    options = ("target",)
    doc_settings = {"target": "fp8"}
    markers = ("Linear",)
    docs = """
## What it does
With `--target fp8`, flags `nn.Linear` layers (aligned or not: an unaligned one, AMP702's,
would not gain even padded) whose GEMM at 8192 tokens per step (M; the linter cannot see the batch, `amplint fp8-plan
--tokens N` can) is below the measured break-even of the project's torchao recipe
(tensorwise unless the project names `rowwise`). Output heads and input projections are
AMP704's. Not reported when the project trains with TransformerEngine (its own kernels:
this break-even is torchao's).

## Why is this bad?
A `Float8Linear` runs three fp8 GEMMs per step (output, input gradient, weight gradient)
but first computes an absolute maximum of, and casts, its input, its weight and its
output gradient: work proportional to M*K + K*N + M*N, while the GEMM's saving grows with
M*K*N. Below the break-even the casts cost more than the faster matmul saves.

Measured on an H200 (`bench/fp8_gemm.py`: one `nn.Linear` forward + backward, bf16 input
and weight, `torch.compile`d, GPU kernel time; torch 2.11, torchao 0.18.0), speedup of
fp8 over bf16:

| M x K x N | bf16 ms | tensorwise | rowwise |
|---|---|---|---|
| 4096 x 1024 x 1024 | 0.051 | 0.70x | 0.41x |
| 4096 x 1024 x 8192 | 0.287 | 0.95x | 0.67x |
| 4096 x 2048 x 8192 | 0.565 | 1.14x | 0.82x |
| 4096 x 4096 x 4096 | 0.641 | 1.34x | 0.90x |
| 16384 x 512 x 8192 | 0.635 | 0.78x | 0.70x |
| 16384 x 1024 x 4096 | 0.593 | 1.05x | 0.80x |
| 16384 x 2048 x 4096 | 1.257 | 1.36x | 1.04x |
| 16384 x 4096 x 4096 | 2.460 | 1.44x | 1.09x |
| 16384 x 8192 x 8192 | 9.996 | 1.54x | 1.35x |

The break-even fitted from the 50 measured shapes (every shape above it gained):

| recipe | M x K x N at least | and K, N at least |
|---|---|---|
| tensorwise | 6.9e10 (2^36) | 1024 |
| rowwise | 5.5e11 (2^39) | 2048 |

No shape with K or N of 512 gained in either recipe, at any M measured. The whole table
is in `bench/RESULTS.md`. Whole models show the same: GPT-2 small (all K or N = 768) at
8192 tokens took 38.7 ms per compiled training step with every Linear in tensorwise fp8
and 41.2 ms rowwise, against 24.5 ms in bf16.

## Example
```python
import torch.nn as nn

attn_out = nn.Linear(768, 768)
```

## Use instead
Keep it bf16 with the filter `amplint fp8-plan` writes:
```python
from torchao.float8 import convert_to_float8_training

from fp8_filter import module_filter_fn

convert_to_float8_training(model, module_filter_fn=module_filter_fn)
```

No fix: the choice is made in the training script's filter (`amplint fp8-plan`), not in
the layer.
"""

    VALID = [
        Valid("""
            import torch.nn as nn
            mlp = nn.Linear(4096, 14336)
            """, settings={"target": "fp8"}),
        Valid("""
            import torch.nn as nn
            attn_out = nn.Linear(768, 768)
            """),
    ]
    INVALID = [
        Invalid("""
            import torch.nn as nn
            attn_out = nn.Linear(768, 768)
            """, line=2, message="below the measured tensorwise break-even", settings={"target": "fp8"}),
        # the project's recipe decides the break-even
        Invalid("""
            import torch.nn as nn
            from torchao.float8 import Float8LinearConfig
            config = Float8LinearConfig.from_recipe_name("rowwise")
            mlp = nn.Linear(2048, 8192)
            """, line=4, message="rowwise", settings={"target": "fp8"}),
    ]

    def begin_file(self, ctx):
        return ctx.format is FP8

    def end_file(self, ctx) -> None:
        if not ctx.state(self):
            return
        # imported here: a file not linted for fp8 (most) never needs the fp8 survey
        from amplint.fp8.gemm import ALIGNMENT, BREAK_EVEN, DEFAULT_TOKENS, mkn_text, nearest_speedup
        from amplint.fp8.survey import Fp8Survey, site_label

        setup = ctx.get(ProjectFp8Setup).setup
        if not setup.swaps_linears:
            return  # TransformerEngine: its own kernels and scaling, not the torchao break-even measured here
        recipe = setup.recipe
        be = BREAK_EVEN[recipe]
        m = DEFAULT_TOKENS
        for site in ctx.get(Fp8Survey).linears:
            if site.role:
                continue
            k, n = site.in_features, site.out_features
            if k is None or n is None:
                # one side known: below the break-even's smallest side whatever the other is
                # (a LoRA rank of 8), judged at its largest value
                known = [(label, max(sizes)) for label, sizes in (("in_features", site.in_sizes), ("out_features", site.out_sizes)) if sizes]
                narrow = [(label, size) for label, size in known if size < be.min_side]
                if not narrow:
                    continue
                label, size = narrow[0]
                message = (f"{site_label(site)}: {label} {size} is below the measured {recipe} break-even's smallest "
                           f"side ({be.min_side}; no measured shape with K or N of 512 gained at any M): fp8 makes it "
                           f"slower whatever the other size is; keep it bf16 in the module_filter_fn (`amplint fp8-plan` "
                           f"writes one) [{setup.label()}]")
                ctx.report(self, site.call, message)
                continue
            if be.gains(m, k, n):
                continue
            shape, speedup = nearest_speedup(m, k, n, recipe)
            mkn = m * k * n
            message = (f"{site_label(site)}: at {m} tokens per step its GEMM is {m} x {k} x {n} = {mkn_text(mkn)}, "
                       f"below the measured {recipe} break-even (M x K x N >= {mkn_text(be.mkn)} with K, N >= {be.min_side}): "
                       f"fp8 makes it slower (H200: {shape[0]}x{shape[1]}x{shape[2]} ran {speedup:.2f}x of bf16); keep it bf16 in "
                       f"the module_filter_fn (`amplint fp8-plan` writes one) [{setup.label()}]")
            ctx.report(self, site.call, message)
