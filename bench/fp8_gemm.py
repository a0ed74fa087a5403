"""Where fp8 training starts to pay: one ``nn.Linear`` forward + backward, bf16 against
torchao's ``Float8Linear`` (tensorwise and rowwise recipes), compiled, over a grid of
M x K x N.  The break-even it finds goes into AMP703's docs and ``amplint fp8-plan``.

    python bench/fp8_gemm.py --out fp8_gemm.json [--workers 12]

Needs a GPU with fp8 Tensor Cores (sm89+) and torchao.  Compiles run in parallel worker
processes (CPU-bound); the timed part of each worker holds a file lock, so only one
shape is timed on the GPU at a time.
"""
from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

MS = (4096, 16384)
KNS = (512, 1024, 2048, 4096, 8192)
RECIPES = ("tensorwise", "rowwise")


def _time(fn, iters: int = 20, repeats: int = 5) -> float:
    import torch

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / iters)
    return statistics.median(times)


def _kernel_ms(fn, iters: int = 10) -> float:
    """GPU time of the kernels ``fn`` launches (torch.profiler), per call: what the casts
    and GEMMs cost the GPU, without the launch gaps a busy CPU adds."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    total = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    return total / iters / 1000


def _worker(jobs, lock_path, results, smoke=False, barrier=None):
    import torch
    import torch._dynamo
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 100000)
    ready = []
    for m, k, n in jobs:
        row = {"M": m, "K": k, "N": n}
        dev = "cpu" if smoke else "cuda"
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
        fns = {}
        base = torch.nn.Linear(k, n, bias=False, device=dev, dtype=torch.bfloat16)
        fns["bf16"] = base  # one cuBLAS GEMM per product: nothing for the compiler to fuse
        for recipe in RECIPES:
            lin = torch.nn.Sequential(torch.nn.Linear(k, n, bias=False, device=dev, dtype=torch.bfloat16))
            config = Float8LinearConfig.from_recipe_name(recipe)
            if smoke:
                import dataclasses
                config = dataclasses.replace(config, emulate=True)
            convert_to_float8_training(lin, config=config)
            fns[recipe] = lin if smoke else torch.compile(lin, dynamic=False)
        step = {name: (lambda f=f, x=x, g=g: f(x).backward(g)) for name, f in fns.items()}
        try:
            for f in step.values():  # compile outside the lock
                f()
            if smoke:
                results.append(row | {"smoke": "ok"})
                continue
            torch.cuda.synchronize()
            ready.append((row, step))
        except Exception as exc:  # a shape a recipe cannot run is a result too
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            results.append(row)
    if barrier is not None:
        barrier.wait()  # every worker has compiled: no compile competes with the timing
    for row, step in ready:
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                for name, f in step.items():
                    row[f"{name}_wall_ms"] = _time(f)
                    row[f"{name}_ms"] = _kernel_ms(f)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            fcntl.flock(lock, fcntl.LOCK_UN)
        results.append(row)
        print(json.dumps(row), flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=14)
    p.add_argument("--smoke", action="store_true", help="CPU, emulated fp8, one small shape, no timing: checks the script runs")
    args = p.parse_args()
    import torch
    import torchao

    shapes = [(m, k, n) for m in MS for k in KNS for n in KNS]
    if args.smoke:
        shapes, args.workers = [(64, 32, 48)], 1
    started = time.time()
    ctx = mp.get_context("spawn")
    manager = ctx.Manager()
    results = manager.list()
    lock_path = os.path.join(os.path.dirname(os.path.abspath(args.out)), ".fp8_gemm.lock")
    chunks = [shapes[i::args.workers] for i in range(args.workers)]
    chunks = [c for c in chunks if c]
    barrier = ctx.Barrier(len(chunks))
    procs = [ctx.Process(target=_worker, args=(c, lock_path, results, args.smoke, barrier)) for c in chunks]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()
    rows = sorted(results, key=lambda r: (r["M"], r["K"], r["N"]))
    out = {
        "torch": torch.__version__, "torchao": torchao.__version__,
        "device": "cpu (smoke)" if args.smoke else torch.cuda.get_device_name(), "seconds": round(time.time() - started, 1),
        "what": "one nn.Linear (no bias) forward + backward, bf16 weights and input, torch.compile(dynamic=False); "
                "<name>_ms: GPU kernel time per iteration (torch.profiler, 10 iterations); <name>_wall_ms: "
                "CUDA-event time, median of 5 x 20 iterations after 5 warm-ups, all compiles done",
        "rows": rows,
    }
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from amplint.fp8.gemm import fit_break_even

    out["break_even"] = {rc: list(map(str, dataclasses.astuple(fit_break_even(rows, rc)))) for rc in RECIPES} if not args.smoke else {}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out["break_even"]))
    for r in rows:
        if "error" in r or "smoke" in r:
            print(r["M"], r["K"], r["N"], r.get("error", "smoke ok"))
            continue
        print(f'{r["M"]:>6} {r["K"]:>5} {r["N"]:>5}  bf16 {r["bf16_ms"]:.4f} ms  '
              + "  ".join(f'{rc} {r["bf16_ms"] / r[rc + "_ms"]:.2f}x' for rc in RECIPES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
