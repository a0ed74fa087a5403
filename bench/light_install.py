"""The light install (`pip install amplint`, what pre-commit's hook builds): time, size, cold start.

Does what pre-commit does for a `language: python` hook -- a fresh virtualenv, then
`pip install <the repository>` (build isolation included) -- and measures:

- the install's wall time and the virtualenv's size on disk;
- that torch is NOT in it, and that `check`, `fix --diff`, `rules` and `explain` run;
- `verify` without torch: the one-line message and exit 2;
- a cold `amplint check --no-cache` of one file (best and median of --repeat runs, new process
  each) and what it imports (`python -X importtime`, the slowest top-level imports).

    python bench/light_install.py [--repeat 5] [--keep DIR]

Needs the package registry (pip fetches libcst, rich, pyyaml and the build backend), not
torch. Prints a Markdown block for bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "fixtures", "models", "gpt2.py")


def du(path: str) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            full = os.path.join(folder, name)
            if not os.path.islink(full):
                total += os.path.getsize(full)
    return total


def run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", help="build the virtualenv here and keep it (default: a temporary folder)")
    args = ap.parse_args()

    work = args.keep or tempfile.mkdtemp(prefix="amplint-light-")
    env_dir = os.path.join(work, "env")
    if os.path.exists(env_dir):
        shutil.rmtree(env_dir)
    # a copy of the sources, as pre-commit clones the repository (no build leftovers)
    src = os.path.join(work, "src")
    if os.path.exists(src):
        shutil.rmtree(src)
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.egg-info", ".amplint_cache", ".pytest_cache", ".hypothesis", "build", "dist", ".venv*"))

    load_before = os.getloadavg()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", env_dir], check=True)
    py = os.path.join(env_dir, "bin", "python")
    proc = run([py, "-m", "pip", "install", "-q", src])
    install_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the CPU the install used (pip and the wheel build): steadier than wall time on a shared box
    install_cpu = after.ru_utime - usage.ru_utime + after.ru_stime - usage.ru_stime
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        return 1
    size = du(env_dir)
    bare = os.path.join(work, "bare")
    subprocess.run([sys.executable, "-m", "venv", bare], check=True)
    bare_size = du(bare)
    shutil.rmtree(bare)

    amplint = os.path.join(env_dir, "bin", "amplint")
    has_torch = run([py, "-c", "import torch"]).returncode == 0
    freeze = [line.split(" @ ")[0] for line in run([py, "-m", "pip", "freeze"]).stdout.splitlines()]
    sample_dir = os.path.join(work, "sample")
    os.makedirs(sample_dir, exist_ok=True)
    sample = os.path.join(sample_dir, "model.py")
    shutil.copy(SAMPLE, sample)
    checks = {
        "check": run([amplint, "check", "model.py", "--no-cache"], cwd=sample_dir).returncode,
        "fix --diff": run([amplint, "fix", "model.py", "--diff", "--no-cache"], cwd=sample_dir).returncode,
        "rules": run([amplint, "rules"], cwd=sample_dir).returncode,
        "explain": run([amplint, "explain", "AMP101"], cwd=sample_dir).returncode,
    }
    verify = run([amplint, "verify", "model.py::example"], cwd=sample_dir)

    cpu: dict[str, list[float]] = {}

    def best_of(cmd) -> list[float]:
        """Wall seconds per run; CPU seconds (user + sys of the child) kept in ``cpu``."""
        times = []
        for _ in range(args.repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            run(cmd, cwd=sample_dir)
            times.append(time.perf_counter() - t)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.setdefault(cmd[-1], []).append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        return times

    times = best_of([amplint, "check", "model.py", "--no-cache", "-j", "1"])
    bare_python = best_of([py, "-c", "pass"])
    version = best_of([amplint, "--version"])
    imports = run([py, "-X", "importtime", "-m", "amplint", "check", "model.py", "--no-cache", "-j", "1"], cwd=sample_dir).stderr
    rows = []
    for line in imports.splitlines():
        parts = [p.strip() for p in line.replace("import time:", "").split("|")]
        if len(parts) == 3 and parts[1].isdigit():
            rows.append((int(parts[1]), parts[2]))
    top = [(us, name) for us, name in sorted(rows, reverse=True) if not name.startswith(" ")][:8]
    loaded = {name.strip() for _, name in rows}

    print(f"## Light install (issue 16)\n")
    print(f"Command: `python bench/light_install.py --repeat {args.repeat}` ({platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).\n")
    print("| measure | value |\n|---|---|")
    print(f"| fresh venv + `pip install <repo>` (build isolation, registry) | {install_s:.1f} s wall, {install_cpu:.1f} s CPU (user + sys) |")
    print(f"| virtualenv size | {size / 2**20:.1f} MiB ({(size - bare_size) / 2**20:.1f} MiB over an empty venv) |")
    print(f"| installed | {', '.join(freeze)} |")
    print(f"| torch importable | {has_torch} |")
    print(f"| exit codes on fixtures/models/gpt2.py | " + ", ".join(f"`{k}` {v}" for k, v in checks.items()) + " |")
    print(f"| `verify` without torch | rc {verify.returncode}: `{verify.stderr.strip()}` |")
    print(f"| cold `amplint check --no-cache -j 1` of one file | best {min(times):.2f} s, median {statistics.median(times):.2f} s wall; "
          f"CPU (user + sys) best {min(cpu['1']):.2f} s |")
    print(f"| for scale: `python -c pass` / `amplint --version` | best {min(bare_python):.2f} s / {min(version):.2f} s |")
    print(f"| torch / numpy imported by `check` | {'torch' in loaded} / {'numpy' in loaded} |")
    load_after = os.getloadavg()
    print(f"| load average (1, 5, 15 min) before / after | {' '.join(f'{x:.2f}' for x in load_before)} / "
          f"{' '.join(f'{x:.2f}' for x in load_after)} |")
    print("\nSlowest top-level imports of that run (`-X importtime`, cumulative):\n")
    for us, name in top:
        print(f"- `{name.strip()}` {us / 1000:.0f} ms")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if not has_torch and verify.returncode == 2 else 1


if __name__ == "__main__":
    sys.exit(main())
