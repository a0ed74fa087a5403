"""Lint speed: amplint vs Fixit 2, TorchFix and a bare `ast` loop, side by side.

Corpus: the first N (default 100) paths, sorted, of ``models/*/modeling_*.py`` inside an
installed ``transformers`` package, copied to a temporary folder.  Each tool runs as a
subprocess on the same copy, in one run, so the ratios are comparable on a noisy machine.

Set up the comparison tools in a throwaway virtualenv (none of their code is committed):

    python -m venv /tmp/benchvenv
    /tmp/benchvenv/bin/pip install fixit torchfix
    /tmp/benchvenv/bin/pip install --no-deps transformers

then run (from the repository root, with amplint installed in the current python):

    python bench/lint_speed.py --venv /tmp/benchvenv [--files 100] [--skip-slow] [--repeat 3]
"""
from __future__ import annotations

import argparse
import glob
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time

AST_LOOP = r"""
import ast, sys, os
n = 0
for root, _, files in os.walk(sys.argv[1]):
    for name in sorted(files):
        if name.endswith(".py"):
            with open(os.path.join(root, name), "rb") as fh:
                tree = ast.parse(fh.read())
            for node in ast.walk(tree):
                n += 1
print(n)
"""


def corpus(venv: str, count: int) -> list[str]:
    found = glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "transformers", "models", "*", "modeling_*.py"))
    if not found:
        sys.exit(f"no transformers models under {venv}; see this script's docstring for the set-up")
    return sorted(found)[:count]


# Every tool runs as it would after a normal install: with its bytecode cached (some
# sandboxes set PYTHONDONTWRITEBYTECODE, which makes each start-up recompile every module).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str], cwd: str, ok=(0, 1)) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run.  The CPU time (user + system, the command
    and its worker processes) is what to compare on a shared machine, where other
    loads stretch the wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in ok:
        sys.stderr.write(f"warning: {' '.join(cmd[:3])} exited {proc.returncode}: {proc.stderr.decode()[-500:]}\n")
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", default="/tmp/benchvenv")
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="runs of the fast tools; the best is reported")
    parser.add_argument("--skip-slow", action="store_true", help="skip Fixit and TorchFix (minutes each)")
    args = parser.parse_args()

    files = corpus(args.venv, args.files)
    work = tempfile.mkdtemp(prefix="amplint-bench-")
    src = os.path.join(work, "models")
    os.makedirs(src)
    for path in files:
        model_dir = os.path.basename(os.path.dirname(path))
        shutil.copy(path, os.path.join(src, f"{model_dir}__{os.path.basename(path)}"))
    size = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src))
    print(f"corpus: {len(files)} files, {size / 1e6:.2f} MB, from {os.path.dirname(os.path.dirname(os.path.dirname(files[0])))}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")

    py = sys.executable
    bench_py = os.path.join(args.venv, "bin", "python")
    cache = os.path.join(work, "cache")
    rows: list[tuple[str, float]] = []
    cpu_rows: dict[str, float] = {}

    def best(label, cmd, repeat=args.repeat, before=None):
        if repeat > 1:  # warm-up: bytecode caches, file system cache (the slow tools run once)
            timed(cmd, work)
        times = []
        for _ in range(repeat):
            if before:
                before()
            times.append(timed(cmd, work))
        rows.append((label, min(t[0] for t in times)))
        cpu_rows[label] = min(t[1] for t in times)
        print(f"  {label:<48} {rows[-1][1]:8.2f} s   cpu {cpu_rows[label]:7.2f} s", flush=True)

    best("ast.parse + ast.walk, 1 process", [py, "-c", AST_LOOP, src])
    best("amplint check --no-cache (cold)", [py, "-m", "amplint", "check", src, "--no-cache", "--format", "concise", "-q"])
    best("amplint check --no-cache -j 1 (cold, 1 process)", [py, "-m", "amplint", "check", src, "--no-cache", "-j", "1", "--format", "concise", "-q"])
    best("amplint check (cold cache)", [py, "-m", "amplint", "check", src, "--cache-dir", cache, "--format", "concise", "-q"],
         before=lambda: shutil.rmtree(cache, ignore_errors=True))
    timed([py, "-m", "amplint", "check", src, "--cache-dir", cache, "-q"], work)
    best("amplint check (warm cache, unchanged files)", [py, "-m", "amplint", "check", src, "--cache-dir", cache, "--format", "concise", "-q"])
    if not args.skip_slow:
        best("fixit lint (Fixit 2)", [os.path.join(args.venv, "bin", "fixit"), "lint", src], repeat=1)
        best("torchfix --select ALL", [os.path.join(args.venv, "bin", "torchfix"), "--select", "ALL", src], repeat=1)

    base = dict(rows)["ast.parse + ast.walk, 1 process"]
    cold = dict(rows)["amplint check --no-cache (cold)"]
    print("\nratios (same run):")
    for label, seconds in rows:
        print(f"  {label:<48} {seconds / base:6.2f}x ast loop   {seconds / cold:7.2f}x amplint cold")
    cpu_base = cpu_rows["ast.parse + ast.walk, 1 process"]
    print("\nCPU-time ratios (user + system; steadier than wall time on a loaded machine):")
    for label, seconds in cpu_rows.items():
        print(f"  {label:<48} {seconds / cpu_base:6.2f}x ast loop")
    warm = dict(rows)["amplint check (warm cache, unchanged files)"]
    print(f"  warm re-run / cold run (cache): {warm / dict(rows)['amplint check (cold cache)']:.1%}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
