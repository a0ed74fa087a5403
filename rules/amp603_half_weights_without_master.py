"""AMP603 half-weights-without-master: a model cast to half and stepped by an optimizer with no fp32 master copy."""
from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from amplint.dtypes import dtype_literal
from amplint.rule import Fix, Invalid, Rule, Severity, Valid

#: optimizers (or wrappers) known to keep fp32 master weights, Kahan sums or stochastic rounding
_MASTER_OPTIMIZERS = ("FP16_Optimizer", "AnyPrecisionAdamW", "MixedPrecisionOptimizer", "MasterWeights",
                      "StochasticRounding", "FusedMixedPrecisionLamb")
_MASTER_KEYWORDS = ("use_kahan_summation", "master_weights", "use_master_weights", "stochastic_rounding")
#: a call to one of these hands precision to an engine that keeps fp32 masters
_ENGINES = ("amp.initialize", "deepspeed.initialize", "accelerator.prepare", "Accelerator", "FSDP",
            "FullyShardedDataParallel", "MixedPrecision", "Fabric")
#: measured in bench/bf16_facts.py: 1.0 - 1e-3 stays 1.0 in bf16; smallest relative update kept
_LOST = {"bfloat16": ("bf16", "2^-9 (0.2%)"), "float16": ("fp16", "2^-12 (0.02%)")}


@dataclasses.dataclass
class _Cast:
    node: ast.Call
    model: str
    format: str


def _cast_format(ctx, call: ast.Call) -> Optional[str]:
    """``m.half()`` -> float16, ``m.bfloat16()`` / ``m.to(torch.bfloat16)`` -> bfloat16."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    if func.attr == "half" and not call.args:
        return "float16"
    if func.attr == "bfloat16" and not call.args:
        return "bfloat16"
    if func.attr == "to":
        for arg in list(call.args) + [k.value for k in call.keywords if k.arg == "dtype"]:
            name = dtype_literal(ctx, arg)
            if name in ("float16", "bfloat16"):
                return name
    return None


def _model_name(ctx, call: ast.Call) -> Optional[str]:
    """The variable the cast model lives in: ``model`` in ``model.half()`` or
    ``model = Net().to(torch.bfloat16)``."""
    receiver = call.func.value
    if isinstance(receiver, ast.Name):
        return receiver.id
    parent = ctx.parent(call)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        return parent.targets[0].id
    return None


def _optimizers_over(ctx, model: str) -> list[ast.Call]:
    """Optimizer constructions over ``model.parameters()`` (or ``named_parameters``)."""
    out = []
    for call in ctx.calls:
        if not call.args:
            continue
        first = call.args[0]
        while isinstance(first, ast.Call) and isinstance(first.func, ast.Name) and first.func.id == "list" and first.args:
            first = first.args[0]
        if not (isinstance(first, ast.Call) and isinstance(first.func, ast.Attribute)
                and first.func.attr in ("parameters", "named_parameters")
                and isinstance(first.func.value, ast.Name) and first.func.value.id == model):
            continue
        qn = ctx.qualname(call.func) or ""
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        if qn.startswith("torch.optim.") or name in ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adafactor",
                                                       "Lion", "LAMB", "Lamb") or name.endswith(_MASTER_OPTIMIZERS):
            out.append(call)
    return out


class HalfWeightsWithoutMaster(Rule):
    code = "AMP603"
    name = "half-weights-without-master"
    summary = "a training script casts the model to half and steps an optimizer with no fp32 master weights"
    severity = Severity.WARNING
    fix_applicability = "display"
    markers = (".half()", "bfloat16", "float16")
    docs = """
