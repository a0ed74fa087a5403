"""Score amplint against the hand-written labels of the real-code benchmark.

Reads ``corpus/*.jsonl`` (which file of which pinned distribution) and ``labels/*.jsonl``
(line, rule, ``hazard`` or ``must-not-flag``), runs

    python -m amplint check --format json --no-cache --exit-zero FILE...

once over every cached file (``fetch.py`` downloads them), so that value flow across the
files of one project can work as it would for a user linting the whole tree, with the
default settings (target fp16, opt-level O1, engine auto, device cuda: a ``--config``
with a ``[tool.amplint]`` table holding only ``extend-select = EXTRA_SELECT`` (the off-by-default
rules the benchmark scores, AMP604) keeps this repository's settings out).

A finding matches a label when the file and the rule agree and the finding's line is the
label's line, or its span (``line`` .. ``end_line``) covers it, or both lines belong to the
same innermost statement (a call whose arguments run over several lines) -- unless the
finding sits on a line that carries a label of its own for that rule.  Any severity
counts as a report (AMP301/302/303 findings are ``info`` under O1 where the policy already
upcasts the op).  Per rule it prints TP (hazard reported), FP (must-not-flag reported),
FN (hazard not reported), unlabelled findings, precision TP/(TP+FP) and recall
TP/(TP+FN), then every miss and false positive with its label's reason.

    python bench/realcode/run.py [--verbose] [--json OUT] [--corpus nlp]

Exit status 0 (it measures), 2 when amplint's output cannot be read at all.

No silent regressions: ``--write-baseline FILE`` records which hazard labels amplint
reports and which must-not-flag labels it leaves alone; ``--check-baseline FILE`` exits 1
when any of them changed for the worse on the files that are cached (a label newly
reported or newly quiet for the better is listed, so the baseline can be raised).  The
CI test (``tests/test_realcode.py``) runs ``--check-baseline baseline.json``.

``--check-imports`` (implied by ``--check-baseline``) also runs ``amplint fix --unsafe-fixes
--diff`` over the same files and exits 1 when a fix would add an import of amplint to a
project that imports neither amplint's nor apex's ``amp`` (AMP501's line-for-line
replacement of ``from apex import amp`` is the one amplint import a fix may write).
"""
from __future__ import annotations

import argparse
import ast
import collections
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fetch  # noqa: E402  (the sibling script: corpus loading and cache paths)

RULES = ["AMP101", "AMP102", "AMP103", "AMP201", "AMP301", "AMP302", "AMP303", "AMP401", "AMP501",
         "AMP601", "AMP602", "AMP603", "AMP604"]
#: rules off by default that the benchmark scores too (selected on top of the defaults)
EXTRA_SELECT = ["AMP604"]


def load_labels(names: list[str] | None) -> list[dict]:
    labels = []
    for path in sorted(glob.glob(os.path.join(HERE, "labels", "*.jsonl"))):
        if names and os.path.splitext(os.path.basename(path))[0] not in names:
            continue
        with open(path, encoding="utf-8") as f:
            labels.extend(json.loads(line) for line in f if line.strip())
    return labels


def run_amplint(paths: list[str]) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "pyproject.toml")
        with open(config, "w") as f:
            f.write("[tool.amplint]\n" f"extend-select = {json.dumps(EXTRA_SELECT)}\n")
        proc = subprocess.run(
            [sys.executable, "-m", "amplint", "check", "--format", "json", "--no-cache",
             "--exit-zero", "--config", config, *paths],
            capture_output=True, text=True)
    if proc.stderr.strip():
        print(proc.stderr.strip(), file=sys.stderr)
    try:
        return json.loads(proc.stdout or "[]")
    except json.JSONDecodeError:
        print(f"amplint output is not JSON (exit {proc.returncode}):\n{proc.stdout[:2000]}", file=sys.stderr)
        raise SystemExit(2)


