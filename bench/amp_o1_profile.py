"""Where amplint O1's extra time goes, against native autocast of the same dtype.

    python bench/amp_o1_profile.py                 # GPT-2 small on CUDA, fp16 and bf16
    python bench/amp_o1_profile.py --tiny --device cpu

For each dtype, the same GPT-2-small step (bench/amp_gpt2.py's model and step functions) is
profiled with ``torch.profiler`` over ``--steps`` steps after a warm-up, natively and under
amplint O1. Device time is summed per kernel-launching op (``aten::*``) and the ops whose
total differs most are listed, with the wall time per step; the difference in the number of
``aten::to``/``aten::_to_copy`` calls shows the casts O1 adds.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import amp_gpt2  # noqa: E402
from amplint import amp  # noqa: E402


def gpt_loss(logits, targets):  # bench/amp_gpt2.py's loss (F looked up per call: O1 patches it)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1))


def profile_mode(mode, cfg, dev, steps, warmup):
    amp.reset()
    torch.manual_seed(0)
    model = amp_gpt2.GPT(**cfg).to(dev)
    step = amp_gpt2.MODES[mode](model, dev)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, cfg["vocab"], (8, cfg["seq"] + 1), generator=g).to(dev)
    x, y = idx[:, :-1], idx[:, 1:]
    for _ in range(warmup):
        step(x, y, gpt_loss)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    if dev == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step(x, y, gpt_loss)
        if dev == "cuda":
            torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) * 1e3 / steps
    per_op = defaultdict(lambda: [0.0, 0])
    for e in prof.key_averages():
        device_us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        per_op[e.key][0] += (device_us if dev == "cuda" else e.self_cpu_time_total) / steps
        per_op[e.key][1] += e.count // steps
    amp.reset()
    return wall, per_op


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    cfg = dict(vocab=50304, seq=1024, d=768, layers=12, heads=12)
    if args.tiny:
        cfg = dict(vocab=512, seq=64, d=64, layers=2, heads=4)
    pairs = [("native autocast fp16 + GradScaler", "amplint O1 fp16"),
             ("native autocast bf16", "amplint O1 bf16")]
    for native, ours in pairs:
        wn, ops_n = profile_mode(native, cfg, args.device, args.steps, args.warmup)
        wo, ops_o = profile_mode(ours, cfg, args.device, args.steps, args.warmup)
        unit = "device us" if args.device == "cuda" else "self CPU us"
        print(f"\n### {ours} vs {native}: {wo:.2f} vs {wn:.2f} ms/step (profiled, "
              f"{args.steps} steps)\n")
        print(f"| op | {unit}/step native | amplint | delta | calls/step native | amplint |")
        print("|---|---|---|---|---|---|")
        keys = set(ops_n) | set(ops_o)
        rows = sorted(keys, key=lambda k: -abs(ops_o.get(k, [0, 0])[0] - ops_n.get(k, [0, 0])[0]))
        for k in [k for k in rows if k.startswith("aten::") or "kernel" in k.lower()][:args.top]:
            a, b = ops_n.get(k, [0.0, 0]), ops_o.get(k, [0.0, 0])
            print(f"| {k[:60]} | {a[0]:.0f} | {b[0]:.0f} | {b[0] - a[0]:+.0f} | {a[1]} | {b[1]} |")


if __name__ == "__main__":
    main()
