"""DDP and FSDP2 with amplint.amp: step time, overflow on one rank, bit-identity, checkpoints.

    torchrun --nproc_per_node 1 bench/amp_ddp.py
    torchrun --nproc_per_node 2 bench/amp_ddp.py
    torchrun --nproc_per_node 2 bench/amp_ddp.py --fsdp2                 # NCCL, GPT-2 small
    torchrun --nproc_per_node 2 bench/amp_ddp.py --fsdp2 --tiny --device cpu  # gloo, CPU

FSDP2 (``--fsdp2``): every Block and the root are ``fully_shard``-ed. Modes: native FSDP2
``MixedPrecisionPolicy(param_dtype=bf16|fp16, reduce_dtype=fp32)`` (fp16 with
``ShardedGradScaler``) against amplint O1 and O2 (same dtype, same model and seed): step time
(interleaved rounds, medians), peak memory per rank (CUDA), losses over ``--loss-steps``
steps against native of the same dtype, an inf on the last rank only (every rank must skip:
local shards unchanged, one skipped step, the scale halved on every rank), and a checkpoint
saved on every rank (each rank its own shards) and resumed into fresh objects, which must
continue with bit-identical losses.

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


# ---------------------------------------------------------------------------------------------
# FSDP2
# ---------------------------------------------------------------------------------------------

FSDP_MODES = ("native bf16", "amplint O1 bf16", "amplint O2 bf16",
              "native fp16", "amplint O1 fp16", "amplint O2 fp16")


def _half(mode):
    return torch.bfloat16 if mode.endswith("bf16") else torch.float16


def build_fsdp2(mode, dev):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    amp.reset()
    torch.manual_seed(0)
    model = GPT(**CFG).to(dev)
    half = _half(mode)
    kw = {}
    if mode.startswith("native"):
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=half, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = None
    if mode == "native fp16":
        scaler = ShardedGradScaler(device=dev.type)
    elif mode.startswith("amplint"):
        level = mode.split()[1]
        model, opt = amp.initialize(model, opt, opt_level=level, verbosity=0,
                                    **({"half_dtype": half} if level == "O1" else
                                       {"cast_model_type": half}))
    return model, opt, scaler


def step_fsdp2(mode, model, opt, scaler, x, y, inject=False):
    opt.zero_grad(set_to_none=True)
    if mode.startswith("native"):
        logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss.detach()
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    with amp.scale_loss(loss, opt) as scaled:
        scaled.backward()
        if inject:
            next(model.parameters()).grad.to_local().view(-1)[0] = float("inf")
    opt.step()
    return loss.detach()


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def fsdp2_suite(dev, rank, world, args):
    x, y = data(rank, dev, batch=args.batch)
    times = {m: [] for m in FSDP_MODES}
    peaks = {}
    for _ in range(args.rounds):
        for mode in FSDP_MODES:
            model, opt, scaler = build_fsdp2(mode, dev)
            for _ in range(args.warmup):
                step_fsdp2(mode, model, opt, scaler, x, y)
            _sync(dev)
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step_fsdp2(mode, model, opt, scaler, x, y)
            _sync(dev)
            times[mode].append((time.perf_counter() - t0) * 1e3 / args.steps)
            if dev.type == "cuda":
                peaks[mode] = torch.cuda.max_memory_allocated(dev) / 2 ** 30
            del model, opt, scaler
            amp.reset()
    # losses over --loss-steps steps (fresh data per step, same on every mode)
    curves = {}
    for mode in FSDP_MODES:
        model, opt, scaler = build_fsdp2(mode, dev)
        curve = []
        for i in range(args.loss_steps):
            g = torch.Generator().manual_seed(1000 * i + rank)
            idx = torch.randint(0, CFG["vocab"], (args.batch, CFG["seq"] + 1), generator=g).to(dev)
            curve.append(step_fsdp2(mode, model, opt, scaler, idx[:, :-1], idx[:, 1:]).item())
        curves[mode] = curve
        amp.reset()
    return times, peaks, curves, fsdp2_overflow(dev, rank, world, x, y), \
        fsdp2_checkpoint(dev, rank, x, y, args.ckpt_dir)


def fsdp2_overflow(dev, rank, world, x, y):
    mode = "amplint O2 fp16"
    model, opt, scaler = build_fsdp2(mode, dev)
    step_fsdp2(mode, model, opt, scaler, x, y)
    before = [p.to_local().detach().clone() for p in model.parameters()]
    step_fsdp2(mode, model, opt, scaler, x, y, inject=(rank == world - 1))
    unchanged = all(torch.equal(a, p.to_local()) for a, p in zip(before, model.parameters()))
    state = torch.tensor([amp.loss_scale(), float(amp.skipped_steps()), float(unchanged)],
                         device=dev)
    gathered = [torch.empty_like(state) for _ in range(world)]
    dist.all_gather(gathered, state)
    amp.reset()
    return [t.tolist() for t in gathered]


def fsdp2_checkpoint(dev, rank, x, y, ckpt_dir):
    """Save on every rank after 3 steps, continue 3 more; resume into fresh objects, 3 more."""
    mode = "amplint O2 fp16"
    path = Path(ckpt_dir) / f"fsdp2-rank{rank}.pt"
    model, opt, scaler = build_fsdp2(mode, dev)
    for _ in range(3):
        step_fsdp2(mode, model, opt, scaler, x, y)
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "amp": amp.state_dict()},
               path)
    straight = [step_fsdp2(mode, model, opt, scaler, x, y).item() for _ in range(3)]
    model, opt, scaler = build_fsdp2(mode, dev)
    ckpt = torch.load(path, weights_only=False)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    amp.load_state_dict(ckpt["amp"])
    resumed = [step_fsdp2(mode, model, opt, scaler, x, y).item() for _ in range(3)]
    amp.reset()
    return straight, resumed


def report_fsdp2(times, peaks, curves, overflow, ckpt, world, dev):
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "CPU"
    print(f"\n### FSDP2, {world} rank(s), {name}, torch {torch.__version__}, GPT {CFG}\n")
    print("| mode | ms/step (median) | rounds | vs native same dtype | peak GiB/rank | "
          f"max |loss - native| over {len(next(iter(curves.values())))} steps |")
    print("|---|---|---|---|---|---|")
    med = {m: statistics.median(v) for m, v in times.items()}
    for m in FSDP_MODES:
        native = "native " + m.split()[-1]
        diff = max(abs(a - b) for a, b in zip(curves[m], curves[native]))
        peak = f"{peaks[m]:.2f}" if m in peaks else "n/a (CPU)"
        print(f"| {m} | {med[m]:.2f} | {', '.join(f'{t:.2f}' for t in times[m])} | "
              f"{med[m] / med[native]:.3f} | {peak} | {diff:.2e} (final {curves[m][-1]:.4f}) |")
    print("\nOverflow on the last rank only (amplint O2 fp16), per rank: "
          "[scale after, skipped steps, local shards unchanged]:", overflow)
    straight, resumed = ckpt
    print("Checkpoint on every rank, resumed (rank 0 losses): straight", straight,
          "resumed", resumed, "bit-identical:", straight == resumed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--fsdp2", action="store_true", help="FSDP2 (fully_shard) instead of DDP")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="a small GPT (CPU/gloo runs)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--loss-steps", type=int, default=200)
    ap.add_argument("--ckpt-dir", default="/tmp")
    args = ap.parse_args()
    if args.tiny:
        CFG.update(vocab=512, seq=64, d=64, layers=2, heads=4)
    cpu = args.device == "cpu"
    dist.init_process_group("gloo" if cpu else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    if cpu:
        dev = torch.device("cpu")
    else:
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(dev)
    if args.fsdp2:
        results = fsdp2_suite(dev, rank, world, args)
        if rank == 0:
            report_fsdp2(*results, world, dev)
        dist.destroy_process_group()
        return
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
