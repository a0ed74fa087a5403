"""Re-measure the fp16 / bf16 / fp8 facts that amplint's rules, messages and `explain` cite.

Each fact in docs/fp16-facts.md marked "CPU" is one entry below: an expression, what
the doc says it gives, and what it gives here. Exit status 1 when any differs.

    python bench/fp16_facts.py            # CPU facts (any machine with torch)
    python bench/fp16_facts.py --device cuda   # also the CUDA autocast facts (a GPU)

Needs torch (`pip install "amplint[verify]"`).
"""
from __future__ import annotations

import argparse
import math
import platform
import sys

import torch
import torch.nn.functional as F

H, B = torch.float16, torch.bfloat16


def err(fn) -> str:
    """What ``fn()`` raises (the first line of the message), or what it returns."""
    try:
        value = fn()
    except Exception as exc:  # the facts are about which error, so every error is data here
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return show(value)


def show(value) -> str:
    if isinstance(value, torch.Tensor):
        if value.numel() == 1:
            value = value.item()
        else:
            return "[" + ", ".join(show(v) for v in value.float().flatten().tolist()) + "]"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.6g}"
    return str(value)


def fp16(v):
    return torch.tensor(v, dtype=torch.float32).to(H)


def masked_row(fill, dtype=H):
    scores = torch.zeros(1, 4, dtype=dtype)
    return scores.masked_fill(torch.ones(1, 4, dtype=torch.bool), fill).softmax(-1)


def autocast_dtype(fn, device="cpu"):
    a = torch.randn(8, 8, device=device)
    with torch.autocast(device, dtype=H):
        return str(fn(a).dtype).replace("torch.", "")


def handwritten_softmax(x):
    return torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)


