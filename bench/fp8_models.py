"""bf16 against torchao fp8 training on whole models, compiled: converting every
``nn.Linear`` against ``amplint fp8-plan``'s filter, tensorwise and rowwise.

    python bench/fp8_models.py --out fp8_models.json [--gemm fp8_gemm.json] [--models gpt2,llama1b]

``--gemm``: the plan uses the break-even fitted from that ``bench/fp8_gemm.py`` result
instead of the one in amplint/fp8/gemm.py.  Each (model, variant) trains in its own
process: the compiles run in parallel, then a barrier, then one process at a time is timed
(median step of 3 x 10 steps after the warm-up).  ``--smoke``: CPU, emulated fp8, a tiny
model, no compile (checks the script).
"""
from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

#: name -> (layers, dim, heads, kv heads, ffn, vocab, batch, seq, tie the head)
MODELS = {
    "gpt2": (12, 768, 12, 12, 3072, 50304, 8, 1024, True),
    "llama1b": (16, 2048, 32, 8, 8192, 128256, 2, 2048, True),
    "smoke": (2, 64, 4, 2, 256, 512, 2, 32, True),
}
VARIANTS = ("bf16", "tensorwise-all", "tensorwise-plan", "tensorwise-torchao-auto", "rowwise-all", "rowwise-plan")


def build(name: str, vocab: int | None = None):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    layers, dim, heads, kv, ffn, v, _, _, tie = MODELS[name]
    vocab = vocab or v
    gpt2 = name.startswith("gpt2")
    hd = dim // heads

    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(dim) if gpt2 else nn.RMSNorm(dim)

        def forward(self, x):
            return self.norm(x)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = Norm(), Norm()
            self.q = nn.Linear(dim, dim, bias=gpt2)
            self.k = nn.Linear(dim, kv * hd, bias=gpt2)
            self.v = nn.Linear(dim, kv * hd, bias=gpt2)
            self.o = nn.Linear(dim, dim, bias=gpt2)
            if gpt2:
                self.up = nn.Linear(dim, ffn)
            else:
                self.gate, self.up = nn.Linear(dim, ffn, bias=False), nn.Linear(dim, ffn, bias=False)
            self.down = nn.Linear(ffn, dim, bias=gpt2)

        def forward(self, x):
            b, t, _ = x.shape
            h = self.ln1(x)
            q = self.q(h).view(b, t, heads, hd).transpose(1, 2)
            k = self.k(h).view(b, t, kv, hd).transpose(1, 2)
            v = self.v(h).view(b, t, kv, hd).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != heads)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, dim))
            h = self.ln2(x)
            m = F.gelu(self.up(h)) if gpt2 else F.silu(self.gate(h)) * self.up(h)
            return x + self.down(m)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, dim)
            self.pos = nn.Embedding(1024, dim) if gpt2 else None
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = Norm()
            self.lm_head = nn.Linear(dim, vocab, bias=False)
            if tie:
                self.lm_head.weight = self.tok.weight
            for m in self.modules():  # GPT-2's initialisation (std 0.02)
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)

        def forward(self, idx, targets):
            x = self.tok(idx)
            if self.pos is not None:
                x = x + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            logits = self.lm_head(self.norm(x))
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))

    return LM()


def _inputs(name, device, vocab=None):
    import torch

    _, _, _, _, _, v, batch, seq, _ = MODELS[name]
    g = torch.Generator(device="cpu").manual_seed(0)
    idx = torch.randint(0, vocab or v, (batch, seq + 1), generator=g).to(device)
    return idx[:, :-1].contiguous(), idx[:, 1:].contiguous()


def _plan(model, idx, targets, recipe, gemm_json):
    from amplint.fp8 import gemm, plan

    if gemm_json:
        rows = json.load(open(gemm_json))["rows"]
        gemm.BREAK_EVEN[recipe] = gemm.fit_break_even(rows, recipe)
    return plan.plan_model(model, (idx, targets), {}, recipe=recipe, target="bench")


