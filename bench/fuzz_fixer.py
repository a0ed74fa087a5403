"""Fix-safety fuzzing (issue 9), the long version; ``tests/test_fuzz.py`` runs a bounded one.

Generated Python (hypothesmith) and mutated corpus fixtures go through
``amplint.engine.lint_text`` and ``fix_text`` with unsafe fixes, under several settings.
For every input:

* no rule raises (an internal error is a failure), no fix produces code that does not
  parse (the engine would revert it and report an internal error: also a failure);
* every round of fixes keeps the text outside its edits byte for byte;
* the fixed text parses, and a second ``fix_text`` changes nothing (fixpoint).

    python bench/fuzz_fixer.py --seconds 600            # both sources, ten minutes
    python bench/fuzz_fixer.py --source mutate --seconds 60 --seed 3

Failures are written to ``bench/out/fuzz-failures/`` (input, settings, reason) and the
script exits 1.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import glob
import json
import os
import random
import re
import sys
import time
import warnings
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from amplint.config import Settings  # noqa: E402
from amplint.engine import MAX_FIX_ITERATIONS, apply_fixes, fix_text, lint_text  # noqa: E402
from amplint.files import SourceError  # noqa: E402
from amplint.project import ProjectIndex  # noqa: E402
from amplint.registry import all_rules, select_rules  # noqa: E402
from amplint.rule import Applicability  # noqa: E402

#: settings under which fixes are exercised (each one changes what the rules report)
SETTINGS_VARIANTS: list[dict] = [
    {},
    {"opt_level": "O2"},
    {"opt_level": "O3", "device": "cpu"},
    {"engine": "torch"},
    {"fix_style": "module"},
    {"target": "bf16", "opt_level": "O2"},
    {"target": "fp8", "alignment": 64},
    {"select": ("ALL",)},
]

_RULES: dict[str, list] = {}


def rules_for(settings: Settings) -> list:
    key = settings.fingerprint()
    if key not in _RULES:
        _RULES[key] = select_rules(all_rules(settings.rule_paths), settings)
    return _RULES[key]


def make_settings(variant: dict) -> Settings:
    return Settings(**variant)


class FuzzFailure(AssertionError):
    pass


def _unchanged_segments(text: str, spans: list[tuple[int, int]]) -> list[str]:
    """The pieces of ``text`` outside every span (spans may overlap: fixes that clash)."""
    out, pos = [], 0
    for a, b in sorted(spans):
        if a > pos:
            out.append(text[pos:a])
        pos = max(pos, b)
    out.append(text[pos:])
    return [s for s in out if s]


def _spans(ctx, fixes) -> list[tuple[int, int]]:
    """Character offsets of every edit of ``fixes`` (line starts computed here, not
    borrowed from the engine, so a bug there cannot hide)."""
    starts = [0] + [m.end() for m in _NEWLINE.finditer(ctx.source)]

    def offset(line: int, col: int) -> int:
        line = max(1, min(line, len(starts)))
        return starts[line - 1] + ctx.char_col(line, col)

    return [(offset(e.start.line, e.start.col), offset(e.end.line, e.end.col)) for fix in fixes for e in fix.edits]


_NEWLINE = re.compile(r"\r\n|\r|\n")


def check_source(text: str, variant: dict, path: str = "<fuzz>.py", rules: Optional[list] = None) -> Optional[dict]:
    """Run every property on ``text``; returns a summary (None when the input does not
    parse: not a fuzz case).  Raises FuzzFailure with the reason on a violation."""
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    settings = make_settings(variant)
    rules = rules_for(settings) if rules is None else rules
    project = ProjectIndex()
    allowed = {Applicability.SAFE, Applicability.UNSAFE}
    try:
        findings, ctx, errors = lint_text(path, text, settings, rules, project)
    except SourceError as exc:  # the input parsed above, so the engine must not refuse it
        raise FuzzFailure(f"lint_text refused parseable input: {exc}") from None
    except RecursionError:
        return None  # deeply nested generated code: ast copes, our walk may not
    except Exception as exc:
        raise FuzzFailure(f"lint_text raised {type(exc).__name__}: {exc}") from exc
    if errors:
        raise FuzzFailure(f"internal error while linting: {errors[0]}")
    # round by round, with the engine's own apply_fixes: text outside edits is kept
    current, rounds, total_fixes = text, 0, 0
    while rounds < MAX_FIX_ITERATIONS:
        fixes = [f.fix for f in findings if f.fix is not None and f.fix.applicability in allowed]
        if not fixes:
            break
        new, applied = apply_fixes(ctx, fixes)
        if new == current:
            break
        position = 0
        for segment in _unchanged_segments(current, _spans(ctx, fixes)):
            found = new.find(segment, position)
            if found < 0:
                raise FuzzFailure(f"round {rounds + 1}: text outside the edits changed near {segment[:60]!r}")
            position = found + len(segment)
        try:
            ast.parse(new)
        except SyntaxError as exc:
            codes = sorted({f.code for f in findings if f.fix is not None})
            raise FuzzFailure(f"round {rounds + 1}: fixes by {codes} produced invalid code: {exc}") from None
        current, rounds, total_fixes = new, rounds + 1, total_fixes + applied
        try:
            findings, ctx, errors = lint_text(path, current, settings, rules, project)
        except Exception as exc:
            raise FuzzFailure(f"re-linting fixed code raised {type(exc).__name__}: {exc}") from exc
        if errors:
            raise FuzzFailure(f"internal error on fixed code: {errors[0]}")
    # the engine's own loop agrees, reports no error, and is at a fixpoint
    fixed, applied, _, errors = fix_text(path, text, settings, rules, project, unsafe=True)
    if errors:
        raise FuzzFailure(f"fix_text reported: {errors[0]}")
    if fixed != current:
        raise FuzzFailure("fix_text's result differs from applying the fixes round by round")
    try:
        _compile(fixed, path)
    except SyntaxError as exc:
        # compile() is stricter than ast.parse (e.g. 'return' outside function): only a
        # failure when the original compiled
        try:
            _compile(text, path)
        except SyntaxError:
            pass
        else:
            raise FuzzFailure(f"fixed code does not compile: {exc}") from None
    again, more, _, errors = fix_text(path, fixed, settings, rules, project, unsafe=True)
    if errors:
        raise FuzzFailure(f"second fix_text reported: {errors[0]}")
    if again != fixed:
        raise FuzzFailure("a second fix changed the fixed code again (not a fixpoint)")
    return {"findings": len(findings), "rounds": rounds, "fixes": total_fixes, "changed": fixed != text}


def _compile(text: str, path: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SyntaxWarnings of generated code are not ours
        compile(text, path, "exec", dont_inherit=True)


# --- mutated fixtures -----------------------------------------------------------------------

HAZARD_VALUES = ["-1e9", "-1e30", "1e-8", "1e-12", "65504", "-65500", "float('-inf')", "-math.inf",
                 "50257", "30522", "650", "3", "0", "1e4", "torch.finfo(x.dtype).min", "(-1e9)", "-10000.0"]
HAZARD_LINES = [
    "x = x.masked_fill(mask, -1e9)",
    "x = F.softmax(x, dim=-1)",
    "x = x / (x.norm(dim=-1, keepdim=True) + 1e-8)",
    "x = torch.log(x + 1e-10)",
    "x = torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)",
    "x = x.softmax(-1)",
    "x = torch.einsum('bij,bjk->bik', x, x)",
    "x = x.sum(dim=1)",
    "x = x.mean()",
    "x = torch.where(mask, x, -1e9)",
    "x = x.masked_fill(mask, float('-inf')).softmax(-1)",
    "x = torch.clamp(x, min=1e-12)",
    "x = x.log_softmax(dim=1)",
    "x = x + (1.0 - mask) * -1e9",
    "self.extra = nn.Linear(650, 50257)",
    "x = torch.linalg.inv(x)",
    "x = torch.fft.rfft(x)",
    "x = clip(value=x, min_val=1e-8, max_val=1.0)",  # a bare-name call with clamp-like keywords
    "x = clamp(x, 1e-8)",
    "x = self.norm(x).clamp(min=1e-12)",
]
STRUCTURAL = ["", "# a comment", "pass", "if x is None:\n    return x", "with torch.no_grad():\n    x = x + 1"]


def corpus_files() -> list[str]:
    files = sorted(glob.glob(os.path.join(ROOT, "fixtures", "**", "*.py"), recursive=True))
    return [f for f in files if os.path.getsize(f) < 200_000]


def mutate(text: str, rng: random.Random) -> str:
    """A few random, mostly syntax-preserving edits of a fixture."""
    lines = text.split("\n")
    for _ in range(rng.randint(1, 6)):
        kind = rng.randrange(9)
        i = rng.randrange(len(lines)) if lines else 0
        if not lines:
            break
        line = lines[i]
        indent = line[: len(line) - len(line.lstrip())]
        if kind == 0:  # swap a number for a hazardous one
            nums = list(re.finditer(r"(?<![\w.])-?\d+(?:\.\d*)?(?:e-?\d+)?(?![\w.])", line))
            if nums:
                m = rng.choice(nums)
                lines[i] = line[: m.start()] + rng.choice(HAZARD_VALUES) + line[m.end():]
        elif kind == 1:  # insert a hazard line at the same indentation after a simple statement
            stripped = line.strip()
            if stripped and not stripped.endswith((":", ",", "(", "[", "{", "\\")) and not stripped.startswith(("@", "#", "return", "raise", "else", "elif", "except", "finally")):
                hazard = rng.choice(HAZARD_LINES).replace("\n", "\n" + indent)
                lines.insert(i + 1, indent + hazard)
        elif kind == 2:  # delete a line
            del lines[i]
        elif kind == 3:  # duplicate a line
            lines.insert(i, line)
        elif kind == 4:  # a trailing comment, sometimes a suppression
            if line.strip() and not line.rstrip().endswith("\\"):
                lines[i] = line + rng.choice(["  # note", "  # amplint: ignore", "  # noqa: AMP301", "  # expect: AMP101", "  # type: ignore"])
        elif kind == 5:  # parenthesise the right-hand side of an assignment
            m = re.match(r"^(\s*[\w.\[\], ]+ = )(.+)$", line)
            if m and not m.group(2).rstrip().endswith(("(", "[", "{", "\\", ",")):
                lines[i] = f"{m.group(1)}({m.group(2)})"
        elif kind == 6:  # a structural statement
            lines.insert(i, indent + rng.choice(STRUCTURAL).replace("\n", "\n" + indent))
        elif kind == 7:  # non-ASCII in a string or comment (byte/char column differences)
            lines[i] = line + "  # \u00e9t\u00e9 \u4e2d\u6587 \U0001f600" if line.strip() else line
        elif kind == 8:  # split a call's arguments over lines
            j = line.find("(")
            if 0 <= j < len(line) - 1 and line.rstrip().endswith(")") and line.count("(") == 1:
                lines[i] = line[: j + 1] + "\n" + indent + "        " + line[j + 1:]
    out = "\n".join(lines)
    if rng.random() < 0.15:
        out = out.replace("\n", "\r\n")
    if rng.random() < 0.1:
        out = out.replace("    ", "\t")
    return out


def mutated_cases(seed: int):
    rng = random.Random(seed)
    files = corpus_files()
    while True:
        path = rng.choice(files)
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        yield path, mutate(text, rng), rng.choice(SETTINGS_VARIANTS)


# --- generated Python -------------------------------------------------------------------------

def generated_cases(seed: int):
    """hypothesmith programs, each wrapped so the rules have something to look at: as the
    body of a module's ``forward`` (prefixed with torch imports) or as a whole file."""
    import hypothesmith
    from hypothesis import HealthCheck, given, seed as hseed, settings as hsettings, strategies as st

    rng = random.Random(seed)
    while True:
        batch: list[str] = []

        @hseed(rng.randrange(2**32))
        @hsettings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(st.one_of(hypothesmith.from_grammar(), hypothesmith.from_node()))
        def collect(code):
            batch.append(code)

        collect()
        for code in batch:
            yield "<generated>", wrap_generated(code, rng), rng.choice(SETTINGS_VARIANTS)


