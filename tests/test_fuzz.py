"""Fix-safety fuzzing, bounded for CI (issue 9); ``bench/fuzz_fixer.py`` is the long run.

hypothesmith-generated Python and mutated corpus fixtures go through ``lint_text`` and
``fix_text --unsafe-fixes`` in-process, and a folder of mutated fixtures through the real
CLI: no internal error, every output parses, a second fix changes nothing, and every
round of fixes keeps the text outside its edits byte for byte.
"""
from __future__ import annotations

import ast
import os
import random
import subprocess
import sys
import time

import hypothesmith
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import fuzz_fixer  # noqa: E402
from amplint.rule import Edit, Fix, Rule  # noqa: E402

VARIANTS = st.sampled_from(fuzz_fixer.SETTINGS_VARIANTS)
BUDGET_EXAMPLES = int(os.environ.get("AMPLINT_FUZZ_EXAMPLES", "40"))


@settings(max_examples=BUDGET_EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(code=st.one_of(hypothesmith.from_grammar(), hypothesmith.from_node()), variant=VARIANTS, seed=st.integers(0, 2**16))
def test_generated_python_fixes_safely(code, variant, seed):
    text = fuzz_fixer.wrap_generated(code, random.Random(seed))
    fuzz_fixer.check_source(text, variant)


def test_mutated_fixtures_fix_safely():
    """Deterministic mutations of every corpus file, under rotating settings (~20 s)."""
    deadline = time.monotonic() + float(os.environ.get("AMPLINT_FUZZ_SECONDS", "20"))
    rng = random.Random(1234)
    files = fuzz_fixer.corpus_files()
    assert len(files) >= 14
    checked = changed = 0
    while time.monotonic() < deadline or checked < len(files):
        path = files[checked % len(files)]
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        variant = fuzz_fixer.SETTINGS_VARIANTS[checked % len(fuzz_fixer.SETTINGS_VARIANTS)]
        mutated = fuzz_fixer.mutate(text, rng)
        try:
            summary = fuzz_fixer.check_source(mutated, variant, path=path)
        except fuzz_fixer.FuzzFailure as exc:
            pytest.fail(f"{os.path.relpath(path, ROOT)} mutated under {variant}: {exc}\n--- input ---\n{mutated}")
        checked += 1
        if summary is not None:
            changed += summary["changed"]
    assert changed > 0, "no mutated fixture was ever fixed: the fuzzer exercises nothing"


def test_mutated_fixtures_through_the_cli(tmp_path):
    """A folder of mutated fixtures through `amplint check` and `amplint fix --unsafe-fixes`."""
    rng = random.Random(77)
    written = []
    for i, path in enumerate(fuzz_fixer.corpus_files() * 2):
        with open(path, encoding="utf-8") as fh:
            text = fuzz_fixer.mutate(fh.read(), rng)
        try:
            ast.parse(text)
        except SyntaxError:
            continue
        target = tmp_path / f"case{i:03d}_{os.path.basename(path)}"
        target.write_bytes(text.encode())
        written.append(target)
    before = [p.read_bytes() for p in written]
    cli = [sys.executable, "-m", "amplint"]
    check = subprocess.run(cli + ["check", str(tmp_path), "--no-cache", "-q"], capture_output=True, text=True, cwd=ROOT)
    assert check.returncode in (0, 1), check.stdout + check.stderr
    assert "internal error" not in check.stdout + check.stderr and "Traceback" not in check.stderr
    fix = subprocess.run(cli + ["fix", str(tmp_path), "--unsafe-fixes", "--no-cache", "-q"], capture_output=True, text=True, cwd=ROOT)
    assert fix.returncode in (0, 1), fix.stdout + fix.stderr
    assert "internal error" not in fix.stdout + fix.stderr and "Traceback" not in fix.stderr
    after = {p: p.read_bytes() for p in written}
    assert sum(after[p] != p_before for p, p_before in zip(written, before)) > 0, "nothing was fixed"
    for p, data in after.items():
        ast.parse(data)
    again = subprocess.run(cli + ["fix", str(tmp_path), "--unsafe-fixes", "--no-cache", "-q"], capture_output=True, text=True, cwd=ROOT)
    assert again.returncode in (0, 1)
    for p, data in after.items():
        assert p.read_bytes() == data, f"{p.name}: a second fix changed the file"


# --- the checker itself catches what it is meant to catch ----------------------------------------

class _NotAFixpoint(Rule):
    code, name, summary, docs = "ZZ901", "not-a-fixpoint", "test rule", "test rule"
    fix_applicability = "safe"

    def visit_Module(self, node, ctx):
        ctx.report(self, node.body[0], "always", fix=Fix([Edit.insert_before(node.body[0], "pass\n")], "safe", "add pass"))


class _Raises(Rule):
    code, name, summary, docs = "ZZ902", "raises", "test rule", "test rule"

    def visit_Call(self, node, ctx):
        raise ValueError("boom")


class _BreaksSyntax(Rule):
    code, name, summary, docs = "ZZ903", "breaks-syntax", "test rule", "test rule"
    fix_applicability = "unsafe"

    def visit_Call(self, node, ctx):
        ctx.report(self, node, "x", fix=Fix([Edit.replace(node, "f(")], "unsafe", "break it"))


@pytest.mark.parametrize("rule, reason", [(_NotAFixpoint, "fixpoint"), (_Raises, "internal error"), (_BreaksSyntax, "invalid code")])
def test_the_checker_catches_broken_rules(rule, reason):
    with pytest.raises(fuzz_fixer.FuzzFailure, match=reason):
        fuzz_fixer.check_source("import torch\nx = torch.zeros(3)\n", {}, rules=[rule])
