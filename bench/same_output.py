"""Does a refactor leave amplint's output unchanged?  Runs the same commands with two
source trees -- ``--before`` (e.g. ``git archive <commit> | tar -x -C /tmp/before``) and
this checkout -- and compares their outputs byte for byte; verify's JSON and HTML after
dropping the run times (``seconds``, the HTML's "N.NN s" cells), which differ run to run.

    python bench/same_output.py --before /tmp/before [--no-verify]

Prints one line per command (same / DIFFERENT) and exits 1 on a difference.  Each
command runs from the tree's own root, so paths in the output are made relative first.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: non-ASCII and astral characters before a fix's edit: the columns' coordinate system
UNICODE = ('import torch\nimport torch.nn as nn\n\n\nclass Attn(nn.Module):\n'
           '    def forward(self, q, k):  # \U0001d538\U0001d565\U0001d565 \u2014 \u00fcn\u00efc\u00f6d\u00e9\n'
           '        s = q @ k.transpose(-1, -2); n = "\U0001f600\U0001f600"; p = s.softmax(-1); m = s.masked_fill(s > 0, -1e9)\n'
           '        t = "\u00e9"; lp = torch.log_softmax(s, dim=-1); v = s.var(-1)\n'
           '        return p, m, n, t, lp, v\n')

CHECK = [
    ("check json", ["check", "--no-cache", "--output-format", "json", "fixtures/"]),
    ("check json -j1", ["check", "--no-cache", "-j", "1", "--output-format", "json", "fixtures/"]),
    ("check sarif", ["check", "--no-cache", "--output-format", "sarif", "fixtures/"]),
    ("check unicode json", ["check", "--no-cache", "--output-format", "json", "{uni}"]),
    ("fix unicode diff", ["fix", "--no-cache", "--unsafe-fixes", "--diff", "{uni}"]),
    ("fix --diff fixtures", ["fix", "--no-cache", "--unsafe-fixes", "--diff", "fixtures/"]),
]
VERIFY = [
    ("verify attention_mask --fix", ["verify", "fixtures/verify/attention_mask.py::example", "--device", "cpu",
                                     "--opt-level", "O1,O2", "--steps", "1", "--fix", "--format", "json"]),
    ("verify einsum_mixer --fix", ["verify", "fixtures/verify/einsum_mixer.py::example", "--device", "cpu",
                                   "--steps", "2", "--fix", "--format", "json"]),
    ("verify handwritten_norm --unsafe-fixes", ["verify", "fixtures/verify/handwritten_norm.py::example", "--device",
                                                "cpu", "--steps", "2", "--fix", "--unsafe-fixes", "--format", "json"]),
]


def _no_times(obj):
    if isinstance(obj, dict):
        return {k: _no_times(v) for k, v in obj.items() if k != "seconds"}
    if isinstance(obj, list):
        return [_no_times(v) for v in obj]
    return obj


def run(tree: str, args: list[str], uni: str) -> str:
    env = dict(os.environ, PYTHONPATH=tree, NO_COLOR="1")
    args = [a.replace("{uni}", uni) for a in args]
    proc = subprocess.run([sys.executable, "-m", "amplint", *args], cwd=tree, env=env, capture_output=True,
                          text=True, encoding="utf-8", errors="surrogateescape")
    out = proc.stdout.replace(tree.rstrip("/") + "/", "")
    if args[0] == "verify":
        out = json.dumps(_no_times(json.loads(out)), indent=1)
    out += f"\n[exit {proc.returncode}]"
    return re.sub(r"<td>[0-9.]+ s</td>", "<td>T</td>", out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="a source tree of amplint to compare with (not this one)")
    parser.add_argument("--no-verify", action="store_true", help="leave out the verify commands (they run models)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="amplint-same-")
    uni = os.path.join(work, "uni", "uni.py")
    os.makedirs(os.path.dirname(uni))
    with open(uni, "w", encoding="utf-8") as fh:
        fh.write(UNICODE)
    failed = 0
    try:
        for name, command in CHECK + ([] if args.no_verify else VERIFY):
            a, b = run(os.path.abspath(args.before), command, uni), run(HERE, command, uni)
            same = a == b
            failed += not same
            print(f"{'same     ' if same else 'DIFFERENT'} {name}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
