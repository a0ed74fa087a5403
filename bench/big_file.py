"""Time and peak memory of ``amplint check`` on one very large generated file (issue 15).

The file is dense in findings, as in the adversarial report: function after function,
each with a ``masked_fill(m, -1e9)``, a softmax and a ``+ 1e-8``.  It is written into
``bench/out/`` (git-ignored) and checked with ``--no-cache --statistics``; the script
prints the wall time, the peak RSS of the largest process (parent or worker, from
``getrusage``) and the findings counted.

    python bench/big_file.py --mb 20 [--jobs N] [--keep]

Targets: linear time and bounded memory in the file's size: a 20 MB file in at most
60 s and 1 GB.  Results go in bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out")

FUNCTION = (
    "def attend_{i}(scores, mask):\n"
    "    scores = scores.masked_fill(mask, -1e9)\n"
    "    return torch.softmax(scores, dim=-1) + 1e-8\n"
    "\n\n"
)


def generate(path: str, megabytes: float) -> int:
    """Write the file; return how many functions it holds."""
    target = int(megabytes * 1_000_000)
    size, count = 0, 0
    with open(path, "w") as fh:
        head = "import torch\n\n\n"
        fh.write(head)
        size += len(head)
        while size < target:
            chunk = "".join(FUNCTION.format(i=count + k) for k in range(1000))
            fh.write(chunk)
            size += len(chunk)
            count += 1000
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=20.0, help="file size in MB (default 20)")
    parser.add_argument("--jobs", type=int, default=0, help="amplint -j (default 0: one per core)")
    parser.add_argument("--keep", action="store_true", help="keep the generated file")
    args = parser.parse_args()
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"big_{args.mb:g}mb.py")
    functions = generate(path, args.mb)
    size = os.path.getsize(path)
    cmd = [sys.executable, "-m", "amplint", "check", "--no-cache", "--statistics", "-j", str(args.jobs), path]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    # ru_maxrss of the children: the largest peak of any process amplint ran (KB on Linux)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_mb = usage.ru_maxrss / 1024
    cpu = usage.ru_utime + usage.ru_stime  # all processes: tells a busy machine from slow code
    if not args.keep:
        os.unlink(path)
    if proc.returncode not in (0, 1) or "Traceback" in proc.stderr:
        sys.exit(f"amplint exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"file: {size / 1e6:.1f} MB, {functions} functions")
    print(f"command: {' '.join(cmd[1:])}")
    print(f"wall: {elapsed:.1f} s   CPU (all processes): {cpu:.1f} s   peak RSS (largest process): "
          f"{peak_mb:.0f} MB   {elapsed / (size / 1e6):.2f} s/MB")
    print(proc.stdout.strip())


if __name__ == "__main__":
    main()
