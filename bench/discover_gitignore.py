"""What respecting .gitignore / .ignore costs when walking folders.

Builds a throw-away git work tree of N Python files (50 packages x 10 folders x 10 files),
a root .gitignore of 45 patterns and a .gitignore in each package, then times
``amplint.files.discover`` with and without ``respect_gitignore`` (best of 3 each).

    python bench/discover_gitignore.py
"""
from __future__ import annotations

import os
import tempfile
import time

from amplint.files import discover


def build(root: str) -> None:
    os.mkdir(os.path.join(root, ".git"))
    patterns = [f"pattern_{i}/" for i in range(40)] + ["*.log", "build_*", "!keep.py", "/top.py", "**/gen_*.py"]
    with open(os.path.join(root, ".gitignore"), "w") as fh:
        fh.write("\n".join(patterns) + "\n")
    for a in range(50):
        for b in range(10):
            folder = os.path.join(root, f"pkg{a}", f"sub{b}")
            os.makedirs(folder)
            for c in range(10):
                with open(os.path.join(folder, f"m{c}.py"), "w") as fh:
                    fh.write("x = 1\n")
        with open(os.path.join(root, f"pkg{a}", ".gitignore"), "w") as fh:
            fh.write("gen_x.py\n")


def best_of(runs: int, respect: bool, root: str) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        count = sum(1 for _ in discover([root], lambda p: False, respect_gitignore=respect))
        times.append(time.perf_counter() - start)
    return min(times), count


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        build(root)
        for respect in (False, True):
            seconds, count = best_of(3, respect, root)
            print(f"respect_gitignore={respect}: {count} files in {seconds:.3f} s ({seconds / count * 1e6:.0f} us/file)")


if __name__ == "__main__":
    main()
