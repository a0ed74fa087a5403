"""amplint against what maintainers did (issue 13, section 3).

Each line of ``cases.jsonl`` names a public commit (``repo``, ``commit``, ``parent``) or a
PyPI release pair (``dist_before`` / ``dist_after``) whose change fixed an fp16/AMP overflow,
underflow or NaN in model code, the file it touched (``path``), the hazard lines at the parent,
the amplint rules that should catch it, and what the maintainers did.  For each case this script

1. materialises the parent file and the fixed file into ``bench/maintainer_fixes/.cache/``
   (ignored): from a git mirror (``git show <rev>:<path>``; ``--mirror-root``, default
   ``/work/.mirror``, holding ``<owner>+<name>/repo``), else from the PyPI wheels
   (``pip download --no-deps``);
2. runs ``amplint check --format json --no-cache`` and ``amplint fix --unsafe-fixes --diff``
   on a copy of the parent file, and ``amplint fix --unsafe-fixes`` on another copy;
3. compares: was the hazard found (a finding of an expected rule on a hazard line), which old
   lines our fix touches near the hazard and in the whole file, which lines theirs touches,
   and the fp32 behaviour of both fixes;
4. where the case has a ``probe`` (a small class or function that builds without the
   project's other dependencies), executes the parent, our fixed and their fixed definition
   on the same fp32 input and reports ``torch.equal``; and, on an input built to break fp16
   (values of a few hundred, or zeros), whether each version's half output matches its own fp32
   output (``ok``), is not finite (``inf/nan``) or is finite but wrong.

Our fp32 verdict is read from the fix we applied: a fix that only changes a numeric literal
changes fp32 results; an upcast (``dtype=torch.float32``, ``.float()`` ... cast back), a
dtype-guarded constant, or a ``finfo`` fill before a softmax keeps them.  A probe that ran
overrides the reading with the measured result.  Their verdict is the hand-written one in
``cases.jsonl`` (reasoned from their diff), also overridden by a probe.

Prints a Markdown table for ``bench/RESULTS.md`` and writes ``bench/out/maintainer_fixes.json``.
Commits no third-party source: the cache is ignored.

    python bench/maintainer_fixes/run.py [--mirror-root DIR] [--only ID] [--no-probe] [--show-diff]
"""
from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CACHE = os.path.join(HERE, ".cache")
OUT = os.path.join(ROOT, "bench", "out")

# An applied fix whose new text contains one of these keeps the fp32 computation: it upcasts and
# casts back, or picks the half-safe value only when the tensor is not fp32.
_UPCAST = re.compile(r"dtype\s*=\s*torch\.float32|\.float\(\)|torch\.float32|\.type_as\(|finfo\(")
# `eps if x.dtype != torch.float16 else 1e-4`: the new value only where x is fp16
_HALF_GUARD = re.compile(r"\.dtype\s*!=\s*torch\.(?:float16|half)\s+else\b")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|(?<![\w.])\.\d+(?:[eE][-+]?\d+)?")


def load_cases(only: str | None) -> list[dict]:
    with open(os.path.join(HERE, "cases.jsonl")) as fh:
        cases = [json.loads(line) for line in fh if line.strip()]
    return [c for c in cases if only is None or c["id"] == only]


# --- materialising sources -------------------------------------------------------------------

def _git_show(mirror: str, rev: str, path: str) -> str:
    return subprocess.run(["git", "-C", mirror, "show", f"{rev}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def _wheel_member(dist: str, path: str) -> str:
    """The text of ``path`` inside the wheel of ``dist`` (``name==version``), downloaded once."""
    wheels = os.path.join(CACHE, "dists")
    os.makedirs(wheels, exist_ok=True)
    name, version = dist.split("==")
    stem = f"{name.replace('-', '_')}-{version}-"
    found = [f for f in os.listdir(wheels) if f.lower().startswith(stem.lower()) and f.endswith(".whl")]
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                        "-q", dist, "-d", wheels], check=True, capture_output=True, text=True)
        found = [f for f in os.listdir(wheels) if f.lower().startswith(stem.lower()) and f.endswith(".whl")]
    with zipfile.ZipFile(os.path.join(wheels, found[0])) as zf:
        return zf.read(path).decode()