## What it does
Flags a training script that casts the model to half -- `model.half()`,
`model.bfloat16()`, `model.to(torch.bfloat16)` -- and then builds a torch optimizer over
`model.parameters()` and calls `.step()`, with nothing that keeps fp32 master weights:
no `amp.initialize` (apex / amplint O2), no DeepSpeed / Accelerate / FSDP mixed
precision, no optimizer known to keep fp32 state, Kahan sums or stochastic rounding
(`AnyPrecisionAdamW(use_kahan_summation=True)`, apex's `FP16_Optimizer`). Model code and
inference scripts (no optimizer over the cast model) are not reported.

## Why is this bad?
The optimizer adds its update to the half weight and rounds: in bf16, `1.0 - 1e-3` is
`1.0` -- the update is lost, and after 1000 such steps the weight is still exactly 1.0
(`bench/bf16_facts.py`). Any update smaller than about 2^-9 of the weight (bf16; fp16:
2^-12) disappears, which with learning rates of 1e-4..1e-5 is most of them: training
stalls or drifts while the loss looks plausible. Autocast with an fp32 model, or apex-style
O2 (half model, fp32 master copy), keeps the updates.

## Example
```python
import torch

model = torch.nn.Linear(512, 512).to(torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for x in range(10):
    loss = model(torch.randn(8, 512, dtype=torch.bfloat16)).sum()
    loss.backward()
    optimizer.step()
```

## Use instead
```python
import torch
from amplint import amp

model = torch.nn.Linear(512, 512)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer = amp.initialize(model, optimizer, opt_level="O2", cast_model_type=torch.bfloat16)
for x in range(10):
    loss = model(torch.randn(8, 512, dtype=torch.bfloat16)).sum()
    loss.backward()
    optimizer.step()
```
or keep the model in fp32 and run the forward pass under
`torch.autocast("cuda", dtype=torch.bfloat16)`.

## Fix safety
The fix is `display` only: which engine to use (autocast with an fp32 model, or the
engine's O2 with master weights) changes memory use and the training loop, so amplint
shows it and never applies it. The suggestion follows `engine`: `amp.initialize(...,
opt_level="O2")` for `amplint`, `torch.autocast` for `torch`.
"""

    VALID = [
        # inference: no optimizer over the cast model
        Valid("""
            import torch
            model = torch.nn.Linear(8, 8).half().eval()
            with torch.no_grad():
                y = model(torch.randn(2, 8).half())
            """),
        # the engine keeps fp32 master weights
        Valid("""
            import torch
            from amplint import amp
            model = torch.nn.Linear(8, 8).cuda().half()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model, opt = amp.initialize(model, opt, opt_level="O2")
            opt.step()
            """),
        # Kahan summation compensates the lost bits
        Valid("""
            import torch
            from torchdistx.optimizers import AnyPrecisionAdamW
            model = torch.nn.Linear(8, 8).to(torch.bfloat16)
            opt = AnyPrecisionAdamW(model.parameters(), use_kahan_summation=True)
            opt.step()
            """),
        # cast after training, for export
        Valid("""
            import torch
            model = torch.nn.Linear(8, 8)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            opt.step()
            model.half()
            torch.save(model.state_dict(), "m.pt")
            """),
    ]
    INVALID = [
        Invalid("""
            import torch
            model = torch.nn.Linear(8, 8)
            model.half()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            opt.step()
            """,
            line=3,
            message="fp16",
        ),
        Invalid("""
            import torch
            from torch import optim
            net = torch.nn.Linear(8, 8).to(device="cuda", dtype=torch.bfloat16)
            opt = optim.AdamW(net.parameters(), lr=1e-5)
            for batch in range(3):
                opt.step()
            """,
            message="amp.initialize",
        ),
        Invalid("""
            import torch
            model = torch.nn.Linear(8, 8).bfloat16()
            opt = torch.optim.Adam(model.parameters())
            opt.step()
            """,
            settings={"engine": "torch"},
            message="torch.autocast",
        ),
    ]

    def begin_file(self, ctx) -> list:
        return []

    def visit_Call(self, node: ast.Call, ctx) -> None:
        fmt = _cast_format(ctx, node)
        if fmt is None or ctx.in_model_code(node):
            return
        model = _model_name(ctx, node)
        if model is not None:
            ctx.state(self).append(_Cast(node, model, fmt))

    def end_file(self, ctx) -> None:
        casts = ctx.state(self)
        if not casts or self._has_master(ctx):
            return
        steps = [c.lineno for c in ctx.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "step" and not c.args]
        for cast in casts:
            optimizers = _optimizers_over(ctx, cast.model)
            if not optimizers or not any(s > cast.node.lineno for s in steps):
                continue
            if any(calls_keyword_true(o) for o in optimizers):
                continue
            short, lost = _LOST[cast.format]
            opt_text = ctx.segment(optimizers[0].func)
            message = (f"`{cast.model}` is cast to {short} and `{opt_text}` steps its weights with no fp32 master "
                       f"copy: updates below about {lost} of a weight round away (bf16: 1.0 - 1e-3 == 1.0)")
            ctx.report(self, cast.node, message + "; " + self._advice(ctx, cast), fix=Fix(
                [], "display", self._advice(ctx, cast)))

    @staticmethod
    def _advice(ctx, cast: _Cast) -> str:
        dtype = "torch.bfloat16" if cast.format == "bfloat16" else "torch.float16"
        if ctx.settings.engine == "torch":
            return (f"keep `{cast.model}` in fp32 and run the forward pass under "
                    f"`torch.autocast(\"cuda\", dtype={dtype})`")
        return (f"keep `{cast.model}` in fp32 and use `amp.initialize({cast.model}, optimizer, opt_level=\"O2\", "
                f"cast_model_type={dtype})` (half model, fp32 master weights)")

    @staticmethod
    def _has_master(ctx) -> bool:
        for call in ctx.calls:
            text = ctx.qualname(call.func) or ""
            func = call.func
            short = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            dotted = f"{func.value.id}.{func.attr}" if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else short
            if dotted in _ENGINES or short in _ENGINES or text.endswith(".initialize") and "amp" in text:
                return True
            if short.endswith(_MASTER_OPTIMIZERS):
                return True
        return False


def calls_keyword_true(call: ast.Call) -> bool:
    return any(k.arg in _MASTER_KEYWORDS and not (isinstance(k.value, ast.Constant) and k.value.value is False)
               for k in call.keywords)
