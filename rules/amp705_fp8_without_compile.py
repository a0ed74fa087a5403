"""AMP705 fp8-without-compile: a training script converts to fp8 but nothing compiles
the model."""
from __future__ import annotations

from amplint.fp8.setup import ProjectFp8Setup
from amplint.numerics import FP8
from amplint.rule import Invalid, Rule, Severity, Valid


class Fp8WithoutCompile(Rule):
    code = "AMP705"
    name = "fp8-without-compile"
    summary = "convert_to_float8_training without torch.compile: fp8 casts run eagerly and the step gets slower"
    severity = Severity.WARNING
    options = ("target",)
    doc_settings = {"target": "fp8"}
    markers = ("convert_to_float8_training",)
    markers_required = True
    docs = """
## What it does
With `--target fp8`, flags `convert_to_float8_training(...)` (torchao; torchtitan and
accelerate call it for you) when no linted file calls `torch.compile` (or a module's
`.compile()`).

## Why is this bad?
torchao's `Float8Linear` does its dynamic scaling in PyTorch code: an absolute maximum
over the input, the weight and the output gradient, a scale and a cast to fp8 for each
of them, every step. Under `torch.compile` Inductor fuses them into a few kernels around
the fp8 GEMMs; eagerly each is a separate kernel that reads and writes the whole tensor.
torchao's float8 README says `torch.compile` is needed for good performance, and
torchtitan's float8 docs mark `--compile` as required. (Eager fp8 was not timed here.)
Even compiled, the casts decide the break-even: on an H200 a
4096 x 1024 x 1024 Linear ran 0.70x of bf16 in tensorwise fp8, a 16384 x 8192 x 8192 one
1.54x (AMP703).

## Example
```python
from torchao.float8 import convert_to_float8_training

convert_to_float8_training(model)
for batch in loader:
    loss = model(batch).loss
```

## Use instead
```python
import torch
from torchao.float8 import convert_to_float8_training

convert_to_float8_training(model)
model = torch.compile(model)
```

No fix: where to compile (the whole model, each block, with which mode) is the training
script's choice.
"""

    VALID = [
        Valid("""
            import torch
            from torchao.float8 import convert_to_float8_training
            convert_to_float8_training(model)
            model = torch.compile(model)
            """, settings={"target": "fp8"}),
        Valid("""
            from torchao.float8 import convert_to_float8_training
            convert_to_float8_training(model)
            model.compile()
            """, settings={"target": "fp8"}),
        Valid("""
            from torchao.float8 import convert_to_float8_training
            convert_to_float8_training(model)
            """),
    ]
    INVALID = [
        Invalid("""
            from torchao.float8 import convert_to_float8_training
            convert_to_float8_training(model)
            """, line=2, message="no linted file calls `torch.compile`", settings={"target": "fp8"}),
    ]

    def begin_file(self, ctx):
        return ctx.format is FP8

    def visit_Call(self, node, ctx) -> None:
        if not ctx.state(self):
            return
        func = node.func
        name = func.attr if hasattr(func, "attr") else getattr(func, "id", None)
        if name != "convert_to_float8_training" or ctx.get(ProjectFp8Setup).setup.compiled:
            return
        ctx.report(self, node, "`convert_to_float8_training` but no linted file calls `torch.compile`: torchao's fp8 "
                               "amax, scale and cast steps then run as separate eager kernels and the step is slower "
                               "than bf16; compile the model after converting it")