def materialise(case: dict, mirror_root: str) -> tuple[str, str, str]:
    """(parent file, fixed file, where they came from), cached under ``.cache/<id>/``."""
    folder = os.path.join(CACHE, case["id"])
    before, after = os.path.join(folder, "before.py"), os.path.join(folder, "after.py")
    source_file = os.path.join(folder, "source.txt")
    if os.path.exists(before) and os.path.exists(after) and os.path.exists(source_file):
        with open(source_file) as fh:
            return before, after, fh.read()
    os.makedirs(folder, exist_ok=True)
    mirror = os.path.join(mirror_root, case["repo"].replace("/", "+"), "repo")
    if "commit" in case and os.path.isdir(mirror):
        texts = (_git_show(mirror, case["parent"], case["path"]), _git_show(mirror, case["commit"], case["path"]))
        source = f"git {mirror}"
    elif "dist_before" in case:
        texts = (_wheel_member(case["dist_before"], case["path"]), _wheel_member(case["dist_after"], case["path"]))
        source = f"pypi {case['dist_before']} / {case['dist_after']}"
    else:
        raise FileNotFoundError(f"no git mirror at {mirror} and no PyPI pair recorded")
    for dest, text in zip((before, after), texts):
        with open(dest, "w") as fh:
            fh.write(text)
    with open(source_file, "w") as fh:
        fh.write(source)
    return before, after, source


# --- amplint ---------------------------------------------------------------------------------