def cpu_facts():
    m = torch.tensor([True, False])
    x = torch.zeros(2, dtype=H)
    ones = torch.ones(100_000, dtype=H)
    spread = torch.tensor([300.0, -300.0] * 50_000, dtype=H)
    yield "formats", "fp16 max / smallest normal / eps", f"{torch.finfo(H).max:g} / {torch.finfo(H).tiny:.3g} / {torch.finfo(H).eps:.3g}", "65504 / 6.1e-05 / 0.000977"
    yield "formats", "fp16 smallest subnormal (survives the cast; half of it does not)", show(fp16(2.0**-24)) + " / " + show(fp16(2.0**-26)), "5.96046e-08 / 0"
    yield "formats", "bf16 max / smallest normal / eps", f"{torch.finfo(B).max:.3g} / {torch.finfo(B).tiny:.3g} / {torch.finfo(B).eps:.3g}", "3.39e+38 / 1.18e-38 / 0.00781"
    e4 = torch.float8_e4m3fn
    e5 = torch.float8_e5m2
    yield "formats", "fp8 e4m3fn max / smallest normal / eps", f"{torch.finfo(e4).max:g} / {torch.finfo(e4).tiny:g} / {torch.finfo(e4).eps:g}", "448 / 0.015625 / 0.125"
    yield "formats", "fp8 e5m2 max / smallest normal / eps", f"{torch.finfo(e5).max:g} / {torch.finfo(e5).tiny:.3g} / {torch.finfo(e5).eps:g}", "57344 / 6.1e-05 / 0.25"
    yield "rounding", "fp16 of 1e-8, 1e-12, 1e-6", ", ".join(show(fp16(v)) for v in (1e-8, 1e-12, 1e-6)), "0, 0, 1.01328e-06"
    yield "rounding", "fp16 of 65519, 65520", ", ".join(show(fp16(v)) for v in (65519.0, 65520.0)), "65504, inf"
    yield "rounding", "bf16 of -1e9; bf16 1 + 1e-3 == 1", show(torch.tensor(-1e9).to(B)) + "; " + str(bool(torch.tensor(1 + 1e-3).to(B) == 1)), "-9.98244e+08; True"
    yield "rounding", "fp8 e4m3fn of -1e9 and of 500 (no inf in e4m3fn: the cast saturates)", show(torch.tensor(-1e9).to(e4).float()) + ", " + show(torch.tensor(500.0).to(e4).float()), "-448, 448"
    overflow = "RuntimeError: value cannot be converted to type c10::Half without overflow"
    yield "constants", "fp16 `x.masked_fill(m, -1e9)`", err(lambda: x.masked_fill(m, -1e9)), overflow
    yield "constants", "fp16 `x.masked_fill(m, -65519)`", err(lambda: x.masked_fill(m, -65519.0)), overflow
    yield "constants", "`torch.full((2,), -1e9, dtype=torch.half)`", err(lambda: torch.full((2,), -1e9, dtype=H)), overflow
    yield "constants", "fp16 `x.fill_(-1e9)`", err(lambda: x.clone().fill_(-1e9)), overflow
    yield "constants", "fp16 `x.clamp(max=1e10)`", err(lambda: x.clamp(max=1e10)), overflow

    def setitem():
        y = x.clone()
        y[m] = -1e9
        return y
    yield "constants", "fp16 `x[m] = -1e9`", err(setitem), "[-inf, 0]"
    yield "constants", "fp16 `x + (-1e9)`", err(lambda: x + (-1e9)), "[-inf, -inf]"
    yield "constants", "fp16 `(1.0 - mask) * -1e9`", err(lambda: (1.0 - m.to(H)) * -1e9), "[-0, -inf]"
    yield "constants", "fp16 `torch.where(m, -1e9, x)` (CPU)", err(lambda: torch.where(m, -1e9, x)), "[-inf, 0]"
    yield "constants", "fp16 `masked_fill` with -1e4 / -65504 / finfo.min", ", ".join(
        err(lambda v=v: x.masked_fill(m, v)) for v in (-1e4, -65504.0, torch.finfo(H).min)), "[-10000, 0], [-65504, 0], [-65504, 0]"
    yield "constants", "bf16 `x.masked_fill(m, -1e9)`", err(lambda: x.to(B).masked_fill(m, -1e9)), "[-9.98244e+08, 0]"

    def autocast_fill():
        a = torch.randn(4, 4)
        with torch.autocast("cpu", dtype=H):
            return (a @ a).masked_fill(torch.ones(4, 4, dtype=torch.bool), -1e9)
    yield "constants", "CPU autocast fp16: `(a @ a).masked_fill(m, -1e9)`", err(autocast_fill), overflow
    yield "masked rows", "softmax of an all-masked fp16 row: -inf fill", err(lambda: masked_row(float("-inf"))), "[nan, nan, nan, nan]"
    yield "masked rows", "same with -inf in fp32", err(lambda: masked_row(float("-inf"), torch.float32)), "[nan, nan, nan, nan]"
    yield "masked rows", "same with -1e4 / -65504 / finfo.min fill", ", ".join(
        err(lambda v=v: masked_row(v)) for v in (-1e4, -65504.0, torch.finfo(H).min)), "[0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25]"
    yield "masked rows", "fp16 finfo.min + (-15) / + (-16)", show(fp16(-65504.0) + fp16(-15.0)) + " / " + show(fp16(-65504.0) + fp16(-16.0)), "-65504 / -inf"
    yield "epsilons", "fp16 `0 + 1e-8`, then `1 / that`", show(torch.zeros(1, dtype=H) + 1e-8) + ", " + show(1 / (torch.zeros(1, dtype=H) + 1e-8)), "0, inf"
    yield "epsilons", "fp16 `x.clamp(min=1e-8)` of 0", show(torch.zeros(1, dtype=H).clamp(min=1e-8)), "0"
    yield "epsilons", "`nn.LayerNorm(4, eps=1e-12).half()` on a constant row", err(
        lambda: torch.nn.LayerNorm(4, eps=1e-12).half()(torch.ones(1, 4, dtype=H))), "[0, 0, 0, 0]"
    yield "reductions", "`torch.full((100000,), 1.0, dtype=torch.half).sum()`; with dtype=torch.float32", show(ones.sum()) + "; " + show(ones.sum(dtype=torch.float32)), "inf; 100000"
    yield "reductions", "fp16 cumsum of 100,000 ones (last value)", show(ones.cumsum(0)[-1]), "inf"
    yield "reductions", "fp16 mean / sum of 100,000 values of 300", show(torch.full((100_000,), 300.0, dtype=H).mean()) + " / " + show(torch.full((100_000,), 300.0, dtype=H).sum()), "300 / inf"
    yield "reductions", "fp16 var / std of values +-300", show(spread.var()) + " / " + show(spread.std()), "inf / 300"
    yield "reductions", "fp16 norm of 100,000 values of 300", show(torch.full((100_000,), 300.0, dtype=H).norm()), "inf"
    yield "reductions", "fp16 exp(11), exp(11.1), 257 ** 2", ", ".join(show(v) for v in (fp16(11.0).exp(), fp16(11.1).exp(), fp16(257.0) ** 2)), "59872, inf, inf"
    yield "softmax", "fp16 `torch.softmax([0, -18])`; fp32", show(torch.softmax(torch.tensor([0.0, -18.0]).to(H), -1)) + "; " + show(torch.softmax(torch.tensor([0.0, -18.0]), -1)), "[1, 0]; [1, 1.523e-08]"
    yield "softmax", "fp16 and bf16 of -30.123456 (a log-probability)", show(fp16(-30.123456)) + ", " + show(torch.tensor(-30.123456).to(B)), "-30.125, -30.125"
    yield "softmax", "hand-written fp16 softmax of a row of 12s", show(handwritten_softmax(torch.full((4,), 12.0, dtype=H))), "[nan, nan, nan, nan]"
    yield "bf16", "bf16 `torch.softmax([0, -7])`; fp32", show(torch.softmax(torch.tensor([0.0, -7.0]).to(B), -1)) + "; " + show(torch.softmax(torch.tensor([0.0, -7.0]), -1)), "[1, 0.000911713]; [0.999089, 0.000911051]"
    yield "bf16", "bf16 of -3.3 (log-probabilities keep 8 significant bits); fp16", show(torch.tensor(-3.3).to(B)) + "; " + show(fp16(-3.3)), "-3.29688; -3.30078"
    yield "bf16", "bf16 sum of 100,000 ones; 256 + 1 in bf16", show(torch.ones(100_000, dtype=B).sum()) + "; " + show(torch.tensor(256.0).to(B) + 1), "99840; 256"
    yield "bf16", "bf16 exp(88), exp(89); hand-written softmax of a row of 89s", show(torch.tensor(88.0).to(B).exp()) + ", " + show(torch.tensor(89.0).to(B).exp()) + "; " + show(handwritten_softmax(torch.full((4,), 89.0, dtype=B))), "1.65489e+38, inf; [nan, nan, nan, nan]"
    yield "autocast", "CPU autocast fp16: matmul, linear, einsum", ", ".join(autocast_dtype(f) for f in (lambda a: a @ a, lambda a: F.linear(a, a), lambda a: torch.einsum("ij,jk->ik", a, a))), "float16, float16, float16"
    yield "autocast", "CPU autocast fp16: F.softmax(a @ a), (a @ a).sum()", ", ".join(autocast_dtype(f) for f in (lambda a: F.softmax(a @ a, -1), lambda a: (a @ a).sum())), "float16, float16"
    yield "autocast", "CPU autocast fp16: hand-written exp/sum softmax of a @ a", autocast_dtype(lambda a: handwritten_softmax(a @ a)), "float16"
    yield "autocast", "CPU autocast fp16: torch.linalg.inv(a @ a)", autocast_dtype(lambda a: torch.linalg.inv(a @ a + 8 * torch.eye(8))), "float32"
    yield "no half kernel", "fp16 `torch.det` (CPU)", err(lambda: torch.det(torch.eye(3, dtype=H))), "NotImplementedError: \"lu_cpu\" not implemented for 'Half'"
    yield "no half kernel", "fp16 `torch.fft.rfft` of length 100 (CPU)", err(lambda: torch.fft.rfft(torch.randn(100).to(H))), "RuntimeError: Unsupported dtype Half"


