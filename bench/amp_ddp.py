"""DDP over NCCL with amplint.amp: step time on 1 vs N GPUs, and overflow/bit-identity checks.

    torchrun --nproc_per_node 1 bench/amp_ddp.py
    torchrun --nproc_per_node 2 bench/amp_ddp.py

Model: bench/amp_gpt2.py's GPT with 6 layers (d=768, vocab 50304, T=1024), batch 8 per GPU,
AdamW, DistributedDataParallel wrapped after amp.initialize. Modes run interleaved in
``--rounds`` rounds; rank 0 prints the medians. Then, for O1 and O2 (fp16, dynamic scale): four
steps where rank 1 alone writes an inf into a gradient at step 2; every rank must skip that step
(parameters unchanged, scale halved, one skipped step) and all ranks must end bit-identical.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from amp_gpt2 import GPT  # noqa: E402

from amplint import amp  # noqa: E402

CFG = dict(vocab=50304, seq=1024, d=768, layers=6, heads=12)


def build(mode, dev):
    amp.reset()
    torch.manual_seed(0)
    model = GPT(**CFG).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = None
    if mode == "native":
        scaler = torch.amp.GradScaler("cuda")
    else:
        model, opt = amp.initialize(model, opt, opt_level=mode, verbosity=0)
    return model, DDP(model, device_ids=[dev.index]), opt, scaler


def step(mode, ddp, opt, scaler, x, y, inject=False, model=None):
    def loss_of():
        logits = ddp(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    if mode == "native":
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_of()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss
    loss = loss_of()
    with amp.scale_loss(loss, opt) as scaled:
        scaled.backward()
        if inject:
            next(model.parameters()).grad.view(-1)[0] = float("inf")
    opt.step()
    return loss


def data(rank, dev, batch=8):
    g = torch.Generator().manual_seed(1 + rank)
    idx = torch.randint(0, CFG["vocab"], (batch, CFG["seq"] + 1), generator=g).to(dev)
    return idx[:, :-1].contiguous(), idx[:, 1:].contiguous()


def timing(modes, dev, rank, rounds, warmup, steps):
    x, y = data(rank, dev)
    times = {m: [] for m in modes}
    for _ in range(rounds):
        for mode in modes:
            model, ddp, opt, scaler = build(mode, dev)
            for _ in range(warmup):
                step(mode, ddp, opt, scaler, x, y)
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(steps):
                step(mode, ddp, opt, scaler, x, y)
            torch.cuda.synchronize()
            times[mode].append((time.perf_counter() - t0) * 1e3 / steps)
            del model, ddp, opt, scaler
            amp.reset()
            torch.cuda.empty_cache()
    return times


def overflow_check(level, dev, rank, world):
    x, y = data(rank, dev)
    model, ddp, opt, _ = build(level, dev)
    skipped_unchanged = None
    for i in range(4):
        before = [p.detach().clone() for p in model.parameters()] if i == 2 else None
        step(level, ddp, opt, None, x, y, inject=(i == 2 and rank == world - 1 and world > 1),
             model=model)
        if i == 2:
            skipped_unchanged = all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    flat = torch.cat([p.detach().float().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    identical = all(torch.equal(gathered[0], g) for g in gathered)
    result = (amp.loss_scale(), amp.skipped_steps(), skipped_unchanged, identical)
    amp.reset()
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(dev)
    modes = ["native", "O1", "O2"]
    times = timing(modes, dev, rank, args.rounds, args.warmup, args.steps)
    checks = {lvl: overflow_check(lvl, dev, rank, world) for lvl in ("O1", "O2")}
    if rank == 0:
        print(f"\n### DDP, {world} GPU(s), {torch.cuda.get_device_name()}, torch {torch.__version__}, "
              f"GPT {CFG}, batch 8 per GPU\n")
        print("| mode | ms/step (median) | rounds | vs native |\n|---|---|---|---|")
        med = {m: statistics.median(v) for m, v in times.items()}
        for m in modes:
            name = "native autocast fp16 + GradScaler" if m == "native" else f"amplint {m} fp16"
            print(f"| {name} | {med[m]:.2f} | {', '.join(f'{t:.2f}' for t in times[m])} | "
                  f"{med[m] / med['native']:.3f} |")
        print("\n| level | scale after | skipped steps | skipped step left params unchanged | "
              "ranks bit-identical |\n|---|---|---|---|---|")
        for lvl, (scale, skipped, unchanged, identical) in checks.items():
            print(f"| {lvl} | {scale} | {skipped} | {unchanged} | {identical} |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