PRELUDE = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"


def wrap_generated(code: str, rng: random.Random) -> str:
    if rng.random() < 0.5:
        return PRELUDE + code
    body = code if code.strip() else "pass\n"
    body = "\n".join(("        " + line) if line.strip() else line for line in body.split("\n"))
    hazard = "        " + rng.choice(HAZARD_LINES).replace("\n", "\n        ")
    return (PRELUDE + "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
            "    def forward(self, x, mask):\n" + hazard + "\n" + body + "\n        return x\n")


# --- driver -----------------------------------------------------------------------------------

@dataclasses.dataclass
class Stats:
    cases: int = 0
    skipped: int = 0
    changed: int = 0
    fixes: int = 0
    findings: int = 0
    failures: int = 0


def run(source: str, seconds: float, seed: int, out_dir: Optional[str], max_cases: Optional[int] = None) -> Stats:
    stats = Stats()
    gens = []
    if source in ("mutate", "both"):
        gens.append(mutated_cases(seed))
    if source in ("generate", "both"):
        gens.append(generated_cases(seed))
    deadline = time.monotonic() + seconds
    k = 0
    while time.monotonic() < deadline and (max_cases is None or stats.cases + stats.skipped < max_cases):
        origin, text, variant = next(gens[k % len(gens)])
        k += 1
        try:
            summary = check_source(text, variant)
        except FuzzFailure as exc:
            stats.failures += 1
            stats.cases += 1
            _record(out_dir, origin, text, variant, str(exc))
            print(f"FAIL {origin} {variant}: {exc}", flush=True)
            continue
        if summary is None:
            stats.skipped += 1
            continue
        stats.cases += 1
        stats.findings += summary["findings"]
        stats.fixes += summary["fixes"]
        stats.changed += summary["changed"]
    return stats


def _record(out_dir, origin, text, variant, reason):
    if not out_dir:
        return
    os.makedirs(out_dir, exist_ok=True)
    n = len(os.listdir(out_dir)) // 2
    with open(os.path.join(out_dir, f"case{n:04d}.py"), "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    with open(os.path.join(out_dir, f"case{n:04d}.json"), "w") as fh:
        json.dump({"origin": origin, "settings": variant, "reason": reason}, fh, indent=2)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", choices=("mutate", "generate", "both"), default="both")
    p.add_argument("--seconds", type=float, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "fuzz-failures"))
    args = p.parse_args(argv)
    t0 = time.monotonic()
    stats = run(args.source, args.seconds, args.seed, args.out)
    wall = time.monotonic() - t0
    print(f"fuzz ({args.source}, seed {args.seed}): {stats.cases} cases in {wall:.0f} s "
          f"({stats.skipped} unparseable inputs skipped), {stats.findings} findings left, "
          f"{stats.fixes} fixes applied, {stats.changed} files changed, {stats.failures} failures")
    return 1 if stats.failures else 0


if __name__ == "__main__":
    sys.exit(main())
