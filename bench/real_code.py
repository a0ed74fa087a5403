"""amplint on real code (issue 9): an installed ``transformers`` (``models/``) and ``timm``.

Source files are all it needs (no torch): install them into a throwaway virtualenv,

    python -m venv /tmp/realcode && /tmp/realcode/bin/pip install --no-deps transformers timm
    python bench/real_code.py --site /tmp/realcode/lib/python3.11/site-packages

or point ``--tree NAME=PATH`` at any folder.  For each tree it runs, through the real CLI:

1. ``amplint check --format json`` (timed): findings per rule and severity;
2. ``amplint fix --diff --unsafe-fixes`` (timed): nothing written, the diff counted;
3. ``amplint fix --unsafe-fixes`` on a copy: every changed file must compile, and a
   second fix must change nothing.

It fails (exit 1) on any internal error (a rule that raised, a fix that produced invalid
code), a fixed file that does not compile, or a second fix that changes something.
Files the interpreter itself cannot parse are counted separately (not amplint's fault).
Writes ``bench/out/real_code.json`` and ``bench/out/real_code_samples.md`` (a few findings
per rule with their source line, for reviewing false positives) and prints a Markdown
summary for ``bench/RESULTS.md``.  Commits none of the linted code.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out")
ERROR_LINE = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<col>\d+): error: (?P<reason>.*)$")


def amplint(args: list[str], cwd: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "amplint", *args], cwd=cwd, capture_output=True, text=True)
    return proc, time.perf_counter() - t0


def errors_of(proc) -> list[dict]:
    out = []
    for line in (proc.stderr + proc.stdout).splitlines():
        m = ERROR_LINE.match(line)
        if m:
            out.append(m.groupdict())
    return out


def classify(errors: list[dict]) -> tuple[list[dict], list[dict]]:
    """(internal errors, input errors): a syntax error in the input is the input's problem."""
    internal = [e for e in errors if "internal error" in e["reason"]]
    other = [e for e in errors if "internal error" not in e["reason"]]
    return internal, other


def count_py(tree: str) -> int:
    return sum(1 for _, _, files in os.walk(tree) for f in files if f.endswith(".py"))


