"""Where does each mode's peak memory occur? One GPT-2-small step per mode, peak read after
forward, backward and step (diagnostic companion to bench/amp_gpt2.py)."""
import gc
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from amp_gpt2 import GPT  # noqa: E402
from amplint import amp  # noqa: E402

cfg = dict(vocab=50304, seq=1024, d=768, layers=12, heads=12)
idx = torch.randint(0, cfg["vocab"], (8, cfg["seq"] + 1), generator=torch.Generator().manual_seed(0)).cuda()
x, y = idx[:, :-1].contiguous(), idx[:, 1:].contiguous()
G = 2 ** 30


def run(name, level=None, dtype=torch.float16, **kw):
    gc.collect(); torch.cuda.empty_cache()
    torch.manual_seed(0)
    model = GPT(**cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if level:
        model, opt = amp.initialize(model, opt, opt_level=level, verbosity=0, **kw)
    scaler = torch.amp.GradScaler("cuda") if (not level and dtype is torch.float16) else None
    marks = []
    for it in range(4):
        torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        if level:
            loss = F.cross_entropy(model(x).reshape(-1, cfg["vocab"]), y.reshape(-1))
        else:
            with torch.autocast("cuda", dtype=dtype):
                loss = F.cross_entropy(model(x).reshape(-1, cfg["vocab"]), y.reshape(-1))
        torch.cuda.synchronize(); fwd = torch.cuda.max_memory_allocated() / G; t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if level:
            with amp.scale_loss(loss, opt) as s:
                s.backward()
        elif scaler:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        torch.cuda.synchronize(); bwd = torch.cuda.max_memory_allocated() / G; t2 = time.perf_counter()
        if scaler:
            scaler.step(opt); scaler.update()
        else:
            opt.step()
        del loss
        torch.cuda.synchronize(); stp = torch.cuda.max_memory_allocated() / G; t3 = time.perf_counter()
        marks = (fwd, bwd, stp, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3)
    print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in marks) + " |", flush=True)
    amp.reset()


print("| mode | peak GiB fwd | bwd | step | ms fwd | ms bwd | ms step |\n|---|---|---|---|---|---|---|")
run("native fp16 + GradScaler")
run("native bf16", dtype=torch.bfloat16)
run("amplint O1 fp16", "O1")
run("amplint O1 fp16 static 1.0", "O1", loss_scale=1.0)
run("amplint O1 bf16", "O1", half_dtype=torch.bfloat16)
run("amplint O1 bf16 dynamic", "O1", half_dtype=torch.bfloat16, loss_scale="dynamic")
run("amplint O2 fp16", "O2")
