"""Verifier speed (issue 8): a small fixture transformer (2 layers, d=64, sequence 32, batch 8)
verified at O0-O2 on CPU, wall time including start-up, and what the hooks cost.

1. ``amplint verify fixtures/verify/clean/tiny_transformer.py::example --device cpu
   --opt-level O1 O2`` as a subprocess (start-up, torch import, lint, 3 training steps per
   level, reports), ``--repeat`` times; the median is the number (target: < 10 s).
2. In one process, per level: training steps with no verifier instrumentation, with the
   module hooks (forward + gradient statistics), and with hooks + the per-line trace (the
   trace runs during step 0 only, so its cost is reported for step 0); median step time over
   ``--steps`` steps after a warm-up (target: hooks <= 2x the unhooked step).

Run from the repository root:  python bench/verify_speed.py [--repeat 3] [--steps 30] [--threads N]
(``--device cuda`` measures part 2 on a GPU.)  The machine's load average is printed: on a
shared machine, compare the ratios of one run, not absolute times across runs.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = "fixtures/verify/clean/tiny_transformer.py::example"


def cli_wall(repeat: int, threads: int | None) -> list[float]:
    times = []
    for _ in range(repeat):
        cmd = [sys.executable, "-m", "amplint", "verify", TARGET, "--device", "cpu", "--opt-level", "O1", "O2", "-q"]
        if threads:
            cmd += ["--threads", str(threads)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(f"verify failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return times


def step_times(level: str, steps: int, hooks: bool, census: bool, device: str) -> tuple[float, float]:
    """(median step time after warm-up, step-0 time) for one configuration."""
    from amplint.verify.runner import LevelRunner, RunConfig, make_loss
    from amplint.verify.target import import_file, isolated_import

    stamps: list[float] = []
    with isolated_import():
        module = import_file(os.path.join(ROOT, TARGET.split("::")[0]))
        cfg = RunConfig(levels=(level,), device=device, steps=steps, hooks=hooks, census=census)
        files = {os.path.join(ROOT, TARGET.split("::")[0])}
        runner = LevelRunner(module.example, files, cfg, make_loss("auto"))
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
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=None, help="torch threads for both parts (default: torch's default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--skip-cli", action="store_true")
    args = ap.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from amplint.verify.runner import skip_dynamo_import

    skip_dynamo_import()
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average {load[0]:.2f}; "
          f"python {platform.python_version()}, torch {torch.__version__}, torch threads {torch.get_num_threads()}")
    if not args.skip_cli:
        walls = cli_wall(args.repeat, args.threads)
        print(f"amplint verify {TARGET} --device cpu --opt-level O1 O2 (3 steps/level, lint, report): "
              f"median {statistics.median(walls):.2f} s wall (runs: {', '.join(f'{w:.2f}' for w in walls)})")
    print(f"\nper training step, median of steps 2..{args.steps - 1} ({args.device}):")
    print(f"{'level':<6} {'no hooks ms':>12} {'hooks ms':>10} {'ratio':>6}   {'step 0 no hooks':>16} {'step 0 hooks+trace':>19} {'ratio':>6}")
    for level in ("O0", "O1", "O2"):
        bare, bare0 = step_times(level, args.steps, False, False, args.device)
        hooked, _ = step_times(level, args.steps, True, False, args.device)
        _, traced0 = step_times(level, args.steps, True, True, args.device)
        print(f"{level:<6} {bare * 1e3:12.2f} {hooked * 1e3:10.2f} {hooked / bare:6.2f}   {bare0 * 1e3:14.1f}ms {traced0 * 1e3:17.1f}ms {traced0 / bare0:6.2f}")


if __name__ == "__main__":
    main()