def lint_tree(name: str, tree: str, jobs: str, samples_per_rule: int, rng: random.Random) -> dict:
    files = count_py(tree)
    work = tempfile.mkdtemp(prefix=f"amplint-real-{name}-")
    try:
        # 1. check
        check, t_check = amplint(["check", tree, "--format", "json", "--no-cache", "-j", jobs, "--exit-zero"], cwd=work)
        if check.returncode not in (0, 2):
            raise SystemExit(f"{name}: check exited {check.returncode}:\n{check.stderr[-3000:]}")
        findings = json.loads(check.stdout or "[]")
        internal, input_errors = classify(errors_of(check))
        # 2. fix --diff --unsafe-fixes (writes nothing)
        diff, t_diff = amplint(["fix", tree, "--diff", "--unsafe-fixes", "--no-cache", "-j", jobs, "-q"], cwd=work)
        diff_files = len(re.findall(r"^\+\+\+ ", diff.stdout, flags=re.M))
        d_internal, _ = classify(errors_of(diff))
        # 3. fix --unsafe-fixes on a copy: compile every changed file, then fix again
        copy = os.path.join(work, name)
        shutil.copytree(tree, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        before = _snapshot(copy)
        fix, t_fix = amplint(["fix", copy, "--unsafe-fixes", "--no-cache", "-j", jobs, "-q"], cwd=work)
        f_internal, _ = classify(errors_of(fix))
        after = _snapshot(copy)
        changed = [p for p in after if after[p] != before.get(p)]
        not_compiling = []
        for p in changed:
            try:
                compile(after[p], p, "exec", dont_inherit=True)
            except SyntaxError as exc:
                not_compiling.append(f"{os.path.relpath(p, copy)}:{exc.lineno}: {exc.msg}")
        again, t_again = amplint(["fix", copy, "--unsafe-fixes", "--no-cache", "-j", jobs, "-q"], cwd=work)
        final = _snapshot(copy)
        not_idempotent = [os.path.relpath(p, copy) for p in final if final[p] != after.get(p)]
    finally:
        shutil.rmtree(work, ignore_errors=True)

    per_rule = collections.defaultdict(lambda: {"findings": 0, "files": set(), "severity": collections.Counter(), "fix": collections.Counter()})
    for f in findings:
        r = per_rule[f["code"]]
        r["findings"] += 1
        r["files"].add(f["path"])
        r["severity"][f["severity"]] += 1
        r["fix"][f["fix"]["applicability"] if f["fix"] else "none"] += 1
    samples = {}
    by_rule = collections.defaultdict(list)
    for f in findings:
        by_rule[f["code"]].append(f)
    for code, items in by_rule.items():
        picked = rng.sample(items, min(samples_per_rule, len(items)))
        samples[code] = [dict(f, source=_line(f["path"], f["line"])) for f in sorted(picked, key=lambda f: (f["path"], f["line"]))]
    return {
        "name": name, "tree": tree, "files": files,
        "check_seconds": round(t_check, 2), "fix_diff_seconds": round(t_diff, 2), "fix_seconds": round(t_fix, 2),
        "findings": len(findings),
        "rules": {
            code: {"findings": r["findings"], "files": len(r["files"]), "severity": dict(r["severity"]), "fix": dict(r["fix"])}
            for code, r in sorted(per_rule.items())
        },
        "internal_errors": internal + d_internal + f_internal,
        "input_errors": input_errors,
        "diff_files": diff_files,
        "fixed_files": len(changed),
        "fixed_not_compiling": not_compiling,
        "not_idempotent": not_idempotent,
        "samples": samples,
    }


def _snapshot(tree: str) -> dict[str, bytes]:
    out = {}
    for folder, _, files in os.walk(tree):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(folder, f)
                with open(p, "rb") as fh:
                    out[p] = fh.read()
    return out


def _line(path: str, line: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for i, text in enumerate(fh, 1):
                if i == line:
                    return text.rstrip("\n")
    except OSError:
        pass
    return ""


def markdown(results: list[dict]) -> str:
    lines = []
    for r in results:
        lines.append(f"**{r['name']}** (`{r['tree']}`): {r['files']} files; `check` {r['check_seconds']} s, "
                     f"`fix --diff --unsafe-fixes` {r['fix_diff_seconds']} s, `fix --unsafe-fixes` {r['fix_seconds']} s; "
                     f"{r['findings']} findings; {len(r['internal_errors'])} internal errors; "
                     f"{len(r['input_errors'])} files Python 3.{sys.version_info.minor} cannot read; "
                     f"{r['fixed_files']} files fixed, {len(r['fixed_not_compiling'])} of them not compiling, "
                     f"{len(r['not_idempotent'])} changed by a second fix.\n")
        lines.append("| rule | findings | files | error / warning / info | fix safe / unsafe / display / none |")
        lines.append("|---|---:|---:|---|---|")
        for code, s in r["rules"].items():
            sev = s["severity"]
            fx = s["fix"]
            lines.append(f"| {code} | {s['findings']} | {s['files']} | {sev.get('error', 0)} / {sev.get('warning', 0)} / {sev.get('info', 0)} "
                         f"| {fx.get('safe', 0)} / {fx.get('unsafe', 0)} / {fx.get('display', 0)} / {fx.get('none', 0)} |")
        lines.append("")
    return "\n".join(lines)


def samples_markdown(results: list[dict]) -> str:
    out = ["# Sampled findings on real code (for false-positive review)\n"]
    for r in results:
        out.append(f"## {r['name']}\n")
        for code, items in r["samples"].items():
            out.append(f"### {code} ({r['rules'][code]['findings']} findings)\n")
            for f in items:
                rel = os.path.relpath(f["path"], r["tree"])
                out.append(f"- `{rel}:{f['line']}` [{f['severity']}] {f['message'][:220]}\n  `{f['source'].strip()[:200]}`")
            out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--site", help="a site-packages folder holding transformers and timm")
    p.add_argument("--tree", action="append", default=[], metavar="NAME=PATH", help="another folder to lint")
    p.add_argument("-j", "--jobs", default="0", help="amplint worker processes (default: one per core)")
    p.add_argument("--samples", type=int, default=12, help="findings per rule to sample for review")
    p.add_argument("--out", default=OUT)
    args = p.parse_args(argv)
    trees = []
    if args.site:
        trees += [("transformers/models", os.path.join(args.site, "transformers", "models")), ("timm", os.path.join(args.site, "timm"))]
    for spec in args.tree:
        name, _, path = spec.partition("=")
        trees.append((name, path))
    if not trees:
        p.error("give --site or --tree")
    rng = random.Random(0)
    results = []
    for name, tree in trees:
        if not os.path.isdir(tree):
            p.error(f"{tree}: not a folder")
        print(f"linting {name} ({tree}) ...", file=sys.stderr, flush=True)
        results.append(lint_tree(name.replace("/", "-"), os.path.abspath(tree), args.jobs, args.samples, rng))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "real_code.json"), "w") as fh:
        json.dump(results, fh, indent=2)
    with open(os.path.join(args.out, "real_code_samples.md"), "w") as fh:
        fh.write(samples_markdown(results))
    print(markdown(results))
    bad = False
    for r in results:
        for e in r["internal_errors"][:20]:
            print(f"INTERNAL ERROR {e['path']}:{e['line']}: {e['reason']}", file=sys.stderr)
        for e in r["fixed_not_compiling"][:20]:
            print(f"FIXED FILE DOES NOT COMPILE {r['name']}: {e}", file=sys.stderr)
        for e in r["not_idempotent"][:20]:
            print(f"SECOND FIX CHANGED {r['name']}: {e}", file=sys.stderr)
        bad |= bool(r["internal_errors"] or r["fixed_not_compiling"] or r["not_idempotent"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
