"""The numbers behind AMP601-AMP604 (issue 19), measured with torch on CPU.

    python bench/bf16_facts.py [--json OUT]

Prints one table row per fact, for bf16 and fp16.  The rules' docs quote these numbers;
record a run in bench/RESULTS.md (command, machine, date).
"""
from __future__ import annotations

import argparse
import json
import platform

import torch

HALVES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def first_inexact_integer(dtype) -> int:
    n = torch.arange(0, 1 << 16, dtype=torch.float64)
    back = n.to(dtype).to(torch.float64)
    return int(n[(back != n).nonzero()[0, 0]].item())


def distinct_positions(dtype, count: int = 8192) -> int:
    return torch.arange(count).to(dtype).unique().numel()


def rope_tables(seq_len: int, dim: int, base: float, dtype):
    """Angles and cos/sin as a model computing them entirely in ``dtype`` would."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    t = torch.arange(seq_len, dtype=torch.float32).to(dtype)
    angle = torch.outer(t, inv_freq.to(dtype))
    return angle, angle.cos(), angle.sin()


def rope_errors(seq_len=4096, dim=128, base=10000.0) -> dict:
    ref_angle, ref_cos, ref_sin = rope_tables(seq_len, dim, base, torch.float64)
    out = {}
    for name, dtype in HALVES.items():
        angle, cos, sin = rope_tables(seq_len, dim, base, dtype)
        out[name] = {
            "phase": (angle.double() - ref_angle).abs().max().item(),
            "cos": (cos.double() - ref_cos).abs().max().item(),
            "sin": (sin.double() - ref_sin).abs().max().item(),
        }
        _, cos32, sin32 = rope_tables(seq_len, dim, base, torch.float32)
        out[name]["cos_fp32_then_cast"] = (cos32.to(dtype).double() - ref_cos).abs().max().item()
        out[name]["sin_fp32_then_cast"] = (sin32.to(dtype).double() - ref_sin).abs().max().item()
    return out


def lost_update(dtype, update=1e-3, steps=1000) -> dict:
    w = torch.tensor(1.0, dtype=dtype)
    once = (w - update).item()
    for _ in range(steps):
        w = w - update
    # the smallest relative update that changes a weight of 1.0 (downwards), a power of two
    k = 1
    while (torch.tensor(1.0, dtype=dtype) - 2.0 ** -k).item() != 1.0:
        k += 1
    return {"once": once, "after_steps": w.item(), "steps": steps, "largest_lost_power": k}


def attention_logit(head_dim=128, magnitude=23.0) -> dict:
    """``q @ k^T`` of fp16 rows scaled by ``1/sqrt(d)`` after the product, and before."""
    q = torch.full((1, head_dim), magnitude, dtype=torch.float16)
    k = torch.full((1, head_dim), magnitude, dtype=torch.float16)
    return {"unscaled_product": (q.double() @ k.double().T).item(),
            "fp16_unscaled_then_scaled": ((q @ k.T) / head_dim ** 0.5).item(),
            "fp16_scaled_first": ((q / head_dim ** 0.5) @ k.T).item()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the numbers here")
    args = ap.parse_args()
    facts = {
        "torch": torch.__version__, "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "first_inexact_integer": {n: first_inexact_integer(d) for n, d in HALVES.items()},
        "distinct_of_0_8191": {n: distinct_positions(d) for n, d in HALVES.items()},
        "rope_T4096_d128_base1e4": rope_errors(),
        "lost_update": {n: lost_update(d) for n, d in HALVES.items()},
        "attention_logit": attention_logit(),
    }
    r = facts["rope_T4096_d128_base1e4"]
    u = facts["lost_update"]
    a = facts["attention_logit"]
    rows = [
        ("first integer position that is not exact", *(facts["first_inexact_integer"][n] for n in HALVES)),
        ("distinct values among positions 0..8191", *(facts["distinct_of_0_8191"][n] for n in HALVES)),
        ("RoPE angles in half, T=4096, dim 128: max phase error (rad)", *(f"{r[n]['phase']:.3g}" for n in HALVES)),
        ("... max error of cos", *(f"{r[n]['cos']:.3g}" for n in HALVES)),
        ("... max error of sin", *(f"{r[n]['sin']:.3g}" for n in HALVES)),
        ("tables in fp32, cast at the end: max error of cos", *(f"{r[n]['cos_fp32_then_cast']:.3g}" for n in HALVES)),
        ("tables in fp32, cast at the end: max error of sin", *(f"{r[n]['sin_fp32_then_cast']:.3g}" for n in HALVES)),
        ("weight 1.0 minus an update of 1e-3", *(u[n]["once"] for n in HALVES)),
        ("... after 1000 such steps", *(f"{u[n]['after_steps']:.4g}" for n in HALVES)),
        ("1.0 - 2^-k == 1.0 from k =", *(u[n]["largest_lost_power"] for n in HALVES)),
        ("q.k, head dim 128, elements 23: unscaled product", "", a["unscaled_product"]),
        ("... in fp16, scaled after the product / before", "", f"{a['fp16_unscaled_then_scaled']} / {a['fp16_scaled_first']:.5g}"),
    ]
    print(f"torch {facts['torch']} on {facts['machine']} (CPU)\n")
    print("| what | bf16 | fp16 |\n|---|---|---|")
    for what, bf, fp in rows:
        print(f"| {what} | {bf} | {fp} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(facts, f, indent=2)


if __name__ == "__main__":
    main()
