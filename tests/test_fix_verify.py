"""``amplint fix --verify`` through the command line (issue 24): one target per flag, the
path after it is a path to fix; no "verification did not pass" line when none ran; verify
runs with fix's own settings (a bf16 project verifies bf16, the fix set it proves is the one
fix writes); the in-memory pipeline keeps local rules (verify --fix fixes what check reports)."""
from __future__ import annotations

import json
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NORM = os.path.join(ROOT, "fixtures", "verify", "handwritten_norm.py")


def test_a_path_after_the_target_is_a_path_to_fix(tmp_path, amplint):
    shutil.copy(NORM, tmp_path / "handwritten_norm.py")
    proc = amplint("fix", "--verify", "handwritten_norm.py::example", ".", "--threads-hint", cwd=tmp_path)
    assert proc.returncode == 2 and "--threads-hint" in proc.stderr  # a usage error: nothing ran
    proc = amplint("fix", "--verify", "handwritten_norm.py::example", ".", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert "no such file" not in proc.stderr
    assert "input_dtype = x.dtype" in (tmp_path / "handwritten_norm.py").read_text()


def test_no_did_not_pass_line_when_nothing_ran(tmp_path, amplint):
    shutil.copy(NORM, tmp_path / "handwritten_norm.py")
    before = (tmp_path / "handwritten_norm.py").read_text()
    proc = amplint("fix", "--verify", ".", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "is not PATH::FACTORY" in proc.stderr, proc.stderr
    proc = amplint("fix", ".", "--verify", "missing.py::example", cwd=tmp_path)
    assert proc.returncode == 2 and "no such file" in proc.stderr
    assert "did not pass" not in proc.stderr and "could not run" in proc.stderr
    assert (tmp_path / "handwritten_norm.py").read_text() == before


def test_a_bf16_project_verifies_bf16(tmp_path, amplint):
    shutil.copy(NORM, tmp_path / "handwritten_norm.py")
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\ntarget = "bf16"\n')
    proc = amplint("fix", ".", "--verify", "handwritten_norm.py::example", "--opt-level", "O2", cwd=tmp_path)
    head = proc.stdout.splitlines()[0] if proc.stdout else ""
    assert "bf16" in head and "fp16" not in head, proc.stdout[:500] + proc.stderr
    # --dtype is still verify's own to give
    proc = amplint("verify", "handwritten_norm.py::example", "--opt-level", "O1", "--format", "json", cwd=tmp_path)
    assert json.loads(proc.stdout)["results"][0]["dtype"] == "bf16", proc.stderr
    proc = amplint("verify", "handwritten_norm.py::example", "--opt-level", "O1", "--dtype", "fp16",
                   "--format", "json", cwd=tmp_path)
    assert json.loads(proc.stdout)["results"][0]["dtype"] == "fp16", proc.stderr


LOCAL_RULE = '''
import ast
from amplint.rule import Edit, Fix, Rule


class NoHalfCall(Rule):
    code = "LOC001"
    name = "no-half-call"
    summary = "x.half() in forward"
    docs = "## What it does\\nFlags `.half()`."
    fix_applicability = "safe"

    def visit_Call(self, node, ctx):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "half" and not node.args:
            ctx.report(self, node, "`.half()` call", fix=Fix([Edit.replace(node.func, f"{ctx.segment(node.func.value)}.float")], "safe", "use float"))
'''


def test_verify_fix_sees_local_rules_like_check(tmp_path, amplint):
    """lint_sources loads rules through Settings.rules: local rules are fixed and re-checked
    by verify --fix as check reports them (they were dropped before)."""
    from amplint.config import ConfigResolver
    from amplint.pipeline import LintMode, lint_sources

    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "loc001.py").write_text(LOCAL_RULE)
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nrule-paths = ["rules"]\n')
    src = str(tmp_path / "m.py")
    text = "import torch\ny = torch.ones(2).half()\n"
    resolver = ConfigResolver(None, str(tmp_path / "pyproject.toml"), allow_local_rules=True)
    checked = lint_sources({src: text}, resolver)[src]
    assert [f.code for f in checked.findings] == ["LOC001"], checked
    fixed = lint_sources({src: text}, resolver, LintMode(fix=True))[src]
    assert fixed.fixed == 1 and "torch.ones(2).float()" in fixed.text and not fixed.findings


def test_sarif_rule_table_lists_local_rules(tmp_path, amplint):
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "loc001.py").write_text(LOCAL_RULE)
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nrule-paths = ["rules"]\n')
    (tmp_path / "m.py").write_text("import torch\ny = torch.ones(2).half()\n")
    proc = amplint("check", "m.py", "--format", "sarif", "--allow-local-rules", "--no-cache", cwd=tmp_path)
    run = json.loads(proc.stdout)["runs"][0]
    assert [r["ruleId"] for r in run["results"]] == ["LOC001"], proc.stderr
    table = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert "LOC001" in table and "ruleIndex" in run["results"][0]
