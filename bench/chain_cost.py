"""Cost of helper chains and alias chains (issue 29 §6; adversarial report N76, N77):
``amplint check --no-cache`` on a file with a chain of ``n`` helpers
(``def h{i}(s, m, v): return h{i+1}(s, m, v)``, the last one filling with ``v``, a
module's ``forward`` calling ``h0(s, m, -1e9)``) and on one with ``n`` aliases
(``K0 = 1e9; K1 = K0; ...``, then ``masked_fill(m, -K{n-1})``), for n from 1,000 to
10,000.  The time must grow linearly: the script fails (exit 1) when the 10x longer
chain costs more than 20x the time of the shortest (start-up included).

Usage::

    .venv/bin/python bench/chain_cost.py [--sizes 1000 2500 5000 10000]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time


def helpers(n: int) -> str:
    out = ["import torch\n"]
    out += [f"def h{i}(s, m, v):\n    return h{i + 1}(s, m, v)\n" for i in range(n)]
    out.append(f"def h{n}(s, m, v):\n    return s.masked_fill(m, v)\n")
    out.append("class M(torch.nn.Module):\n    def forward(self, s, m):\n        return h0(s, m, -1e9)\n")
    return "".join(out)


def aliases(n: int) -> str:
    out = ["import torch\nK0 = 1e9\n"]
    out += [f"K{i} = K{i - 1}\n" for i in range(1, n)]
    out.append(f"class M(torch.nn.Module):\n    def forward(self, s, m):\n        return s.masked_fill(m, -K{n - 1})\n")
    return "".join(out)


def timed(folder: str, name: str, text: str) -> tuple[float, int]:
    path = os.path.join(folder, name)
    with open(path, "w") as fh:
        fh.write(text)
    script = shutil.which("amplint", path=os.path.dirname(sys.executable))
    started = time.perf_counter()
    proc = subprocess.run([script, "check", "--no-cache", "--format", "concise", path], capture_output=True, text=True,
                          cwd=folder, timeout=1200)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return time.perf_counter() - started, proc.stdout.count(" AMP101 ")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2500, 5000, 10000])
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as folder:
        for kind, make in (("helpers", helpers), ("aliases", aliases)):
            times = []
            for n in args.sizes:
                seconds, found = timed(folder, f"{kind}{n}.py", make(n))
                times.append(seconds)
                print(f"{kind:8} n={n:6}: {seconds:7.2f} s, {found} AMP101 findings")
            growth = times[-1] / times[0]
            size = args.sizes[-1] / args.sizes[0]
            print(f"{kind:8} time x{growth:.1f} for size x{size:.0f}")
            ok = ok and growth <= 2 * size
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
