"""Write the blind labelling packets: the cached files of ``corpus/blind-*.jsonl``, split in N.

Each packet lists one file a line (absolute path in the cache, corpus id, target), keeps
every project whole (values cross files within a project) and gets about the same number
of source lines (largest project first, to the lighter packet).

    python bench/realcode/packets.py OUT_DIR [--count 2]     # OUT_DIR/labeller-1.txt ...

Exit 1 when a listed file is not in the cache (run fetch.py first).
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fetch  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--count", type=int, default=2)
    args = ap.parse_args(argv)
    entries = [e for e in fetch.load_corpus() if e["_corpus"].startswith("blind-")]
    missing = [e for e in entries if not os.path.isfile(fetch.source_path(e))]
    for e in missing:
        print(f"not cached: {e['id']} ({e['dist']}: {e['path']})", file=sys.stderr)
    if missing:
        return 1
    by_project = collections.defaultdict(list)
    for e in entries:
        by_project[e["project"]].append(e)
    size = {p: sum(sum(1 for _ in open(fetch.source_path(e), "rb")) for e in es)
            for p, es in by_project.items()}
    packets = [[] for _ in range(args.count)]
    lines = [0] * args.count
    for project in sorted(size, key=lambda p: (-size[p], p)):
        i = lines.index(min(lines))
        packets[i].append(project)
        lines[i] += size[project]
    os.makedirs(args.out_dir, exist_ok=True)
    for i, projects in enumerate(packets, 1):
        files = [e for p in sorted(projects) for e in sorted(by_project[p], key=lambda e: e["id"])]
        with open(os.path.join(args.out_dir, f"labeller-{i}.txt"), "w", encoding="utf-8") as out:
            out.write(f"# labelling packet {i}: {len(files)} files, {len(projects)} projects, {lines[i - 1]} "
                      "lines. One file a line: absolute path, corpus id, target (fp16 unless named).\n"
                      "# Files of one project are listed together: values cross files within a project.\n")
            for e in files:
                out.write(f"{os.path.abspath(fetch.source_path(e))}\t{e['id']}\ttarget={e.get('target', 'fp16')}\n")
        print(f"labeller-{i}.txt: {len(files)} files, {len(projects)} projects, {lines[i - 1]} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