def _run(name, variant, gemm_json, lock_path, barrier, results, smoke):
    import torch

    row = {"model": name, "variant": variant}
    try:
        device = "cpu" if smoke else "cuda"
        torch.manual_seed(0)
        model = build(name).to(device=device, dtype=torch.bfloat16)
        idx, targets = _inputs(name, device)
        row["params_M"] = round(sum(p.numel() for p in model.parameters()) / 1e6, 1)
        row["tokens"] = idx.numel()
        if variant != "bf16":
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training
            from torchao.float8.float8_linear_utils import _auto_filter_for_recipe

            recipe, how = variant.split("-", 1)
            config = Float8LinearConfig.from_recipe_name(recipe)
            if smoke:
                config = dataclasses.replace(config, emulate=True)
            fn = None
            if how == "plan":
                p = _plan(model, idx, targets, recipe, gemm_json)
                fn = p.module_filter_fn()
                row["kept"] = {layer.fqn: layer.code for layer in p.kept if layer.fqn.startswith(("blocks.0.", "lm_head"))}
            elif how == "torchao-auto":
                fn = _auto_filter_for_recipe(recipe, [])
            convert_to_float8_training(model, config=config, module_filter_fn=fn)
            from torchao.float8.float8_linear import Float8Linear

            row["converted"] = sum(isinstance(m, Float8Linear) for m in model.modules())
            row["linears"] = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=not smoke)
        fwd = model if smoke else torch.compile(model)

        def step():
            loss = fwd(idx, targets)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        losses = [float(step().detach()) for _ in range(3 if smoke else 6)]
        if device == "cuda":
            torch.cuda.synchronize()
        row["loss_after_warmup"] = losses[-1]
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:400]
    barrier.wait()
    if "error" not in row and not smoke:
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            times = []
            for _ in range(3):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(10):
                    step()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 10)
            row["step_ms"] = statistics.median(times)
            row["step_ms_all"] = times
            row["max_mem_GiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
            fcntl.flock(lock, fcntl.LOCK_UN)
    results.append(row)
    print(json.dumps(row), flush=True)


def _unaligned_check(smoke):
    """Converting every layer of GPT-2 with its real vocabulary 50257 (what the plan skips)."""
    import torch
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    device = "cpu" if smoke else "cuda"
    name = "smoke" if smoke else "gpt2"
    vocab = 50257 if not smoke else 509
    model = build(name, vocab).to(device=device, dtype=torch.bfloat16)
    config = Float8LinearConfig(emulate=smoke)
    convert_to_float8_training(model, config=config)
    idx, targets = _inputs(name, device, vocab)
    try:
        model(idx, targets).backward()
        return "ran"
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--gemm", help="bench/fp8_gemm.py's JSON: fit the plan's break-even from it")
    p.add_argument("--models", default="gpt2,llama1b")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    import torch
    import torchao

    names = ["smoke"] if args.smoke else args.models.split(",")
    started = time.time()
    ctx = mp.get_context("spawn")
    manager = ctx.Manager()
    results = manager.list()
    lock_path = os.path.join(os.path.dirname(os.path.abspath(args.out)), ".fp8_models.lock")
    for name in names:  # one model at a time: six copies of the 1B model fit, twelve might not
        barrier = ctx.Barrier(len(VARIANTS))
        procs = [ctx.Process(target=_run, args=(name, v, args.gemm, lock_path, barrier, results, args.smoke))
                 for v in VARIANTS]
        for pr in procs:
            pr.start()
        for pr in procs:
            pr.join()
    rows = list(results)
    out = {"torch": torch.__version__, "torchao": torchao.__version__,
           "device": "cpu (smoke)" if args.smoke else torch.cuda.get_device_name(),
           "what": "one training step (compiled forward, cross-entropy, backward, fused AdamW), bf16 weights; "
                   "step_ms: median of 3 x 10 steps after 6 warm-up steps, one process timed at a time",
           "models": {n: MODELS[n] for n in names}, "rows": rows,
           "gpt2_vocab_50257_convert_all": _unaligned_check(args.smoke)}
    out["seconds"] = round(time.time() - started, 1)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    for name in names:
        base = next((r.get("step_ms") for r in rows if r["model"] == name and r["variant"] == "bf16"), None)
        for r in sorted((r for r in rows if r["model"] == name), key=lambda r: VARIANTS.index(r["variant"])):
            ms = r.get("step_ms")
            speed = f"{base / ms:.2f}x" if ms and base else ""
            print(f'{name:8} {r["variant"]:24} {ms or 0:8.2f} ms {speed:6} converted {r.get("converted", "-")}/'
                  f'{r.get("linears", "-")} loss {r.get("loss_after_warmup", math.nan):.3f} {r.get("error", "")}')
    print("gpt2 vocab 50257, convert all:", out["gpt2_vocab_50257_convert_all"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