def amplint(args: list[str], cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amplint", *args], cwd=cwd, capture_output=True, text=True)


def runs_with(case: dict, mirror_root: str, work: str) -> list[str]:
    """The project's own code that runs the model (``runs_with`` in cases.jsonl: a file of the
    same repository at the parent commit, e.g. diffusers' fp16 pipeline test), copied beside the
    hazard file so that engine detection reads how the project runs it (a script in the
    model's folder or above applies to it); their names in ``work``."""
    names = []
    mirror = os.path.join(mirror_root, case["repo"].replace("/", "+"), "repo")
    for entry in case.get("runs_with", ()):
        name = "runs_with_" + os.path.basename(entry["path"])
        with open(os.path.join(work, name), "w") as fh:
            fh.write(_git_show(mirror, case["parent"], entry["path"]))
        names.append(name)
    return names


def run_amplint(case: dict, before: str, mirror_root: str) -> tuple[list[dict], str, str]:
    """(findings of ``check``, ``fix --unsafe-fixes --diff`` output, text after ``fix --unsafe-fixes``)."""
    work = os.path.join(CACHE, case["id"], "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    name = os.path.basename(case["path"])
    target = os.path.join(work, name)
    shutil.copy(before, target)
    context = runs_with(case, mirror_root, work)
    check = amplint(["check", "--format", "json", "--no-cache", name, *context], work)
    findings = [f for f in json.loads(check.stdout or "[]") if os.path.basename(f["path"]) == name]
    diff = amplint(["fix", "--unsafe-fixes", "--diff", "--no-cache", name, *context], work).stdout
    amplint(["fix", "--unsafe-fixes", "--no-cache", name, *context], work)
    with open(target) as fh:
        fixed = fh.read()
    return findings, diff, fixed


# --- comparing -------------------------------------------------------------------------------

def changed_old_lines(old: str, new: str) -> dict[int, str]:
    """Old-file line numbers a change touches, each with the new text that replaces its block
    (an insertion is charged to the old line it follows)."""
    a, b = old.splitlines(), new.splitlines()
    touched: dict[int, str] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        replacement = "\n".join(b[j1:j2])
        for line in (range(i1 + 1, i2 + 1) if i2 > i1 else [max(i1, 1)]):
            touched[line] = replacement
    return touched


def only_numbers_changed(old_line: str, new_text: str) -> bool:
    return _NUMBER.sub("N", old_line.strip()) == _NUMBER.sub("N", new_text.strip()) and old_line.strip() != new_text.strip()


def ranges(lines) -> str:
    lines = sorted(set(lines))
    if not lines:
        return "-"
    out, start, prev = [], lines[0], lines[0]
    for n in lines[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ",".join(out)


def our_fp32_reading(old_lines: list[str], ours: dict[int, str], relevant: set[int]) -> str:
    if not relevant:
        return "no fix"
    verdicts = []
    for line in sorted(relevant):
        new_text = ours[line]
        if only_numbers_changed(old_lines[line - 1], new_text):
            verdicts.append("changes")
        elif _UPCAST.search(new_text) or "dtype ==" in new_text or _HALF_GUARD.search(new_text):
            verdicts.append("identical")
        else:
            verdicts.append("unclear")
    for verdict in ("changes", "unclear"):
        if verdict in verdicts:
            return verdict
    return "identical"


# --- probes ----------------------------------------------------------------------------------

def _definitions(text: str, names: list[str], namespace: dict) -> dict:
    tree = ast.parse(text)
    wanted = [node for node in tree.body
              if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names]
    missing = set(names) - {node.name for node in wanted}
    if missing:
        raise LookupError(f"not defined: {', '.join(sorted(missing))}")
    exec(compile(ast.Module(body=wanted, type_ignores=[]), "<probe>", "exec"), namespace)
    return namespace


def _probe_one(text: str, probe: dict, dtype, stress: bool):
    import math
    from functools import partial

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    namespace = {"torch": torch, "nn": nn, "F": F, "math": math, "partial": partial,
                 "einsum": torch.einsum, "Tensor": torch.Tensor, "Module": nn.Module}
    for stub in probe.get("stubs", []):
        namespace[stub] = lambda *args, **kwargs: None
    _definitions(text, probe["defs"], namespace)
    torch.manual_seed(0)
    if stress:
        x = eval(probe.get("stress_expr", f"torch.randn({probe['input']}) * 300"), namespace)
    else:
        x = eval(probe.get("input_expr", f"torch.randn({probe['input']})"), namespace)
    if "build" in probe:
        module = eval(probe["build"], namespace)
        # the same parameter values in every version that has a parameter of that name
        for name, param in module.named_parameters():
            gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
            with torch.no_grad():
                param.copy_(1 + 0.1 * torch.randn(param.shape, generator=gen))
        module = module.to(dtype)
        with torch.no_grad():
            return module(x.to(dtype))
    return namespace[probe["call"]](x.to(dtype))


def probe_case(case: dict, before: str, ours: str, theirs: str) -> dict:
    """fp32: is each fixed version torch.equal to the parent?  fp16 stress: does its half output match its fp32 output?"""
    import torch

    result: dict = {}
    try:
        reference = _probe_one(before, case["probe"], torch.float32, stress=False)
    except Exception as exc:  # a probe that cannot build says so; it never hides a case
        return {"error": f"parent: {type(exc).__name__}: {exc}"}
    result["parent_half"] = _half_verdict(before, case["probe"])
    for label, text in (("ours", ours), ("theirs", theirs)):
        try:
            out = _probe_one(text, case["probe"], torch.float32, stress=False)
        except Exception as exc:
            result[label] = f"not run ({type(exc).__name__}: {exc})"
            continue
        if torch.equal(out, reference):
            result[label] = "identical"
        else:
            result[label] = f"changes (max |diff| {(out - reference).abs().max().item():.3g})"
        result[f"{label}_half"] = _half_verdict(text, case["probe"])
    return result


def _half_verdict(text: str, probe: dict) -> str:
    """The version's fp16 output on the stress input against its own fp32 output on it:
    ``ok``, ``inf/nan``, or ``wrong`` (finite but off by more than 5% of the output's scale)."""
    import torch

    try:
        half = _probe_one(text, probe, torch.float16, stress=True).float()
        full = _probe_one(text, probe, torch.float32, stress=True)
    except Exception as exc:
        return f"error ({type(exc).__name__})"
    if not torch.isfinite(half).all():
        return "inf/nan"
    err = (half - full).abs().max().item()
    return "ok" if err <= 0.05 * full.abs().max().item() + 1e-2 else f"wrong ({err:.2g})"


# --- main ------------------------------------------------------------------------------------

def evaluate(case: dict, mirror_root: str, probe: bool) -> dict:
    before, after, source = materialise(case, mirror_root)
    with open(before) as fh:
        old = fh.read()
    with open(after) as fh:
        theirs_text = fh.read()
    findings, diff, ours_text = run_amplint(case, before, mirror_root)
    old_lines = old.splitlines()
    hazard = set(case["hazard_lines"])

    on_hazard = [f for f in findings if f["line"] in hazard]
    expected = [f for f in on_hazard if f["code"] in case["rules"]]
    found = "yes" if expected else ("other rule" if on_hazard else "no")
    # the lines where the overflow itself happens, when the expected finding sits downstream of it
    # (the softmax after an overflowing matmul)
    core = case.get("core_lines", [])
    if expected and core and not any(f["line"] in core for f in findings):
        found = f"partial (not flagged: {ranges(core)})"

    ours = changed_old_lines(old, ours_text)
    # our edits that belong to this hazard: on a hazard line or on a definition a finding on a
    # hazard line points to (the default argument an eps fix raises)
    near = set(hazard)
    for f in on_hazard:
        near.update(r["line"] for r in f.get("related", []) if os.path.basename(r["path"]) == os.path.basename(case["path"]))
    relevant = {line for line in ours if line in near}

    theirs = changed_old_lines(old, theirs_text)
    if "region" in case:
        lo, hi = case["region"]
        theirs = {line: text for line, text in theirs.items() if lo <= line <= hi}

    row = {
        "id": case["id"], "repo": case["repo"],
        "rev": case.get("commit", "")[:10] or f"{case['dist_before']} -> {case['dist_after'].split('==')[1]}",
        "source": source, "hazard": case["hazard"], "rules": case["rules"], "found": found,
        "findings": [f"{f['code']}@{f['line']}" for f in on_hazard],
        "ours_lines": sorted(relevant), "ours_total": len(ours), "theirs_lines": sorted(theirs),
        "overlap": sorted(set(relevant) & set(theirs)),
        "ours_fp32": our_fp32_reading(old_lines, ours, relevant), "ours_fp32_how": "read",
        "theirs_fp32": case["their_fp32"], "theirs_fp32_how": "read",
        # the hazard fix alone, without unrelated edits made in the same commit
        "theirs_fix_fp32": case.get("their_fix_fp32", case["their_fp32"]),
        "inserts_amplint_import": "from amplint import" in ours_text and "from amplint import" not in old,
        "diff": diff,
    }
    if probe and "probe" in case:
        measured = probe_case(case, old, ours_text, theirs_text)
        row["probe"] = measured
        for side in ("ours", "theirs"):
            verdict = measured.get(side, "")
            if verdict.startswith(("identical", "changes")) and not (side == "ours" and not relevant):
                row[f"{side}_fp32"] = verdict.split(" (")[0]
                row[f"{side}_fp32_how"] = "run"
    return row


def table(rows: list[dict]) -> str:
    head = ("| case | repo @ commit | hazard found? (rule@line on hazard lines) | lines: ours near hazard / ours in file | lines: theirs | "
            "fp32: ours | fp32: theirs (commit; hazard fix alone) | fp16 stress (parent / ours / theirs) |")
    out = [head, "|" + "---|" * 8]
    for r in rows:
        found = r["found"] + (f" ({', '.join(r['findings'])})" if r["findings"] else "")
        probe = r.get("probe", {})
        stress = "-"
        if "parent_half" in probe:
            stress = " / ".join(str(probe.get(k, "-")) for k in ("parent_half", "ours_half", "theirs_half"))
        elif "error" in probe:
            stress = f"probe error: {probe['error']}"
        out.append(
            f"| {r['id']} | {r['repo']} @ {r['rev']} | {found} | {ranges(r['ours_lines'])} / {r['ours_total']} | "
            f"{ranges(r['theirs_lines'])} | {r['ours_fp32']} ({r['ours_fp32_how']}) | {r['theirs_fp32']} ({r['theirs_fp32_how']}; {r['theirs_fix_fp32']}) | {stress} |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror-root", default="/work/.mirror")
    parser.add_argument("--only", help="run one case id")
    parser.add_argument("--no-probe", action="store_true", help="do not execute probes (no torch needed)")
    parser.add_argument("--show-diff", action="store_true", help="print our diff for each case")
    args = parser.parse_args()
    rows = []
    for case in load_cases(args.only):
        try:
            rows.append(evaluate(case, args.mirror_root, probe=not args.no_probe))
        except (FileNotFoundError, subprocess.CalledProcessError) as exc:
            print(f"{case['id']}: error: cannot materialise: {exc}", file=sys.stderr)
            continue
        if args.show_diff:
            print(f"### {case['id']}\n{rows[-1]['diff']}")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "maintainer_fixes.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    print(table(rows))
    found = sum(r["found"] == "yes" for r in rows)
    partial = sum(r["found"].startswith("partial") for r in rows)
    keeps = [r for r in rows if r["theirs_fix_fp32"].startswith("identical")]
    ours_keeps = sum(r["ours_fp32"] == "identical" for r in keeps)
    print(f"\nhazard found (expected rule on a hazard line): {found}/{len(rows)} fully, {partial} partly; "
          f"their hazard fix keeps fp32 in {len(keeps)}, ours keeps it in {ours_keeps} of those "
          f"({sum(r['ours_fp32'] == 'no fix' for r in keeps)} no fix, {sum(r['ours_fp32'] == 'changes' for r in keeps)} changes); "
          f"our fix inserts an amplint import in {sum(r['inserts_amplint_import'] for r in rows)}/{len(rows)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
