"""``amplint verify --target fp8``: train the model in bf16 and, converted by torchao with
the plan's ``module_filter_fn``, in fp8, for the same steps from the same weights and
inputs; report which layers were converted or kept and why, the loss difference, and per
converted layer the amax / scale statistics and the output error against bf16.

On a GPU with fp8 Tensor Cores (sm89+) the fp8 GEMMs are real and the step times of bf16,
fp8 with the plan and fp8 converting every layer are measured; elsewhere
``Float8LinearConfig(emulate=True)`` runs the same casts and scales with emulated GEMMs
(CPU: what CI runs), and no time is reported.

torchao is optional (``pip install "amplint[fp8]"``); :func:`missing_torchao` says how to
install it.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import statistics
import time
from typing import Any, Optional

from .plan import Fp8Plan, plan_model

#: e4m3's largest finite value and smallest normal (docs/fp16-facts.md's fp8 row)
E4M3_MAX = 448.0
E4M3_MIN_NORMAL = 2.0 ** -6
#: a layer's output error "stands out" above this many times the median of the converted layers
OUTLIER_FACTOR = 4.0
TORCHAO_PIN = "torchao==0.18.0"


def missing_torchao() -> str:
    return ("amplint verify --target fp8 needs torchao: pip install \"amplint[fp8]\" "
            f"(or pip install -c constraints.txt {TORCHAO_PIN})")


@dataclasses.dataclass
class LayerStats:
    fqn: str
    verdict: str
    reason: str
    code: str
    #: converted layers only (step 0, same weights as the bf16 reference)
    input_amax: Optional[float] = None
    input_rms: Optional[float] = None
    weight_amax: Optional[float] = None
    #: tensor-wise scale torchao applies to the input: 448 / amax
    input_scale: Optional[float] = None
    #: share of the input's non-zero elements that land below e4m3's smallest normal after
    #: scaling: what one outlier's scale costs the rest of the tensor
    input_below_normal: Optional[float] = None
    #: ||y_fp8 - y_bf16|| / ||y_bf16|| of the layer's output at step 0
    output_error: Optional[float] = None
    outlier: bool = False


@dataclasses.dataclass
class Fp8Report:
    target: str
    device: str
    emulated: bool
    recipe: str
    steps: int
    plan: Fp8Plan
    layers: list[LayerStats]
    bf16_losses: list[float]
    fp8_losses: list[float]
    #: ms per step on a GPU: bf16, fp8 with the plan, fp8 converting everything
    step_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    error: Optional[str] = None

    @property
    def loss_difference(self) -> Optional[float]:
        """max over steps of |loss_fp8 - loss_bf16| / |loss_bf16|."""
        pairs = [(a, b) for a, b in zip(self.bf16_losses, self.fp8_losses)]
        if not pairs:
            return None
        return max(abs(b - a) / max(abs(a), 1e-12) for a, b in pairs)

    @property
    def outliers(self) -> list[LayerStats]:
        return [s for s in self.layers if s.outlier]

    def to_dict(self) -> dict:
        return {"target": self.target, "device": self.device, "emulated": self.emulated, "recipe": self.recipe,
                "steps": self.steps, "plan": self.plan.to_dict(), "layers": [dataclasses.asdict(s) for s in self.layers],
                "bf16_losses": self.bf16_losses, "fp8_losses": self.fp8_losses,
                "loss_difference": self.loss_difference, "outliers": [s.fqn for s in self.outliers],
                "step_ms": self.step_ms, "error": self.error}


def _cast_inputs(obj, device, torch):
    if isinstance(obj, torch.Tensor):
        obj = obj.to(device)
        return obj.to(torch.bfloat16) if obj.is_floating_point() else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cast_inputs(o, device, torch) for o in obj)
    if isinstance(obj, dict):
        return {k: _cast_inputs(v, device, torch) for k, v in obj.items()}
    return obj


def _fp8_capable(torch) -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


def _record_outputs(model, names, store: dict, torch):
    """Forward hooks storing each named Linear's input and output of the first call."""
    hooks = []
    for fqn, module in model.named_modules():
        if fqn in names:
            def hook(mod, args, out, fqn=fqn):
                if fqn not in store and args and isinstance(args[0], torch.Tensor):
                    store[fqn] = (args[0].detach(), out.detach())
            hooks.append(module.register_forward_hook(hook))
    return hooks


def _train(model, args, kwargs, loss_fn, steps, torch, lr):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        out = model(*args, **kwargs)
        loss = loss_fn(out, (args, kwargs)).float()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return losses


