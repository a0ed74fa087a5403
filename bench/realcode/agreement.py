"""Agreement between two blind readers on the same files.

A third reader, given only CATEGORIES.md and the files of ``agreement/sample-3.txt``,
labelled them again (``agreement/labels-3.jsonl``, never scored).  This script compares
that reader's hazards with the scored labels of the same files (``labels/*.jsonl``):
for each rule, how many hazards each reader named, how many the other also called a
hazard (on the same statement, or within ``--slack`` lines), and where they disagree.

    python bench/realcode/agreement.py [--slack 2] [--verbose]

It reads labels only: amplint is not run.
"""
from __future__ import annotations

import argparse
import collections
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def scored_labels(ids: set[str]) -> list[dict]:
    out = []
    folder = os.path.join(HERE, "labels")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".jsonl"):
            out += [lab for lab in read_jsonl(os.path.join(folder, name)) if lab["id"] in ids]
    return out


def hazards(labels: list[dict]) -> dict[tuple[str, str], list[int]]:
    out = collections.defaultdict(list)
    for lab in labels:
        if lab["label"] == "hazard":
            out[(lab["id"], lab["rule"])].append(lab["line"])
    return out


def near(line: int, lines: list[int], slack: int) -> bool:
    return any(abs(line - other) <= slack for other in lines)


def compare(a: list[dict], b: list[dict], slack: int):
    """Per rule: hazards of A, of B, A's found by B, B's found by A; and the disagreements."""
    ha, hb = hazards(a), hazards(b)
    rows = collections.defaultdict(collections.Counter)
    only = []
    for mine, theirs, side in ((ha, hb, "A"), (hb, ha, "B")):
        for (fid, rule), lines in mine.items():
            for line in lines:
                rows[rule][side] += 1
                if near(line, theirs.get((fid, rule), []), slack):
                    rows[rule][f"{side} also by other"] += 1
                else:
                    only.append((side, fid, line, rule))
    return rows, only


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slack", type=int, default=2, help="lines apart that still count as one place")
    ap.add_argument("--verbose", action="store_true", help="list every hazard only one reader named")
    args = ap.parse_args(argv)
    third = read_jsonl(os.path.join(HERE, "agreement", "labels-3.jsonl"))
    ids = {lab["id"] for lab in third if lab["label"] == "reviewed"}
    first = scored_labels(ids)
    rows, only = compare(first, third, args.slack)
    print(f"{len(ids)} files; A = the scored labels (labellers 1 and 2), B = reader 3\n")
    print("| rule | hazards A | of them B agrees | hazards B | of them A agrees |")
    print("|---|---|---|---|---|")
    total = collections.Counter()
    for rule in sorted(rows):
        c = rows[rule]
        total.update(c)
        print(f"| {rule} | {c['A']} | {c['A also by other']} | {c['B']} | {c['B also by other']} |")
    print(f"| all | {total['A']} | {total['A also by other']} | {total['B']} | {total['B also by other']} |")
    if args.verbose:
        print()
        for side, fid, line, rule in sorted(only):
            print(f"  only {side}: {fid}:{line} {rule}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
