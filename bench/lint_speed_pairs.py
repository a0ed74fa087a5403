"""Lint speed in alternating rounds: the bare ``ast`` loop, this amplint's cold check, and
(with ``--before PYTHON``) another amplint's, one after the other in every round, so that
a loaded machine slows all of them alike.  Prints each round and the median ratios to the
ast loop (wall and CPU), and the one-file check time.

Corpus and set-up as :mod:`bench.lint_speed` (the first N sorted ``models/*/modeling_*.py``
of a ``transformers`` installed in ``--venv``)::

    python bench/lint_speed_pairs.py --venv /tmp/benchvenv --rounds 7 [--before OTHER_PYTHON]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lint_speed import AST_LOOP, corpus, timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", default="/tmp/benchvenv")
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--before", metavar="PYTHON", help="the python of another amplint to time in the same rounds")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="amplint_pairs_")
    src = os.path.join(work, "src")
    os.makedirs(src)
    for i, path in enumerate(corpus(args.venv, args.files)):
        shutil.copy(path, os.path.join(src, f"{i:03d}_{os.path.basename(path)}"))
    one = sorted(os.listdir(src))[0]
    py = sys.executable
    tools = {"ast": [py, "-c", AST_LOOP, src],
             "amplint": [py, "-m", "amplint", "check", src, "--no-cache", "--format", "concise", "-q"]}
    if args.before:
        tools["before"] = [args.before, "-m", "amplint", "check", src, "--no-cache", "--format", "concise", "-q"]
    single = {"amplint": [py, "-m", "amplint", "check", os.path.join(src, one), "--no-cache", "-q"]}
    if args.before:
        single["before"] = [args.before, "-m", "amplint", "check", os.path.join(src, one), "--no-cache", "-q"]
    load_start = os.getloadavg()[0]
    for cmd in list(tools.values()) + list(single.values()):
        timed(cmd, work)  # warm-up: bytecode caches written
    rows = {name: [] for name in tools}
    ones = {name: [] for name in single}
    for r in range(args.rounds):
        for name, cmd in tools.items():
            rows[name].append(timed(cmd, work))
        for name, cmd in single.items():
            ones[name].append(timed(cmd, work))
        print(f"round {r + 1}: " + "  ".join(f"{n} {w:.2f}s/{c:.2f}cpu" for n, (w, c) in ((n, rows[n][-1]) for n in rows)),
              flush=True)
    print(f"files: {args.files} from {args.venv}; rounds: {args.rounds}; cpus: {os.cpu_count()}; "
          f"load average at start: {load_start:.1f}, at end: {os.getloadavg()[0]:.1f}")
    for name in tools:
        if name == "ast":
            continue
        wall = statistics.median(w / a[0] for (w, _), a in zip(rows[name], rows["ast"]))
        cpu = statistics.median(c / a[1] for (_, c), a in zip(rows[name], rows["ast"]))
        print(f"{name}: median wall x ast {wall:.2f} (range {min(w / a[0] for (w, _), a in zip(rows[name], rows['ast'])):.2f}-"
              f"{max(w / a[0] for (w, _), a in zip(rows[name], rows['ast'])):.2f}), median CPU x ast {cpu:.2f}; "
              f"one-file check median {statistics.median(w for w, _ in ones[name]):.3f}s "
              f"(min {min(w for w, _ in ones[name]):.3f}s), CPU median {statistics.median(c for _, c in ones[name]):.3f}s")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
