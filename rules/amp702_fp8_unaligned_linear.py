"""AMP702 fp8-unaligned-linear: an ``nn.Linear`` whose sizes are not multiples of 16
cannot run as an fp8 GEMM and stays bf16."""
from __future__ import annotations

from amplint.analysis.dims import next_multiple
from amplint.fp8.setup import ProjectFp8Setup
from amplint.numerics import FP8
from amplint.rule import Invalid, Rule, Severity, Valid


class Fp8UnalignedLinear(Rule):
    code = "AMP702"
    name = "fp8-unaligned-linear"
    summary = "nn.Linear sizes not multiples of 16: the layer cannot use the fp8 GEMM and stays bf16"
    severity = Severity.WARNING
    options = ("target",)
    doc_settings = {"target": "fp8"}
    markers = ("Linear",)
    docs = """
## What it does
With `--target fp8`, flags `nn.Linear` layers whose `in_features` or `out_features` (as the
semantic core resolves them, the same values AMP201 follows: literals, constants, config
defaults, `4 * n_embd`, the values call sites pass, also through `**kwargs` dicts) is not a
multiple of 16. One unaligned value is enough (a LoRA `nn.Linear(in_features, r)` with
`r = 8` from the config, whatever `in_features` is). The message says what the layer is worth at the model's size: its share
of the file's Linear FLOPs, and what fp8 would have gained on it, padded, at 8192 tokens
per step (the measured H200 speedup of the nearest shape, `bench/fp8_gemm.py`).

Unlike AMP201, small heads are flagged too (a 10-class classifier, a 1-output regression
head): too small to gain from fp8, but `convert_to_float8_training` without a filter converts
them and the fp8 GEMM rejects their sizes, so the filter must name them.

## Why is this bad?
The fp8 GEMM (`torch._scaled_mm`, cuBLASLt's fp8 kernels) requires both sizes of the
weight to be multiples of 16 (PyTorch's CUDA implementation checks it and raises).
torchao's `convert_to_float8_training` converts such a layer anyway (it does not look at
the sizes), so every working setup filters them out -- torchao's documented
`module_filter_fn` example and its `_auto_filter_for_recipe` skip them, torchtitan
likewise -- and the layer then silently trains in bf16.

What that costs depends on the layer: measured on an H200 (one Linear forward +
backward, compiled, GPU time), tensorwise fp8 runs a 16384 x 4096 x 4096 GEMM 1.44x
faster than bf16 and a 16384 x 8192 x 8192 one 1.54x, but a 4096 x 1024 x 8192 one 0.95x
(slower). A GPT-2 vocabulary head (K = 768) would not gain even padded; a 4096 x 11000
Llama-style MLP would (pad to 11008, what Llama does).

## Example
```python
import torch.nn as nn

mlp_up = nn.Linear(4096, 11000)
```

## Use instead
```python
import torch.nn as nn

mlp_up = nn.Linear(4096, 11008)  # a multiple of 16 (and of 64)
```

No fix here: padding changes the architecture (checkpoints no longer load). With
`--target fp8`, AMP201 (unaligned-dimension) offers the padding as an unsafe fix where
the number is written once.
"""

    VALID = [
        Valid("""
            import torch.nn as nn
            mlp = nn.Linear(4096, 11008)
            """, settings={"target": "fp8"}),
        Valid("""
            import torch.nn as nn
            mlp = nn.Linear(4096, 11000)
            """),
    ]
    INVALID = [
        # a 10-class head: nothing to gain, but an unfiltered conversion breaks on it
        Invalid("""
            import torch.nn as nn
            head = nn.Linear(4096, 10)
            """, message="a filter must skip it", settings={"target": "fp8"}),
        Invalid("""
            import torch.nn as nn
            up = nn.Linear(4096, 11000)
            down = nn.Linear(11000, 4096)
            """, line=2, count=2, message="out_features 11000 is not a multiple of 16: the layer stays bf16",
            settings={"target": "fp8"}),
        Invalid("""
            import torch.nn as nn
            N_EMBD = 768
            class GPT(nn.Module):
                def __init__(self, vocab_size=50257):
                    super().__init__()
                    self.lm_head = nn.Linear(N_EMBD, vocab_size, bias=False)
            """, message="would not gain even padded", settings={"target": "fp8"}),
    ]

    def begin_file(self, ctx):
        return ctx.format is FP8

    def end_file(self, ctx) -> None:
        if not ctx.state(self):
            return
        # imported here: a file not linted for fp8 (most) never needs the fp8 survey
        from amplint.fp8.gemm import ALIGNMENT, DEFAULT_TOKENS, nearest_speedup
        from amplint.fp8.survey import Fp8Survey, linear_flops_share, site_label

        survey, setup = ctx.get(Fp8Survey), ctx.get(ProjectFp8Setup).setup
        recipe = setup.recipe
        for site in survey.linears:
            k, n = site.in_features, site.out_features
            # every value a size takes (call sites, configs): one unaligned value is enough
            bad = [(label, size) for label, sizes in (("in_features", site.in_sizes), ("out_features", site.out_sizes))
                   for size in sizes if size % ALIGNMENT][:4]
            if not bad:
                continue
            sizes = ", ".join(f"{label} {size}" for label, size in bad)
            verb = "is" if len(bad) == 1 else "are"
            if k is None or n is None:  # the other size (or which value) is not known here: no cost estimate
                message = (f"{site_label(site)}: {sizes} {verb} not a multiple of {ALIGNMENT}: the layer stays bf16 "
                           f"under fp8 training (torch._scaled_mm needs multiples of {ALIGNMENT}; a filter must skip "
                           f"it) [{setup.label()}]")
                ctx.report(self, site.call, message)
                continue
            pk, pn = next_multiple(k, ALIGNMENT), next_multiple(n, ALIGNMENT)
            shape, speedup = nearest_speedup(DEFAULT_TOKENS, pk, pn, recipe)
            measured = f"the nearest measured shape, {shape[0]}x{shape[1]}x{shape[2]}, ran {speedup:.2f}x in {recipe} fp8 on an H200"
            share = linear_flops_share(survey, site)
            share_text = f"{share:.0%} of this file's Linear FLOPs" if share is not None else "its FLOPs"
            if speedup > 1:
                cost = (f"padded to {pk} x {pn} it would gain at {DEFAULT_TOKENS} tokens per step ({measured}): "
                        f"bf16 gives up about {(share or 1) * (1 - 1 / speedup):.0%} of the Linear GEMM time ({share_text})")
            else:
                cost = f"it would not gain even padded to {pk} x {pn} at {DEFAULT_TOKENS} tokens per step ({measured}): keep it bf16 on purpose"
            message = (f"{site_label(site)}: {sizes} {verb} not a multiple of {ALIGNMENT}: the layer stays bf16 under fp8 "
                       f"training (torch._scaled_mm needs multiples of {ALIGNMENT}; a filter must skip it); "
                       f"{cost} [{setup.label()}]")
            ctx.report(self, site.call, message)