#: an import of amplint, and of apex's amp (which AMP501 replaces by amplint's, line for line)
_AMPLINT_IMPORT = re.compile(r"^\s*(?:from\s+amplint(?:\.[\w.]+)?\s+import\b|import\s+amplint\b)")
_APEX_AMP_IMPORT = re.compile(r"^\s*(?:from\s+apex\s+import\b.*\bamp\b|from\s+apex\.amp\b|import\s+apex\.amp\b)")


def amplint_imports_added(paths: list[str]) -> list[str]:
    """Issue 13: no fix inserts an import of amplint into a project that does not use it.
    Runs ``amplint fix --unsafe-fixes --diff`` over ``paths`` (one process, as the scoring
    run) and returns ``path: line`` for each added amplint import that is not the AMP501
    replacement of an ``apex`` amp import removed from the same file, in a project (a
    distribution of the cache) that imported neither amplint nor apex's amp."""
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "pyproject.toml")
        with open(config, "w") as f:
            f.write("[tool.amplint]\n" f"extend-select = {json.dumps(EXTRA_SELECT)}\n")
        proc = subprocess.run(
            [sys.executable, "-m", "amplint", "fix", "--unsafe-fixes", "--diff", "--no-cache", "--exit-zero",
             "--config", config, *paths], capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        print(proc.stderr.strip(), file=sys.stderr)
        raise SystemExit(2)

    def project(path: str) -> str:
        return os.path.relpath(os.path.abspath(path), fetch.SRC).split(os.sep)[0]

    uses_amp = set()
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            if any(_AMPLINT_IMPORT.match(line) or _APEX_AMP_IMPORT.match(line) for line in f):
                uses_amp.add(project(path))
    added: dict[str, list[str]] = {}
    removed_apex: dict[str, int] = {}
    current = None
    for line in proc.stdout.splitlines():
        if line.startswith("+++ "):
            current = line[4:].strip()
        elif current and line.startswith("+") and _AMPLINT_IMPORT.match(line[1:]):
            added.setdefault(current, []).append(line[1:].strip())
        elif current and line.startswith("-") and not line.startswith("--- ") and _APEX_AMP_IMPORT.match(line[1:]):
            removed_apex[current] = removed_apex.get(current, 0) + 1
    bad = []
    for path, lines in added.items():
        replacing = removed_apex.get(path, 0) if project(path) in uses_amp else 0
        bad.extend(f"{path}: {text}" for text in lines[replacing:])
    return bad


def ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def statement_of_line(path: str) -> dict[int, tuple[int, int]]:
    """Each line -> the (first, last) line of the innermost statement containing it.

    A label sits on one line of a statement that may span several (a call whose arguments
    run over lines); amplint may point at another line of it (the constant, not the call).
    Both name the same statement, so they are compared by statement."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (SyntaxError, UnicodeDecodeError, OSError):
        return {}
    spans = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            first, last = node.lineno, node.end_lineno or node.lineno
            for line in range(first, last + 1):
                old = spans.get(line)
                if old is None or (last - first) < (old[1] - old[0]):
                    spans[line] = (first, last)
    return spans


def score(entries: list[dict], labels: list[dict], findings: list[dict]) -> dict:
    # one file may sit in two corpora (asteroid's norms.py: vision and positions): its
    # findings count for every id it has
    ids_of = collections.defaultdict(list)
    for e in entries:
        ids_of[os.path.realpath(fetch.source_path(e))].append(e["id"])
    spans = {e["id"]: statement_of_line(fetch.source_path(e)) for e in entries}
    by_key = collections.defaultdict(list)  # (id, rule) -> findings
    expanded = []
    for f in findings:
        for file_id in ids_of.get(os.path.realpath(f["path"]), ()):
            copy = dict(f, id=file_id)
            expanded.append(copy)
            by_key[(file_id, f["code"])].append(copy)
    findings[:] = expanded

    labelled_lines = collections.defaultdict(set)  # (id, rule) -> lines that carry a label
    for lab in labels:
        labelled_lines[(lab["id"], lab["rule"])].add(lab["line"])

    def covers(f: dict, file_id: str, line: int) -> bool:
        if f["line"] == line or f["line"] <= line <= f.get("end_line", f["line"]):
            return True
        if f["line"] in labelled_lines[(file_id, f["code"])]:
            return False  # a finding on a labelled line answers that label, not a neighbour's
        stmt = spans[file_id].get(line)
        return stmt is not None and stmt == spans[file_id].get(f["line"])

    matched = set()
    rows = {r: collections.Counter() for r in RULES}
    misses, false_positives = [], []
    for lab in labels:
        hits = [f for f in by_key.get((lab["id"], lab["rule"]), []) if covers(f, lab["id"], lab["line"])]
        matched.update(id(f) for f in hits)
        counts = rows.setdefault(lab["rule"], collections.Counter())
        if lab["label"] == "hazard":
            if hits:
                counts["TP"] += 1
                counts["TP at info"] += all(f["severity"] == "info" for f in hits)
            else:
                counts["FN"] += 1
                misses.append(lab)
        else:
            if hits:
                counts["FP"] += 1
                false_positives.append((lab, hits))
            else:
                counts["TN"] += 1
    unlabelled = [f for f in findings if "id" in f and id(f) not in matched]
    for f in unlabelled:
        rows.setdefault(f["code"], collections.Counter())["unlabelled"] += 1
    table = {}
    for rule, c in sorted(rows.items()):
        table[rule] = {k: c[k] for k in ("TP", "FP", "FN", "TN", "TP at info", "unlabelled")}
        table[rule]["precision"] = ratio(c["TP"], c["TP"] + c["FP"])
        table[rule]["recall"] = ratio(c["TP"], c["TP"] + c["FN"])
    total = collections.Counter()
    for c in rows.values():
        total.update(c)
    table["all"] = {k: total[k] for k in ("TP", "FP", "FN", "TN", "TP at info", "unlabelled")}
    table["all"]["precision"] = ratio(total["TP"], total["TP"] + total["FP"])
    table["all"]["recall"] = ratio(total["TP"], total["TP"] + total["FN"])
    return {"table": table, "misses": misses, "false_positives": false_positives, "unlabelled": unlabelled}


def label_key(lab: dict) -> str:
    return f"{lab['id']}:{lab['line']}:{lab['rule']}"


def outcomes(labels: list[dict], result: dict) -> dict[str, list[str]]:
    """The labels amplint gets right today: hazards reported, must-not-flags left quiet."""
    missed = {label_key(m) for m in result["misses"]}
    flagged = {label_key(m) for m, _ in result["false_positives"]}
    return {
        "reported": sorted(label_key(lab) for lab in labels
                           if lab["label"] == "hazard" and label_key(lab) not in missed),
        "quiet": sorted(label_key(lab) for lab in labels
                        if lab["label"] != "hazard" and label_key(lab) not in flagged),
    }


def compare_baseline(path: str, now: dict[str, list[str]], labels: list[dict]) -> int:
    with open(path, encoding="utf-8") as f:
        before = json.load(f)
    scored = {label_key(lab) for lab in labels}  # only the files cached in this run
    # a label re-labelled since (with a note saying why) is compared as what it is now
    kind_now = {label_key(lab): "reported" if lab["label"] == "hazard" else "quiet" for lab in labels}
    worse, better = [], []
    for kind, lost_as in (("reported", "no longer reported"), ("quiet", "now flagged")):
        was = {k for k in set(before[kind]) & scored if kind_now.get(k) == kind}
        is_ = set(now[kind])
        worse += [f"{key}: {lost_as}" for key in sorted(was - is_)]
        better += [f"{key}: newly {kind}" for key in sorted(is_ - set(before[kind]))]
    for line in better:
        print(f"better than the baseline: {line}")
    for line in worse:
        print(f"REGRESSION: {line}")
    print(f"baseline {path}: {len(worse)} regressions, {len(better)} improvements "
          f"over {len(scored)} labels")
    return 1 if worse else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", action="append", default=[],
                    help="only this corpus/labels name, e.g. nlp (repeatable; default: all)")
    ap.add_argument("--verbose", action="store_true", help="list the unlabelled findings too")
    ap.add_argument("--json", metavar="OUT", help="write the per-rule numbers to OUT")
    ap.add_argument("--write-baseline", metavar="FILE",
                    help="record which labels amplint gets right today")
    ap.add_argument("--check-baseline", metavar="FILE",
                    help="exit 1 when a label recorded in FILE is now wrong (implies --check-imports)")
    ap.add_argument("--check-imports", action="store_true",
                    help="exit 1 when `fix --unsafe-fixes` would add an amplint import to a project that "
                         "imports neither amplint nor apex's amp (issue 13)")
    args = ap.parse_args(argv)

    entries = [e for e in fetch.load_corpus()
               if not args.corpus or e["_corpus"].split(".jsonl")[0] in args.corpus]
    present = [e for e in entries if os.path.isfile(fetch.source_path(e))]
    absent = [e for e in entries if e not in present]
    for e in absent:
        print(f"not cached (run fetch.py): {e['id']} ({e['dist']}: {e['path']})", file=sys.stderr)
    present_ids = {e["id"] for e in present}
    labels = [lab for lab in load_labels(args.corpus) if lab["id"] in present_ids]
    # Group each project's files together in the one run (order only; one process).
    present.sort(key=lambda e: (e["project"], e["id"]))
    findings = run_amplint(list(dict.fromkeys(fetch.source_path(e) for e in present)))
    result = score(present, labels, findings)

    projects = {e["project"] for e in present}
    print(f"{len(present)} files from {len(projects)} projects, {len(labels)} labels, "
          f"{sum(1 for f in findings if 'id' in f)} findings")
    print()
    print("| rule | TP | FP | FN | unlabelled | precision | recall | TP only at info |")
    print("|---|---|---|---|---|---|---|---|")
    for rule, row in result["table"].items():
        print(f"| {rule} | {row['TP']} | {row['FP']} | {row['FN']} | {row['unlabelled']} | "
              f"{fmt(row['precision'])} | {fmt(row['recall'])} | {row['TP at info']} |")
    print()
    print(f"Misses ({len(result['misses'])}):")
    for lab in result["misses"]:
        print(f"  {lab['id']}:{lab['line']} {lab['rule']}: {lab['reason']}")
    print(f"False positives ({len(result['false_positives'])}):")
    for lab, hits in result["false_positives"]:
        print(f"  {lab['id']}:{lab['line']} {lab['rule']}: {lab['reason']}")
        for f in hits:
            print(f"      amplint ({f['severity']}): {f['message'][:160]}")
    if args.verbose:
        print(f"Unlabelled findings ({len(result['unlabelled'])}):")
        for f in sorted(result["unlabelled"], key=lambda f: (f["id"], f["line"], f["code"])):
            print(f"  {f['id']}:{f['line']} {f['code']} ({f['severity']}): {f['message'][:160]}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"files": len(present), "projects": len(projects), "labels": len(labels),
                       "rules": result["table"],
                       "misses": [f"{m['id']}:{m['line']}:{m['rule']}" for m in result["misses"]],
                       "false_positives": [f"{m['id']}:{m['line']}:{m['rule']}"
                                           for m, _ in result["false_positives"]]},
                      out, indent=2)
    now = outcomes(labels, result)
    if args.write_baseline:
        with open(args.write_baseline, "w", encoding="utf-8") as out:
            json.dump(now, out, indent=1)
            out.write("\n")
    status = 0
    if args.check_imports or args.check_baseline:
        bad = amplint_imports_added(list(dict.fromkeys(fetch.source_path(e) for e in present)))
        print(f"amplint imports added by `fix --unsafe-fixes` to projects that do not use amplint: {len(bad)}")
        for line in bad:
            print(f"  {line}")
        status = 1 if bad else 0
    if args.check_baseline:
        return max(compare_baseline(args.check_baseline, now, labels), status)
    return status


if __name__ == "__main__":
    sys.exit(main())
