"""What checking syntax in files the prefilter skips costs (issue 15).

A file that mentions none of the rules' marker words is not linted, but it is still
parsed for syntax errors.  This script times ``amplint check --no-cache -j 1`` on two
corpora, with that syntax check and with it patched out, alternating runs (best of N):

- the standard library's top-level modules (real code: the markers are broad, so the
  prefilter skips few files);
- a worst case: 1,000 generated files of plain arithmetic with no marker at all.

    python bench/prefilter_syntax.py [--repeat 3]

(``bench/lint_speed.py``'s transformers corpus cannot show the cost: every file there
mentions torch, so none is skipped.)
"""
from __future__ import annotations

import argparse
import glob
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WITHOUT_CHECK = "import sys, amplint.engine as e; e.check_syntax = lambda path, text: None; from amplint.cli import main; sys.exit(main(sys.argv[1:]))"
WITH_CHECK = "import sys; from amplint.cli import main; sys.exit(main(sys.argv[1:]))"


def run(code: str, folder: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, "check", folder, "--no-cache", "-q", "-j", "1"],
                          cwd=ROOT, capture_output=True, text=True)
    if "Traceback" in proc.stderr:
        sys.exit(proc.stderr)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="amplint-prefilter-")
    try:
        stdlib = os.path.join(work, "stdlib")
        os.mkdir(stdlib)
        for path in sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py"))):
            shutil.copy(path, stdlib)
        plain = os.path.join(work, "plain")
        os.mkdir(plain)
        body = "".join(f"x{i} = {i} + 2 * (x{i - 1} if {i} else 1)\n" for i in range(1, 60))
        for n in range(1000):
            with open(os.path.join(plain, f"m{n}.py"), "w") as fh:
                fh.write("x0 = 0\n" + body)
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
        for name, folder in (("stdlib", stdlib), ("plain x1000", plain)):
            size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)) / 1e6
            best = {"with": float("inf"), "without": float("inf")}
            for _ in range(args.repeat):
                best["without"] = min(best["without"], run(WITHOUT_CHECK, folder))
                best["with"] = min(best["with"], run(WITH_CHECK, folder))
            print(f"{name} ({len(os.listdir(folder))} files, {size:.1f} MB): without the syntax check "
                  f"{best['without']:.2f} s, with it {best['with']:.2f} s, ratio {best['with'] / best['without']:.2f}")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
