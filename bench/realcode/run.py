"""Score amplint against the hand-written labels of the real-code benchmark.

Reads ``corpus/*.jsonl`` (which file of which pinned distribution, optional ``"target"``)
and ``labels/*.jsonl`` (``blind-*`` and ``adjudicated-*`` included: every file there is
read), and lints each project in its own run with the default settings (target fp16,
opt-level O1, engine auto, device cuda), entries with a ``"target"`` (bf16, fp8) in a
separate run of their project with ``--target``:

    python -m amplint check --format json --no-cache --exit-zero [--target T] FILE...

A ``--config`` with a ``[tool.amplint]`` table holding only ``extend-select =
EXTRA_SELECT`` (the off-by-default rules the benchmark scores, AMP604) keeps this
repository's settings out.

The benchmark is **exhaustive**: every finding on a scored file is judged.  A finding
matches a label when the file and the rule agree and the finding's line is the label's
line, or its span (``line`` .. ``end_line``) covers it, or both lines belong to the same
innermost statement -- unless the finding sits on a line that carries a label of its own
for that rule.  An AMP201 label may name where its value is written
(``"value_at": "<corpus id>:<line>"``): a finding there, or one whose related locations
name the label's line or its ``value_at``, matches too.  Label kinds:

- ``hazard``: reported at any severity -> TP, else FN;
- ``must-not-flag``: reported -> FP;
- ``info-ok``: reported at ``info`` -> counted as info-ok (neither hit nor miss);
  reported as a warning or error -> FP;
- ``reviewed`` (no line, no rule): the labeller read the file; it makes a blind file
  scored even when nothing in it needed a label.

A finding that matches no label is **unjudged**: it counts as an FP, is listed, and makes
``run.py`` exit 1.  A ``blind-*`` corpus project is linted only once some label names one
of its files, so that labels stay blind (written before amplint ever runs on the file).

    python bench/realcode/run.py [--verbose] [--json OUT] [--corpus nlp] [--write-unjudged OUT]

Exit status 0 when every finding is judged, 1 when some are not (or a baseline or
import check fails), 2 when amplint's output cannot be read at all.

No silent regressions: ``--write-baseline FILE`` records which hazard labels amplint
reports, which must-not-flag / info-ok labels it leaves alone (or at info), and which
findings are still unjudged; ``--check-baseline FILE`` exits 1 when any label changed for
the worse or a finding is unjudged that the baseline did not list (a label newly right,
or an unjudged finding gone, is listed so the baseline can be raised).  With
``--check-baseline`` the exit status is that comparison's (and the import check's): the
unjudged findings the baseline lists do not fail it.  The CI test
(``tests/test_realcode.py``) runs ``--check-baseline baseline.json``.

``--check-imports`` (implied by ``--check-baseline``) also runs ``amplint fix --unsafe-fixes
--diff`` over the same runs and exits 1 when a fix would add an import of amplint to a
project that imports neither amplint's nor apex's ``amp`` (AMP501's line-for-line
replacement of ``from apex import amp`` is the one amplint import a fix may write).
"""
from __future__ import annotations

import argparse
import ast
import collections
import concurrent.futures
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

#: rules off by default that the benchmark scores too (selected on top of the defaults)
EXTRA_SELECT = ["AMP604"]
#: label kinds; ``reviewed`` marks a file as read and carries no line or rule
KINDS = ("hazard", "must-not-flag", "info-ok", "reviewed")
#: corpus files whose entries are linted only once a label names them (blind labelling)
BLIND_PREFIX = "blind-"


