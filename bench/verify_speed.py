"""Verifier speed (issues 8 and 14): wall and CPU time of `amplint verify` at O0-O2, and what the
hooks cost.

1. ``amplint verify TARGET --opt-level O1 O2`` as a subprocess (start-up, torch import, lint,
   3 training steps per level, reports), ``--repeat`` times: median wall time, the CPU time it
   used (user + system, which a busy machine does not inflate) and each level's own seconds.
   TARGET defaults to ``bench/verify_models/nanogpt_like.py::example``: nanoGPT's layout,
   2 layers, d=64, GPT-2's 50257-token head, batch 4 x 64 tokens (targets: <= 15 s on a quiet
   2-core CPU, <= 8 s on an H200).  ``--target tiny`` measures the older fixture
   ``fixtures/verify/clean/tiny_transformer.py::example``.
2. In one process, per level: training steps with no verifier instrumentation, with the
   module hooks (forward + gradient statistics), and with hooks + the per-line trace (the
   trace runs during step 0 only, so its cost is reported for step 0); median step time over
   ``--steps`` steps after a warm-up (target: hooks <= 2x the unhooked step).

Run from the repository root:  python bench/verify_speed.py [--device cpu|cuda|auto] [--repeat 3]
[--steps 30] [--threads N] [--skip-steps].  The machine's load average is printed: on a shared
machine compare CPU seconds, or the ratios of one run, not wall times across runs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = {"nanogpt": "bench/verify_models/nanogpt_like.py::example", "tiny": "fixtures/verify/clean/tiny_transformer.py::example"}
TARGET = TARGETS["nanogpt"]


def cli_runs(target: str, device: str, repeat: int, threads: int | None) -> list[dict]:
    """Each run: wall and CPU seconds of the whole command, and the per-level seconds it reports."""
    runs = []
    for _ in range(repeat):
        cmd = [sys.executable, "-m", "amplint", "verify", target, "--opt-level", "O1", "O2", "--format", "json", "-q"]
        if device != "auto":  # auto: no --device, the default (CUDA when available)
            cmd += ["--device", device]
        if threads:
            cmd += ["--threads", str(threads)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"verify failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        [report] = json.loads(proc.stdout)["results"]
        runs.append({"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
                     "device": report["device"], "levels": {lvl: r["seconds"] for lvl, r in report["before"].items()},
                     "exit": proc.returncode})
    return runs


def step_times(target: str, level: str, steps: int, hooks: bool, census: bool, device: str) -> tuple[float, float]:
    """(median step time after warm-up, step-0 time) for one configuration."""
    from amplint.verify.runner import LevelRunner, RunConfig, make_loss
    from amplint.verify.target import import_file, isolated_import

    stamps: list[float] = []
    with isolated_import():
        path, factory = target.split("::")
        module = import_file(os.path.join(ROOT, path))
        cfg = RunConfig(levels=(level,), device=device, steps=steps, hooks=hooks, census=census)
        files = {os.path.realpath(os.path.join(ROOT, path))}
        runner = LevelRunner(getattr(module, factory), files, cfg, make_loss("auto"))
        if level != "O0":  # the other levels compare with O0's references, as in a real run
            runner.run_level("O0")
        start = [time.perf_counter()]

        def tick():
            if device == "cuda":
                import torch

                torch.cuda.synchronize()
            now = time.perf_counter()
            stamps.append(now - start[0])
            start[0] = now

        # run_level builds the model and initialises before step 0; start timing at step 0
        import amplint.verify.runner as runner_mod

        original = runner_mod._seed_all
        state = {"n": 0}

        def seed_and_mark(seed):
            original(seed)
            state["n"] += 1
            if state["n"] == 2:  # the first call seeds the factory; the second starts step 0
                start[0] = time.perf_counter()

        runner_mod._seed_all = seed_and_mark
        try:
            result = runner.run_level(level, on_step=tick)
        finally:
            runner_mod._seed_all = original
        if result["crash"]:
            raise SystemExit(f"{level} crashed: {result['crash']}")
    return statistics.median(stamps[2:]), stamps[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="nanogpt", help="nanogpt (default), tiny, or PATH::FACTORY")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto (no --device flag: verify's default)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=None, help="torch threads for both parts (default: torch's default)")
    ap.add_argument("--skip-cli", action="store_true")
    ap.add_argument("--skip-steps", action="store_true", help="only part 1")
    args = ap.parse_args()
    target = TARGETS.get(args.target, args.target)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from amplint.verify.runner import keep_freed_memory, skip_dynamo_import

    skip_dynamo_import()
    keep_freed_memory()
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs{gpu}, load average {load[0]:.2f}; "
          f"python {platform.python_version()}, torch {torch.__version__}, torch threads {torch.get_num_threads()}")
    if not args.skip_cli:
        runs = cli_runs(target, args.device, args.repeat, args.threads)
        walls = [r["wall"] for r in runs]
        print(f"amplint verify {target} --opt-level O1 O2 (device {args.device} -> {runs[0]['device']}; 3 steps/level, lint, report):")
        print(f"  median {statistics.median(walls):.2f} s wall, {statistics.median(r['cpu'] for r in runs):.2f} s CPU "
              f"(runs: {', '.join('%.2f/%.2f' % (r['wall'], r['cpu']) for r in runs)} wall/CPU s)")
        for r in runs:
            print("  per level: " + ", ".join(f"{lvl} {sec:.2f} s" for lvl, sec in r["levels"].items()) + f"; exit {r['exit']}")
    if args.skip_steps:
        return
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else ("cpu" if args.device == "auto" else args.device)
    print(f"\nper training step, median of steps 2..{args.steps - 1} ({device}):")
    print(f"{'level':<6} {'no hooks ms':>12} {'hooks ms':>10} {'ratio':>6}   {'step 0 no hooks':>16} {'step 0 hooks+trace':>19} {'ratio':>6}")
    for level in ("O0", "O1", "O2"):
        bare, bare0 = step_times(target, level, args.steps, False, False, device)
        hooked, _ = step_times(target, level, args.steps, True, False, device)
        _, traced0 = step_times(target, level, args.steps, True, True, device)
        print(f"{level:<6} {bare * 1e3:12.2f} {hooked * 1e3:10.2f} {hooked / bare:6.2f}   {bare0 * 1e3:14.1f}ms {traced0 * 1e3:17.1f}ms {traced0 / bare0:6.2f}")


if __name__ == "__main__":
    main()