def _time_steps(model, args, kwargs, loss_fn, torch, lr, steps=10) -> float:
    """Median ms of a compiled training step on the GPU (after 3 warm-ups)."""
    compiled = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)

    def step():
        loss = loss_fn(compiled(*args, **kwargs), (args, kwargs)).float()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def run(make, name: str, *, recipe: str = "tensorwise", tokens: Optional[int] = None, steps: int = 3,
        device: Optional[str] = None, loss: str = "auto", seed: int = 0, lr: float = 1e-4,
        convert_head: bool = False, timing: bool = True) -> Fp8Report:
    """Verify one model factory (``make() -> (model, inputs)``) in bf16 against fp8."""
    import torch
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from torchao.float8.float8_linear import Float8Linear

    from ..verify.runner import make_loss
    from ..verify.target import normalize_example

    real = _fp8_capable(torch) and device in (None, "auto", "cuda")
    dev = "cuda" if real or (device == "cuda") else "cpu"
    loss_fn = make_loss(loss)

    def build():
        torch.manual_seed(seed)
        model, args, kwargs = normalize_example(make(), name)
        model = model.to(device=dev, dtype=torch.bfloat16)
        return model, _cast_inputs(args, dev, torch), _cast_inputs(kwargs, dev, torch)

    ref, args, kwargs = build()
    plan = plan_model(ref, args, kwargs, recipe=recipe, tokens=tokens, convert_head=convert_head, target=name)
    fp8_model = copy.deepcopy(ref)
    config = Float8LinearConfig.from_recipe_name(recipe)
    if not real:
        config = dataclasses.replace(config, emulate=True)
    convert_to_float8_training(fp8_model, config=config, module_filter_fn=plan.module_filter_fn())
    converted = {fqn for fqn, m in fp8_model.named_modules() if isinstance(m, Float8Linear)}

    # each converted layer on the reference's own input at step 0: its error alone, not
    # what the layers before it added
    ref_out: dict = {}
    hooks = _record_outputs(ref, converted, ref_out, torch)
    ref.eval()
    try:
        with torch.no_grad():
            ref(*args, **kwargs)
    finally:
        for h in hooks:
            h.remove()
        ref.train()
    layers = []
    for layer in plan.layers:
        stats = LayerStats(layer.fqn, "convert" if layer.fqn in converted else "keep", layer.reason, layer.code)
        if layer.fqn in ref_out:
            x, y_ref = ref_out[layer.fqn]
            with torch.no_grad():
                y_fp8 = fp8_model.get_submodule(layer.fqn)(x)
            xf = x.float()
            amax = float(xf.abs().max())
            stats.input_amax = amax
            stats.input_rms = float(xf.pow(2).mean().sqrt())
            stats.weight_amax = float(ref.get_submodule(layer.fqn).weight.detach().float().abs().max())
            if amax > 0:
                scale = E4M3_MAX / amax
                stats.input_scale = scale
                nonzero = xf[xf != 0]
                stats.input_below_normal = float((nonzero.abs() * scale < E4M3_MIN_NORMAL).float().mean()) if nonzero.numel() else 0.0
            denom = float(y_ref.float().norm())
            stats.output_error = float((y_fp8.float() - y_ref.float()).norm()) / denom if denom > 0 else None
        layers.append(stats)
    torch.manual_seed(seed)
    bf16_losses = _train(ref, args, kwargs, loss_fn, steps, torch, lr)
    torch.manual_seed(seed)
    fp8_losses = _train(fp8_model, args, kwargs, loss_fn, steps, torch, lr)
    errors = [s.output_error for s in layers if s.output_error is not None and math.isfinite(s.output_error)]
    if len(errors) >= 2:
        median = statistics.median(errors)
        for s in layers:
            if s.output_error is not None and median > 0 and s.output_error > OUTLIER_FACTOR * median:
                s.outlier = True
    report = Fp8Report(name, dev + ("" if real else " (fp8 emulated)"), not real, recipe, steps, plan, layers,
                       bf16_losses, fp8_losses)
    if real and timing:
        base, _, _ = build()
        report.step_ms["bf16"] = _time_steps(base, args, kwargs, loss_fn, torch, lr)
        for label, fn in (("fp8 plan", plan.module_filter_fn()), ("fp8 all", None)):
            model, _, _ = build()
            convert_to_float8_training(model, config=config, module_filter_fn=fn)
            try:
                report.step_ms[label] = _time_steps(model, args, kwargs, loss_fn, torch, lr)
            except Exception as exc:  # converting an unaligned layer fails here: that is the finding
                report.step_ms[label] = float("nan")
                report.error = f"{label}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return report


def verify_target(spec: str, **options: Any) -> Fp8Report:
    from ..verify.target import Target, factory_from_module, import_file, isolated_import

    target = Target.parse(spec)
    with isolated_import():
        module = import_file(target.path)
        make = factory_from_module(module, target.factory, str(target))
        return run(make, str(target), **options)
