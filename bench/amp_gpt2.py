"""Side-by-side AMP benchmark: native torch.amp vs amplint.amp O1/O2/O3 on a GPT-2-small-like model.

    python bench/amp_gpt2.py                    # GPU: GPT-2 small (12 layers, d=768, vocab 50304,
                                                #      batch 8x1024, AdamW), then the overhead probe
    python bench/amp_gpt2.py --tiny --device cpu  # quick correctness run of the same code
    python bench/amp_gpt2.py --compile --skip-probe  # torch.compile(model) for every mode
    python bench/amp_gpt2.py --explain              # graph breaks / graphs / ops per mode

Every mode builds the same model from the same seed in this one process, warms up, then times
``--steps`` optimizer steps (CUDA-synchronised wall time) and reads the peak allocated memory.
Modes are measured in ``--rounds`` interleaved rounds; the median is reported.
The overhead probe runs a tiny MLP (where Python overhead dominates) and reports the time per
step of each mode, and amplint's extra time per step over the native equivalent.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from amplint import amp  # noqa: E402


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, seq, d, layers, heads):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied, as in GPT-2
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


class MLP(nn.Module):
    def __init__(self, d=64, n=4):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(n))
        self.ln = nn.LayerNorm(d)
        self.out = nn.Linear(d, 10)

    def forward(self, x):
        for lin in self.layers:
            x = F.gelu(lin(x))
        return self.out(self.ln(x))


# ---------------------------------------------------------------------------------------------
# one training step per mode
# ---------------------------------------------------------------------------------------------

COMPILE = False  # --compile: every mode runs torch.compile(model) (after amp.initialize)


def _compiled(model):
    return torch.compile(model) if COMPILE else model


def make_native(model, dev, dtype, scaler_on, tf32=False):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler(dev) if scaler_on else None
    run = _compiled(model)

    def step(x, y, loss_fn):
        with torch.autocast(dev, dtype=dtype):
            loss = loss_fn(run(x), y)
        opt.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss
    return step


def make_fp32(model, dev):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    run = _compiled(model)

    def step(x, y, loss_fn):
        loss = loss_fn(run(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return step


def make_amplint(model, dev, level, half_dtype=torch.float16, **extra):
    eps = 1e-4 if level == "O3" else 1e-8  # pure half: 1e-8 underflows in fp16 state
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=eps)
    kw = {"half_dtype": half_dtype} if half_dtype is not torch.float16 else {}
    model, opt = amp.initialize(model, opt, opt_level=level, verbosity=0, **kw, **extra)
    run = _compiled(model)

    def step(x, y, loss_fn):
        loss = loss_fn(run(x), y)
        opt.zero_grad(set_to_none=True)
        with amp.scale_loss(loss, opt) as scaled:
            scaled.backward()
        opt.step()
        return loss
    return step


MODES = {
    "fp32": lambda m, dev: make_fp32(m, dev),
    "tf32": lambda m, dev: make_fp32(m, dev),
    "native autocast fp16 + GradScaler": lambda m, dev: make_native(m, dev, torch.float16, True),
    "native autocast bf16": lambda m, dev: make_native(m, dev, torch.bfloat16, False),
    "amplint O1 fp16": lambda m, dev: make_amplint(m, dev, "O1"),
    "amplint O1 bf16": lambda m, dev: make_amplint(m, dev, "O1", torch.bfloat16),
    "amplint O1 bf16 fp32_log_probs=False": lambda m, dev: make_amplint(
        m, dev, "O1", torch.bfloat16, fp32_log_probs=False),
    "amplint O1 bf16 fp32_log_probs=lse": lambda m, dev: make_amplint(
        m, dev, "O1", torch.bfloat16, fp32_log_probs="lse"),
    "amplint O2 fp16": lambda m, dev: make_amplint(m, dev, "O2"),
    "amplint O2 bf16": lambda m, dev: make_amplint(m, dev, "O2", torch.bfloat16),
    "amplint O3 fp16": lambda m, dev: make_amplint(m, dev, "O3"),
}


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def measure(mode, build, data, dev, warmup, steps):
    gc.collect()
    torch._dynamo.reset()  # a fresh compile per mode (the recompile limit must never be hit)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    model = build().to(dev)
    step = MODES[mode](model, dev)
    x, y, loss_fn = data
    if dev == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    for _ in range(warmup):
        loss = step(x, y, loss_fn)
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step(x, y, loss_fn)
    sync(dev)
    ms = (time.perf_counter() - t0) * 1e3 / steps
    peak = torch.cuda.max_memory_allocated() / 2 ** 30 if dev == "cuda" else float("nan")
    final = float(loss.detach())
    amp.reset()
    del model, step, loss
    gc.collect()
    return ms, peak, final


def run_suite(title, modes, build, data, dev, warmup, steps, rounds, baseline):
    results = {m: [] for m in modes}
    peaks, losses = {}, {}
    for r in range(rounds):
        for m in modes:
            ms, peak, final = measure(m, build, data, dev, warmup, steps)
            results[m].append(ms)
            peaks[m] = peak
            losses[m] = final
            print(f"  round {r} {m:36s} {ms:8.3f} ms", flush=True)
    print(f"\n### {title}\n")
    print("| mode | ms/step (median) | all rounds | vs baseline | peak GiB | final loss |")
    print("|---|---|---|---|---|---|")
    med = _Medians({m: statistics.median(v) for m, v in results.items()})
    med.rounds = results
    for m in modes:
        ratio = med[m] / med[baseline] if baseline in med else float("nan")
        rounds_s = ", ".join(f"{v:.2f}" for v in results[m])
        print(f"| {m} | {med[m]:.3f} | {rounds_s} | {ratio:.3f}x | {peaks[m]:.2f} | {losses[m]:.4f} |")
    return med


class _Medians(dict):
    rounds: dict


def explain(modes, build, x, y, loss_fn, dev):
    """Graph breaks of forward + loss (what torch.compile(model) traces) per mode."""
    print("| mode | graphs | graph breaks | ops | graph outputs |\n|---|---|---|---|---|")
    for mode in modes:
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = build().to(dev)
        ctx = None
        if mode.startswith("native"):
            ctx = lambda: torch.autocast(dev, dtype=torch.bfloat16 if "bf16" in mode else torch.float16)  # noqa: E731
        elif mode.startswith("amplint"):
            level, dtype = mode.split()[1], torch.bfloat16 if "bf16" in mode else torch.float16
            kw = {"half_dtype": dtype} if level == "O1" else {"cast_model_type": dtype}
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-4)
            model, _ = amp.initialize(model, opt, opt_level=level, verbosity=0, **kw)

        def fwd(a, b):
            if ctx is None:
                return loss_fn(model(a), b)
            with ctx():
                return loss_fn(model(a), b)
        e = torch._dynamo.explain(fwd)(x, y)
        outs = next(n for n in e.graphs[0].graph.nodes if n.op == "output").args[0] if e.graphs else ()
        print(f"| {mode} | {e.graph_count} | {e.graph_break_count} | {e.op_count} | {len(outs)} |")
        for b in e.break_reasons:
            print(f"|   break: {str(b.reason)[:200]} |")
        amp.reset()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="small GPT for a quick correctness run")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-fp32", action="store_true")
    ap.add_argument("--skip-gpt", action="store_true")
    ap.add_argument("--skip-probe", action="store_true", help="no tiny-MLP overhead probe")
    ap.add_argument("--compile", action="store_true", help="torch.compile(model) in every mode")
    ap.add_argument("--modes", default="", help="comma-separated mode names (default: all)")
    ap.add_argument("--explain", action="store_true",
                    help="only print torch._dynamo.explain of forward+loss per mode")
    args = ap.parse_args()
    global COMPILE
    COMPILE = args.compile
    dev = args.device
    print(f"torch {torch.__version__}, device {dev}"
          + (f" ({torch.cuda.get_device_name()})" if dev == "cuda" else ""), flush=True)

    if not args.skip_gpt:
        if args.tiny:
            cfg = dict(vocab=512, seq=64, d=64, layers=2, heads=4)
            batch = 4
        else:
            cfg = dict(vocab=50304, seq=1024, d=768, layers=12, heads=12)
            batch = 8
        g = torch.Generator().manual_seed(0)
        idx = torch.randint(0, cfg["vocab"], (batch, cfg["seq"] + 1), generator=g).to(dev)
        x, y = idx[:, :-1].contiguous(), idx[:, 1:].contiguous()

        def gpt_loss(logits, targets):
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

        modes = [m for m in MODES if not (args.skip_fp32 and m in ("fp32", "tf32"))]
        if args.modes:
            modes = [m.strip() for m in args.modes.split(",")]
        if dev == "cpu":
            modes = [m for m in modes if m != "tf32"]
        if args.explain:
            explain(modes, lambda: GPT(**cfg), x, y, gpt_loss, dev)
            return
        med = run_suite(f"GPT-2-small-like step ({cfg}, batch {batch}, AdamW"
                        + (", torch.compile(model)" if COMPILE else "") + ")", modes,
                        lambda: GPT(**cfg), (x, y, gpt_loss), dev, args.warmup, args.steps,
                        args.rounds, "native autocast fp16 + GradScaler")
        print("\nPaired ratios per round (amplint / native of the same dtype):")
        for m in modes:
            if not m.startswith("amplint"):
                continue
            base = ("native autocast bf16" if "bf16" in m else "native autocast fp16 + GradScaler")
            if base in med.rounds:
                ratios = [a / b for a, b in zip(med.rounds[m], med.rounds[base])]
                print(f"  {m:40s} vs {base}: " + ", ".join(f"{r:.3f}" for r in ratios)
                      + f"  (median {statistics.median(ratios):.3f})")
    if args.skip_probe:
        return

    # CPU-side overhead: a tiny model where Python/launch overhead dominates.
    xs = torch.randn(32, 64, device=dev)
    ys = torch.randint(0, 10, (32,), device=dev)
    tiny_modes = ["fp32", "native autocast fp16 + GradScaler", "native autocast bf16",
                  "amplint O1 fp16", "amplint O1 bf16", "amplint O2 fp16", "amplint O3 fp16"]
    med = run_suite("Overhead probe: 4x Linear(64) MLP, batch 32", tiny_modes, MLP,
                    (xs, ys, F.cross_entropy), dev, 20, 200, 3,
                    "native autocast fp16 + GradScaler")
    base = med["native autocast fp16 + GradScaler"]
    print("\namplint extra time per step over native autocast fp16 + GradScaler: "
          + ", ".join(f"{m}: {1e3 * (med[m] - base):+.0f} us" for m in tiny_modes if m.startswith("amplint")))


if __name__ == "__main__":
    main()
