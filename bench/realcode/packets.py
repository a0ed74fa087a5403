"""Write the blind labelling packets: the cached files of ``corpus/blind-*.jsonl``, split in N.

Each packet lists one file a line (absolute path in the cache, corpus id, target), keeps
every project whole (values cross files within a project) and gets about the same number
of source lines (largest project first, to the lighter packet).

    python bench/realcode/packets.py OUT_DIR [--count 2]     # OUT_DIR/labeller-1.txt ...
    python bench/realcode/packets.py OUT_DIR --count 1 --first 3 --corpus blind-positions \
        --corpus blind-masked --real-paths                  # OUT_DIR/labeller-3.txt: only those files

``--real-paths`` writes the cache's resolved paths (the shared cache, not a path inside a
worktree), so a labeller is not pointed into the repository.

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
    ap.add_argument("--first", type=int, default=1, help="number of the first packet written")
    ap.add_argument("--corpus", action="append", default=[],
                    help="only this blind corpus file, e.g. blind-masked (repeatable)")
    ap.add_argument("--real-paths", action="store_true", help="write resolved paths")
    args = ap.parse_args(argv)
    entries = [e for e in fetch.load_corpus() if e["_corpus"].startswith("blind-")
               and (not args.corpus or e["_corpus"].split(".jsonl:")[0] in args.corpus)]
    if not entries:
        print("no blind corpus entries selected", file=sys.stderr)
        return 1
    where = os.path.realpath if args.real_paths else os.path.abspath
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
    for i, projects in enumerate(packets, args.first):
        files = [e for p in sorted(projects) for e in sorted(by_project[p], key=lambda e: e["id"])]
        with open(os.path.join(args.out_dir, f"labeller-{i}.txt"), "w", encoding="utf-8") as out:
            out.write(f"# labelling packet {i}: {len(files)} files, {len(projects)} projects, {lines[i - args.first]} "
                      "lines. One file a line: absolute path, corpus id, target (fp16 unless named).\n"
                      "# Files of one project are listed together: values cross files within a project.\n")
            for e in files:
                out.write(f"{where(fetch.source_path(e))}\t{e['id']}\ttarget={e.get('target', 'fp16')}\n")
        print(f"labeller-{i}.txt: {len(files)} files, {len(projects)} projects, {lines[i - args.first]} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