def load_labels() -> list[dict]:
    """Every ``labels/*.jsonl`` (the authors' files, ``blind-*`` and ``adjudicated-*``)."""
    labels = []
    for path in sorted(glob.glob(os.path.join(HERE, "labels", "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                lab = json.loads(line)
                where = f"{os.path.basename(path)}:{n}"
                if lab.get("label") not in KINDS:
                    raise SystemExit(f"{where}: unknown label kind {lab.get('label')!r} (one of {', '.join(KINDS)})")
                if lab["label"] != "reviewed" and not (isinstance(lab.get("line"), int) and lab.get("rule")):
                    raise SystemExit(f"{where}: a {lab['label']} label needs an integer line and a rule")
                lab["_from"] = where
                labels.append(lab)
    return labels


def corpus_name(entry: dict) -> str:
    return entry["_corpus"].split(".jsonl")[0]


def run_key(entry: dict) -> tuple[str, str]:
    """One lint run per project and target: the project's files together, as its user
    would lint the tree, with the corpus entry's target (default settings otherwise)."""
    return entry["project"], entry.get("target", "")


def run_options(target: str) -> tuple[str, ...]:
    return ("--target", target) if target else ()


def run_amplint(paths: list[str], extra: tuple[str, ...] = ()) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "pyproject.toml")
        with open(config, "w") as f:
            f.write("[tool.amplint]\n" f"extend-select = {json.dumps(EXTRA_SELECT)}\n")
        proc = subprocess.run(
            [sys.executable, "-m", "amplint", "check", "--format", "json", "--no-cache",
             "--exit-zero", "--config", config, *extra, *paths],
            capture_output=True, text=True)
    if proc.stderr.strip():
        print(proc.stderr.strip(), file=sys.stderr)
    try:
        return json.loads(proc.stdout or "[]")
    except json.JSONDecodeError:
        print(f"amplint output is not JSON (exit {proc.returncode}):\n{proc.stdout[:2000]}", file=sys.stderr)
        raise SystemExit(2)


def run_all(groups: dict[tuple[str, str], list[dict]], job) -> dict[tuple[str, str], object]:
    """``job(paths, extra)`` for every run, a few at once (each is its own process)."""
    def one(key):
        paths = list(dict.fromkeys(fetch.source_path(e) for e in groups[key]))
        return job(paths, run_options(key[1]))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(zip(groups, pool.map(one, groups)))


#: an import of amplint, and of apex's amp (which AMP501 replaces by amplint's, line for line)
_AMPLINT_IMPORT = re.compile(r"^\s*(?:from\s+amplint(?:\.[\w.]+)?\s+import\b|import\s+amplint\b)")
_APEX_AMP_IMPORT = re.compile(r"^\s*(?:from\s+apex\s+import\b.*\bamp\b|from\s+apex\.amp\b|import\s+apex\.amp\b)")


def amplint_imports_added(paths: list[str], extra: tuple[str, ...] = ()) -> list[str]:
    """Issue 13: no fix inserts an import of amplint into a project that does not use it.
    Runs ``amplint fix --unsafe-fixes --diff`` over ``paths`` (one project's run, with the
    scoring run's ``extra`` options) and returns ``path: line`` for each added amplint import that is not the AMP501
    replacement of an ``apex`` amp import removed from the same file, in a project (a
    distribution of the cache) that imported neither amplint nor apex's amp."""
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "pyproject.toml")
        with open(config, "w") as f:
            f.write("[tool.amplint]\n" f"extend-select = {json.dumps(EXTRA_SELECT)}\n")
        proc = subprocess.run(
            [sys.executable, "-m", "amplint", "fix", "--unsafe-fixes", "--diff", "--no-cache", "--exit-zero",
             "--config", config, *extra, *paths], capture_output=True, text=True)
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


COLUMNS = ("TP", "FP", "FN", "info-ok", "unjudged", "TN", "TP at info")


def score(groups: dict[tuple[str, str], list[dict]], labels: list[dict],
          findings_of: dict[tuple[str, str], list[dict]]) -> dict:
    """Judge every finding of every run against the labels of the files in that run."""
    entries = [e for group in groups.values() for e in group]
    spans = {e["id"]: statement_of_line(fetch.source_path(e)) for e in entries}
    by_key = collections.defaultdict(list)   # (id, rule) -> findings on that file
    by_point = collections.defaultdict(list)  # (id, line, rule) -> findings naming it as related
    expanded = []
    for key, group in groups.items():
        # one file may sit in two corpora (asteroid's norms.py: vision and positions): its
        # findings count for every id it has in this run
        ids_of = collections.defaultdict(list)
        for e in group:
            if not e.get("lint_only"):
                ids_of[os.path.realpath(fetch.source_path(e))].append(e["id"])
        for f in findings_of[key]:
            for file_id in ids_of.get(os.path.realpath(f["path"]), ()):
                copy = dict(f, id=file_id)
                expanded.append(copy)
                by_key[(file_id, f["code"])].append(copy)
                for rel in f.get("related") or ():
                    for rel_id in ids_of.get(os.path.realpath(rel["path"]), ()):
                        by_point[(rel_id, rel["line"], f["code"])].append(copy)

    labelled_lines = collections.defaultdict(set)  # (id, rule) -> lines that carry a label
    for lab in labels:
        if lab["label"] != "reviewed":
            labelled_lines[(lab["id"], lab["rule"])].add(lab["line"])

    def covers(f: dict, file_id: str, line: int) -> bool:
        if f["line"] == line or f["line"] <= line <= f.get("end_line", f["line"]):
            return True
        if f["line"] in labelled_lines[(file_id, f["code"])]:
            return False  # a finding on a labelled line answers that label, not a neighbour's
        stmt = spans.get(file_id, {}).get(line)
        return stmt is not None and stmt == spans[file_id].get(f["line"])

    def points(lab: dict) -> list[tuple[str, int]]:
        out = [(lab["id"], lab["line"])]
        if lab.get("value_at"):
            where, _, line = lab["value_at"].rpartition(":")
            out.append((where, int(line)))
        return out

    matched = set()
    verdict: dict[int, str] = {}  # finding -> the first label it answers
    rows = collections.defaultdict(collections.Counter)
    misses, false_positives = [], []
    for lab in labels:
        if lab["label"] == "reviewed":
            continue
        rule = lab["rule"]
        hits = {}
        for file_id, line in points(lab):
            for f in by_key.get((file_id, rule), ()):
                if covers(f, file_id, line):
                    hits[id(f)] = f
            for f in by_point.get((file_id, line, rule), ()):
                hits[id(f)] = f
        hits = list(hits.values())
        matched.update(id(f) for f in hits)
        for f in hits:
            verdict.setdefault(id(f), f"{lab['label']} {lab['id']}:{lab['line']}")
        counts = rows[rule]
        if lab["label"] == "hazard":
            if hits:
                counts["TP"] += 1
                counts["TP at info"] += all(f["severity"] == "info" for f in hits)
            else:
                counts["FN"] += 1
                misses.append(lab)
        elif lab["label"] == "info-ok":
            loud = [f for f in hits if f["severity"] != "info"]
            if loud:
                counts["FP"] += 1
                false_positives.append((lab, loud))
            elif hits:
                counts["info-ok"] += 1
        else:
            if hits:
                counts["FP"] += 1
                false_positives.append((lab, hits))
            else:
                counts["TN"] += 1
    unjudged = [f for f in expanded if id(f) not in matched]
    for f in unjudged:
        rows[f["code"]]["unjudged"] += 1
        rows[f["code"]]["FP"] += 1  # exhaustive: output nobody judged is not credited
    table = {}
    total = collections.Counter()
    for rule, c in sorted(rows.items()):
        total.update(c)
        table[rule] = {k: c[k] for k in COLUMNS}
        table[rule]["precision"] = ratio(c["TP"], c["TP"] + c["FP"])
        table[rule]["recall"] = ratio(c["TP"], c["TP"] + c["FN"])
    table["all"] = {k: total[k] for k in COLUMNS}
    table["all"]["precision"] = ratio(total["TP"], total["TP"] + total["FP"])
    table["all"]["recall"] = ratio(total["TP"], total["TP"] + total["FN"])
    return {"table": table, "misses": misses, "false_positives": false_positives,
            "unjudged": unjudged, "findings": expanded,
            "verdicts": [(f, verdict.get(id(f), "UNJUDGED")) for f in expanded]}


def label_key(lab: dict) -> str:
    return f"{lab['id']}:{lab['line']}:{lab['rule']}"


def finding_key(f: dict) -> str:
    return f"{f['id']}:{f['line']}:{f['code']}"


def outcomes(labels: list[dict], result: dict) -> dict[str, list[str]]:
    """The labels amplint gets right today (hazards reported, must-not-flag and info-ok
    lines quiet or at info) and the findings nobody has judged yet."""
    missed = {label_key(m) for m in result["misses"]}
    flagged = {label_key(m) for m, _ in result["false_positives"]}
    scored = [lab for lab in labels if lab["label"] != "reviewed"]
    return {
        "reported": sorted({label_key(lab) for lab in scored
                            if lab["label"] == "hazard" and label_key(lab) not in missed}),
        "quiet": sorted({label_key(lab) for lab in scored
                         if lab["label"] != "hazard" and label_key(lab) not in flagged}),
        "unjudged": sorted({finding_key(f) for f in result["unjudged"]}),
    }


def compare_baseline(path: str, now: dict[str, list[str]], labels: list[dict],
                     scored_ids: set[str]) -> int:
    with open(path, encoding="utf-8") as f:
        before = json.load(f)
    scored = {label_key(lab) for lab in labels if lab["label"] != "reviewed"}
    # a label re-labelled since (with a note saying why) is compared as what it is now
    kind_now = {label_key(lab): "reported" if lab["label"] == "hazard" else "quiet"
                for lab in labels if lab["label"] != "reviewed"}
    worse, better = [], []
    for kind, lost_as in (("reported", "no longer reported"), ("quiet", "now flagged")):
        was = {k for k in set(before.get(kind, ())) & scored if kind_now.get(k) == kind}
        is_ = set(now[kind])
        worse += [f"{key}: {lost_as}" for key in sorted(was - is_)]
        better += [f"{key}: newly {kind}" for key in sorted(is_ - set(before.get(kind, ())))]
    known = set(before.get("unjudged", ()))
    worse += [f"{key}: a finding no label judges" for key in now["unjudged"] if key not in known]
    better += [f"{key}: no longer unjudged" for key in sorted(known - set(now["unjudged"]))
               if key.split(":")[0] in scored_ids]
    for line in better:
        print(f"better than the baseline: {line}")
    for line in worse:
        print(f"REGRESSION: {line}")
    print(f"baseline {path}: {len(worse)} regressions, {len(better)} improvements "
          f"over {len(scored)} labels")
    return 1 if worse else 0


def select_entries(names: list[str], labels: list[dict]) -> tuple[list[dict], list[dict]]:
    """The corpus entries to score (cached, and for a blind corpus already labelled)
    and the blind ones left out because no label names them yet.  A blind project is
    scored whole once a label names any of its files (a size may be written in one file
    and reach a layer in another: the project's files are linted together)."""
    corpus = fetch.load_corpus()
    # only labels on blind files count: transformers has labelled files outside the blind
    # corpus, and they say nothing about its blind ones
    blind_project = {e["id"]: e["project"] for e in corpus if corpus_name(e).startswith(BLIND_PREFIX)}
    labelled = {blind_project[lab["id"]] for lab in labels if lab["id"] in blind_project}
    # a labeller may stop inside a project: its unread files are linted with it (values
    # cross files) but not scored, since nobody judged their lines
    reviewed = {lab["id"] for lab in labels if lab["label"] == "reviewed"}
    chosen, unlabelled_blind = [], []
    for e in corpus:
        if names and corpus_name(e) not in names:
            continue
        if corpus_name(e).startswith(BLIND_PREFIX) and e["project"] not in labelled:
            unlabelled_blind.append(e)
            continue
        if not os.path.isfile(fetch.source_path(e)):
            print(f"not cached (run fetch.py): {e['id']} ({e['dist']}: {e['path']})", file=sys.stderr)
            continue
        if corpus_name(e).startswith(BLIND_PREFIX) and e["id"] not in reviewed:
            e = dict(e, lint_only=True)
        elif e.get("context"):  # a file the scored ones read their values from (a config class)
            e = dict(e, lint_only=True)
        chosen.append(e)
    return chosen, unlabelled_blind


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", action="append", default=[],
                    help="only this corpus file, e.g. nlp or blind-speech (repeatable; default: all)")
    ap.add_argument("--verbose", action="store_true", help="also list every finding with its verdict")
    ap.add_argument("--json", metavar="OUT", help="write the per-rule numbers to OUT")
    ap.add_argument("--write-unjudged", metavar="OUT",
                    help="write each unjudged finding as {id, path, line, rule} (no message, no "
                         "severity: the packet a blind adjudicator labels)")
    ap.add_argument("--write-baseline", metavar="FILE",
                    help="record which labels amplint gets right today and which findings are unjudged")
    ap.add_argument("--check-baseline", metavar="FILE",
                    help="exit 1 when a label recorded in FILE is now wrong or a new finding is "
                         "unjudged (implies --check-imports)")
    ap.add_argument("--check-imports", action="store_true",
                    help="exit 1 when `fix --unsafe-fixes` would add an amplint import to a project that "
                         "imports neither amplint nor apex's amp (issue 13)")
    args = ap.parse_args(argv)

    all_labels = load_labels()
    present, waiting = select_entries(args.corpus, all_labels)
    if waiting:
        print(f"{len(waiting)} blind corpus files not linted: no label names them yet "
              f"(labels are written before amplint runs on a file)")
    present_ids = {e["id"] for e in present if not e.get("lint_only")}
    labels = [lab for lab in all_labels if lab["id"] in present_ids]
    groups: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
    for e in sorted(present, key=lambda e: (e["project"], e["id"])):
        groups[run_key(e)].append(e)
    findings_of = run_all(groups, run_amplint)
    result = score(groups, labels, findings_of)

    projects = {e["project"] for e in present}
    unread = sum(bool(e.get("lint_only")) for e in present)
    context = sum(bool(e.get("context")) for e in present)
    if unread - context:
        print(f"{unread - context} blind files linted with their project but not scored: not reviewed yet")
    if context:
        print(f"{context} context files (corpus/context.jsonl) linted with their project, never scored")
    print(f"{len(present) - unread} files from {len(projects)} projects in {len(groups)} runs, "
          f"{sum(lab['label'] != 'reviewed' for lab in labels)} labels, {len(result['findings'])} findings")
    print()
    print("| rule | TP | FP | FN | info-ok | unjudged (in FP) | precision | recall | TP only at info |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rule, row in result["table"].items():
        print(f"| {rule} | {row['TP']} | {row['FP']} | {row['FN']} | {row['info-ok']} | {row['unjudged']} | "
              f"{fmt(row['precision'])} | {fmt(row['recall'])} | {row['TP at info']} |")
    print()
    print(f"Misses ({len(result['misses'])}):")
    for lab in result["misses"]:
        print(f"  {lab['id']}:{lab['line']} {lab['rule']}: {lab['reason']}")
    print(f"False positives on labelled lines ({len(result['false_positives'])}):")
    for lab, hits in result["false_positives"]:
        print(f"  {lab['id']}:{lab['line']} {lab['rule']} ({lab['label']}): {lab['reason']}")
        for f in hits:
            print(f"      amplint ({f['severity']}): {f['message'][:160]}")
    print(f"Unjudged findings, counted as false positives ({len(result['unjudged'])}):")
    for f in sorted(result["unjudged"], key=lambda f: (f["id"], f["line"], f["code"])):
        print(f"  {f['id']}:{f['line']} {f['code']} ({f['severity']}): {f['message'][:160]}")
    if args.verbose:
        print(f"Every finding with the label it answers ({len(result['findings'])}):")
        for f, v in sorted(result["verdicts"], key=lambda p: (p[0]["id"], p[0]["line"], p[0]["code"])):
            print(f"  {f['id']}:{f['line']} {f['code']} ({f['severity']}): {v}")
    if args.write_unjudged:
        path_of = {e["id"]: os.path.abspath(fetch.source_path(e)) for e in present}
        with open(args.write_unjudged, "w", encoding="utf-8") as out:
            for key in sorted({(f["id"], f["line"], f["code"]) for f in result["unjudged"]}):
                out.write(json.dumps({"id": key[0], "path": path_of[key[0]], "line": key[1], "rule": key[2]}) + "\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"files": len(present), "projects": len(projects), "runs": len(groups),
                       "labels": len(labels), "rules": result["table"],
                       "misses": [label_key(m) for m in result["misses"]],
                       "false_positives": [label_key(m) for m, _ in result["false_positives"]],
                       "unjudged": sorted({finding_key(f) for f in result["unjudged"]})},
                      out, indent=2)
    now = outcomes(labels, result)
    if args.write_baseline:
        with open(args.write_baseline, "w", encoding="utf-8") as out:
            json.dump(now, out, indent=1)
            out.write("\n")
    status = 0
    if args.check_imports or args.check_baseline:
        bad = [line for lines in run_all(groups, amplint_imports_added).values() for line in lines]
        print(f"amplint imports added by `fix --unsafe-fixes` to projects that do not use amplint: {len(bad)}")
        for line in bad:
            print(f"  {line}")
        status = 1 if bad else 0
    if args.check_baseline:
        return max(compare_baseline(args.check_baseline, now, labels, present_ids), status)
    if result["unjudged"]:
        print(f"FAIL: {len(result['unjudged'])} findings on lines with no label for their rule "
              f"(exhaustive benchmark: label them, e.g. by blind adjudication)")
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
