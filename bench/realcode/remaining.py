"""Every miss and false positive left on the real-code benchmark, with its cause.

``REMAINING.md`` beside this script holds one line per case that ``run.py`` scores as a
miss (FN) or a false positive (FP)::

    - <corpus id>:<line> <RULE> <FN|FP> -- <the cause>; <why it is not fixed>

This script reads ``run.py --json`` output and says which scored cases have no line (to
explain) and which lines name a case that is no longer scored so (to drop)::

    python bench/realcode/run.py --json /tmp/realcode.json
    python bench/realcode/remaining.py /tmp/realcode.json

Exit 0 when the two agree, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LINE = re.compile(r"^- (?P<id>\S+?):(?P<line>\d+) (?P<rule>AMP\d{3}) (?P<kind>FN|FP) -- \S")


def explained(path: str) -> dict[tuple[str, str], int]:
    """(``id:line:rule``, kind) -> the REMAINING.md line number that explains it."""
    out: dict[tuple[str, str], int] = {}
    with open(path, encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            m = LINE.match(text)
            if m:
                out[(f"{m['id']}:{m['line']}:{m['rule']}", m["kind"])] = n
            elif text.startswith("- "):
                print(f"{os.path.basename(path)}:{n}: not of the form '- id:line RULE FN|FP -- cause'", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="the file `run.py --json` wrote")
    ap.add_argument("--remaining", default=os.path.join(HERE, "REMAINING.md"))
    args = ap.parse_args(argv)
    with open(args.results, encoding="utf-8") as f:
        results = json.load(f)
    scored = {(key, "FN") for key in results["misses"]} | {(key, "FP") for key in results["false_positives"]}
    lines = explained(args.remaining)
    missing = sorted(scored - lines.keys())
    stale = sorted(lines.keys() - scored)
    for key, kind in missing:
        print(f"not explained: {key} {kind}")
    for key, kind in stale:
        print(f"no longer scored {kind}: {key} (REMAINING.md:{lines[(key, kind)]})")
    print(f"{len(scored)} misses and false positives, {len(scored) - len(missing)} explained, "
          f"{len(missing)} not, {len(stale)} stale lines")
    return 1 if missing or stale else 0


if __name__ == "__main__":
    sys.exit(main())