def cuda_facts():
    a = torch.zeros(2, dtype=H, device="cuda")
    m = torch.tensor([True, False], device="cuda")
    overflow = "RuntimeError: value cannot be converted to type c10::Half without overflow"
    yield "constants", "CUDA fp16 `torch.where(m, -1e9, x)`", err(lambda: torch.where(m, -1e9, a)), overflow
    yield "constants", "CUDA fp16 `x.masked_fill(m, -1e9)`", err(lambda: a.masked_fill(m, -1e9)), overflow
    yield "autocast", "CUDA autocast fp16: matmul, einsum", ", ".join(autocast_dtype(f, "cuda") for f in (lambda a: a @ a, lambda a: torch.einsum("ij,jk->ik", a, a))), "float16, float16"
    yield "autocast", "CUDA autocast fp16: F.softmax, sum, hand-written softmax, cdist", ", ".join(autocast_dtype(f, "cuda") for f in (
        lambda a: F.softmax(a @ a, -1), lambda a: (a @ a).sum(), lambda a: handwritten_softmax(a @ a), lambda a: torch.cdist(a @ a, a @ a))), "float32, float32, float32, float32"
    yield "autocast", "CUDA autocast fp16: torch.linalg.inv(a @ a)", err(lambda: autocast_dtype(lambda a: torch.linalg.inv(a @ a), "cuda")), "RuntimeError: linalg.inv: Low precision dtypes not supported. Got Half"
    yield "no half kernel", "CUDA fp16 `torch.fft.rfft` of length 100", err(lambda: torch.fft.rfft(torch.randn(100, device="cuda").to(H))), "RuntimeError: cuFFT only supports dimensions whose sizes are powers of two when computing in half precision, but got a signal size of[100]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: also the CUDA facts")
    args = ap.parse_args()
    facts = list(cpu_facts())
    if args.device == "cuda":
        facts += list(cuda_facts())
    print(f"torch {torch.__version__}, Python {platform.python_version()}, {platform.machine()}"
          + (f", {torch.cuda.get_device_name()}" if args.device == "cuda" else ""))
    print("| group | expression | measured | docs say | |\n|---|---|---|---|---|")
    wrong = 0
    for group, what, got, expected in facts:
        ok = got == expected
        wrong += not ok
        print(f"| {group} | {what} | `{got}` | `{expected}` | {'ok' if ok else 'DIFFERS'} |")
    print(f"\n{len(facts) - wrong} of {len(facts)} facts as documented")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
