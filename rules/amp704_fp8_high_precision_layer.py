"""AMP704 fp8-high-precision-layer: the output head (or the first projection) would be
converted to fp8, where convention keeps it in high precision."""
from __future__ import annotations

from amplint.fp8.setup import ProjectFp8Setup
from amplint.numerics import FP8
from amplint.rule import Invalid, Rule, Severity, Valid


class Fp8HighPrecisionLayer(Rule):
    code = "AMP704"
    name = "fp8-high-precision-layer"
    summary = "The output head / tied embedding head / first projection would be converted to fp8; convention keeps it high precision"
    severity = Severity.INFO
    options = ("target",)
    doc_settings = {"target": "fp8"}
    markers = ("Linear",)
    docs = """
## What it does
With `--target fp8`, points at the `nn.Linear` layers that fp8 recipes keep in high
precision by convention, when no `module_filter_fn` in the linted files names them:

- the output projection: an `nn.Linear` bound to `lm_head`, `output`, `head`,
  `classifier`, `decoder`, `score`, ..., or one whose `.weight` is tied to another
  module's (`self.lm_head.weight = self.wte.weight`);
- the first projection: a Linear named like an input embedding (`patch_embed`,
  `input_proj`, `proj_in`, `stem`, ...), which reads the raw input.

## Why is this bad?
Not an error: a choice to make on purpose. In fp8 the layer's input and weight are rounded
to e4m3 (3 mantissa bits: a relative step of 6.25 % at 1.0, against bf16's 0.78 %), and its
output gradient to e4m3 or e5m2. The output head's error reaches the logits, and so the
loss and every gradient, without a later layer to average it out; the first layer sees
unnormalised data whose range one tensor-wise scale fits badly. So the reference
setups keep them in bf16: torchao's `module_filter_fn` example skips `fqn == "output"`
(torchtitan's Llama head), torchtitan's float8 converter filters `output` by default, and
accelerate's FP8 backends keep `find_first_last_linear_layers` (the first and the last
Linear) in high precision. Their GEMMs are often too small or unaligned to gain anyway
(AMP702, AMP703): a GPT-2 head is 768 x 50257.

## Example
```python
import torch.nn as nn


class LM(nn.Module):
    def __init__(self, vocab=128256, dim=2048):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.output = nn.Linear(dim, vocab, bias=False)
```
trained with `convert_to_float8_training(model)` and no filter.

## Use instead
```python
def module_filter_fn(module, fqn):
    return fqn != "output"


convert_to_float8_training(model, module_filter_fn=module_filter_fn)
```
or the filter `amplint fp8-plan` writes, which already keeps the head.

No fix: the filter lives in the training script. Converting the head can be right for
very large vocabularies -- measure it (`amplint verify --target fp8` reports the loss
difference and each layer's error).
"""

    VALID = [
        Valid("""
            import torch.nn as nn
            from torchao.float8 import convert_to_float8_training
            class LM(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.output = nn.Linear(2048, 128256, bias=False)
            def module_filter_fn(mod, fqn):
                return fqn != "output"
            convert_to_float8_training(LM(), module_filter_fn=module_filter_fn)
            """, settings={"target": "fp8"}),
        Valid("""
            import torch.nn as nn
            class LM(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lm_head = nn.Linear(2048, 128256, bias=False)
            """),
    ]
    INVALID = [
        Invalid("""
            import torch.nn as nn
            class LM(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.output = nn.Linear(2048, 128256, bias=False)
            """, line=5, message="the output projection", severity="info", settings={"target": "fp8"}),
        Invalid("""
            import torch.nn as nn
            class GPT(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.wte = nn.Embedding(50304, 768)
                    self.proj = nn.Linear(768, 50304, bias=False)
                    self.proj.weight = self.wte.weight
            """, line=6, message="tied to `wte`", settings={"target": "fp8"}),
        Invalid("""
            import torch.nn as nn
            class ViT(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.patch_embed = nn.Linear(768, 1024)
            """, message="first projection", settings={"target": "fp8"}),
    ]

    def begin_file(self, ctx):
        return ctx.format is FP8

    def end_file(self, ctx) -> None:
        if not ctx.state(self):
            return
        # imported here: a file not linted for fp8 (most) never needs the fp8 survey
        from amplint.fp8.gemm import ALIGNMENT
        from amplint.fp8.survey import Fp8Survey, site_label

        setup = ctx.get(ProjectFp8Setup).setup
        for site in ctx.get(Fp8Survey).linears:
            if not site.role or (site.name and site.name in setup.filter_strings):
                continue  # a filter in the linted files names it
            if any(size is not None and size % ALIGNMENT for size in (site.in_features, site.out_features)):
                continue  # it cannot be converted at all: AMP702's
            if setup.kind == "torchtitan" and site.name == "output":
                continue  # torchtitan's float8 converter filters `output` by default
            keep = "kept in high precision by convention"
            where = ("torchao's module_filter_fn example skips `output`, torchtitan filters it, accelerate keeps the first "
                     "and last Linear")
            why = ("its rounding reaches the logits and the loss directly" if site.role == "head"
                   else "it sees unnormalised input that one tensor-wise scale fits badly")
            message = (f"{site_label(site)} is {site.role_reason}: fp8 conversion would round it to e4m3; {keep} "
                       f"({where}): {why}; exclude it in the module_filter_fn (`amplint fp8-plan` does) "
                       f"[{setup.label()}]")
            ctx.report(self, site.call, message)
