"""Ruff's command-line conventions, through the real command line: `fix --diff`, `--statistics`,
where errors go, usage errors, summaries, and messages that quote the selected target's numbers."""
from __future__ import annotations

import json

import pytest

# AMP301 (safe fix), AMP302 on an unbounded sum (no fix), AMP102 (unsafe fix only: no one tensor
# to guard the eps by dtype), AMP303 (unsafe: the fused softmax moves fp32 in the last bits)
MODEL = """import torch
import torch.nn as nn
import torch.nn.functional as F


class M(nn.Module):
    def forward(self, x, n):
        p = F.softmax(x, dim=-1)
        s = x.sum()
        y = x / (n * n + 1e-8)
        e = torch.exp(x) / torch.exp(x).sum(dim=-1, keepdim=True)
        return p, s, y, e
"""
UNSAFE_ONLY = "import torch\nimport torch.nn as nn\n\nclass M(nn.Module):\n    def forward(self, x, n):\n        return x / (n * n + 1e-8)\n"



@pytest.fixture
def project(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    # pure half: under O1 the engine already runs softmax in fp32 and AMP301 offers no fix
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nopt-level = "O2"\n')
    return tmp_path


def test_fix_diff_prints_the_diff_only_and_says_would_fix(project, amplint):
    proc = amplint("fix", "model.py", "--diff", cwd=project)
    assert proc.returncode == 1
    assert proc.stdout.startswith("--- model.py\n+++ model.py\n@@ ")
    # nothing but the diff on stdout: no findings repeated, no "Fixed"
    assert all(line[:1] in ("-", "+", " ", "@") for line in proc.stdout.splitlines()), proc.stdout
    assert "Fixed" not in proc.stdout + proc.stderr
    assert proc.stderr == "Would fix 1 finding; 3 would remain (2 fixable with `--unsafe-fixes`).\n"
    assert (project / "model.py").read_text() == MODEL
    # the diff applies: it is exactly what `fix` writes
    fixed = amplint("fix", "model.py", cwd=project)
    assert "Fixed 1 finding." in fixed.stdout
    unsafe = amplint("fix", "model.py", "--diff", "--unsafe-fixes", cwd=project)
    assert unsafe.stderr == "Would fix 2 findings; 1 would remain.\n"
    (project / "model.py").write_text("import torch\nx = torch.ones(3)\n")
    clean = amplint("fix", "model.py", "--diff", cwd=project)
    assert clean.returncode == 0 and clean.stdout == "" and clean.stderr == "No fixes to apply.\n"
    assert amplint("fix", "model.py", "--diff", "-q", cwd=project).stderr == ""


def test_statistics_show_the_true_fix_availability(project, amplint):
    out = amplint("check", "model.py", "--statistics", cwd=project).stdout.splitlines()
    assert out[:4] == [
        "1  AMP102  [-] underflow-epsilon",
        "1  AMP301  [*] softmax-in-half",
        "1  AMP302      reduction-in-half",
        "1  AMP303  [-] handwritten-softmax",
    ]
    proc = amplint("check", "model.py", "--statistics", "--format", "json", cwd=project)
    rows = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert {r["code"]: (r["count"], r["fixable"], r["safe_fixes"], r["unsafe_fixes"]) for r in rows} == {
        "AMP102": (1, False, 0, 1), "AMP301": (1, True, 1, 0), "AMP302": (1, False, 0, 0), "AMP303": (1, False, 0, 1),
    }
    assert set(rows[0]) == {"code", "name", "count", "fixable", "safe_fixes", "unsafe_fixes"}
    bad = amplint("check", "model.py", "--statistics", "--format", "sarif", cwd=project)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr == "amplint: error: --statistics works with --format text, concise or json, not sarif\n"


def test_summary_counts_unsafe_fixes_without_saying_more(project, amplint):
    (project / "model.py").write_text(UNSAFE_ONLY)
    out = amplint("check", "model.py", cwd=project).stdout
    assert out.splitlines()[-1] == "Found 1 finding (1 fixable with `amplint fix --unsafe-fixes`)."
    (project / "model.py").write_text(MODEL)
    out = amplint("check", "model.py", cwd=project).stdout
    assert out.splitlines()[-1] == "Found 4 findings (1 fixable with `amplint fix`; 2 more fixable with `amplint fix --unsafe-fixes`)."


def test_config_and_missing_path_errors_go_to_stderr(project, amplint):
    for fmt in ("text", "concise", "json"):
        proc = amplint("check", "model.py", "missing.py", "--format", fmt, cwd=project)
        assert proc.returncode == 2
        assert "missing.py:1:1: error: no such file or directory" in proc.stderr
        assert "missing.py" not in proc.stdout
        if fmt == "json":
            assert {f["path"] for f in json.loads(proc.stdout)} == {"model.py"}
        else:
            assert "model.py:8:" in proc.stdout
    (project / "pyproject.toml").write_text("[tool.amplint]\nopt-level = 'O9'\n")
    proc = amplint("check", "model.py", cwd=project)
    assert proc.returncode == 2
    assert "pyproject.toml:2:1: error: [tool.amplint] opt-level" in proc.stderr
    assert "error" not in proc.stdout.replace("1 error (", "")


def test_a_wrong_option_value_is_one_line_and_a_help_hint(project, amplint):
    proc = amplint("check", "--target", "fp12", cwd=project)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "amplint check: error: argument --target: invalid choice: 'fp12' (choose from 'fp16', 'bf16', 'fp8', 'int8')",
        "For more information, try `amplint check --help`.",
    ]
    assert "usage:" not in amplint("fix", "--bogus", cwd=project).stderr
    assert amplint("frobnicate", cwd=project).stderr.count("\n") == 2


def test_messages_quote_the_selected_targets_numbers(project, amplint):
    bf16 = json.loads(amplint("check", "model.py", "--target", "bf16", "--format", "json", cwd=project).stdout)
    fp16 = json.loads(amplint("check", "model.py", "--format", "json", cwd=project).stdout)
    by_code = {f["code"]: f["message"] for f in bf16}
    assert {"AMP301", "AMP302", "AMP303"} <= set(by_code)
    for message in by_code.values():
        for fp16_figure in ("6e-8", "65504", "11.09", "fp16", "11 significant bits"):
            assert fp16_figure not in message, message
    assert "8 significant bits" in by_code["AMP301"] and "99840" in by_code["AMP302"] and "88.7" in by_code["AMP303"]
    fp16_messages = {f["code"]: f["message"] for f in fp16}
    assert "6e-8" in fp16_messages["AMP301"] and "65504" in fp16_messages["AMP302"] and "11.09" in fp16_messages["AMP303"]


def test_rules_and_explain_show_mixed_fix_applicability(project, amplint):
    rules = {r["code"]: r["fix"] for r in json.loads(amplint("rules", "--format", "json", cwd=project).stdout)}
    assert rules["AMP101"] == "safe/unsafe" and rules["AMP401"] == "safe/unsafe" and rules["AMP102"] == "safe/unsafe"
    text = amplint("rules", cwd=project).stdout
    assert any(line.startswith("AMP101") and " safe/unsafe " in line for line in text.splitlines())
    assert "Fix: safe/unsafe" in amplint("explain", "AMP101", cwd=project).stdout


def test_amp900_is_a_documented_rule_that_select_turns_on(tmp_path, amplint):
    """`amplint explain AMP900` said "unknown rule" and `--extend-select AMP900` was accepted
    but reported nothing: it is a rule now, listed, explained, and selecting it reports."""
    (tmp_path / "m.py").write_text("import torch\nx = 1  # amplint: ignore[AMP101]\ny = 2  # noqa: E501\n")
    explain = amplint("explain", "AMP900", cwd=tmp_path)
    assert explain.returncode == 0 and explain.stdout.startswith("# AMP900 unused-suppression")
    assert "## Why is this bad?" in explain.stdout and "Off by default" in explain.stdout
    listed = {r["code"]: r for r in json.loads(amplint("rules", "--format", "json", cwd=tmp_path).stdout)}
    assert listed["AMP900"]["name"] == "unused-suppression" and listed["AMP900"]["default"] is False
    assert amplint("check", "m.py", "--no-cache", cwd=tmp_path).returncode == 0  # off by default
    for how in (["--extend-select", "AMP900"], ["--select", "AMP900"], ["--report-unused-suppressions"]):
        proc = amplint("check", "m.py", "--no-cache", "--format", "concise", "-q", *how, cwd=tmp_path)
        assert proc.returncode == 1 and proc.stdout == (
            "m.py:2:8: AMP900 warning: Unused suppression of AMP101: nothing to silence on this statement\n"), (how, proc.stdout)
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nextend-select = ["AMP900"]\n')
    proc = amplint("check", "m.py", "--no-cache", "--format", "json", cwd=tmp_path)
    assert [f["code"] for f in json.loads(proc.stdout)] == ["AMP900"]


def test_rules_and_explain_into_a_closed_pipe_are_quiet(tmp_path):
    """`amplint rules --format json | head -c 100` printed a BrokenPipeError traceback (D2 of
    the ecosystem report; `check | head -1` is tests/test_robustness.py's)."""
    import subprocess
    import sys

    for command in ("rules --format json", "rules", "explain AMP101"):
        # the reader closes the pipe at once: every write of amplint's meets EPIPE
        proc = subprocess.run(f"{sys.executable} -m amplint {command} | (exec 0<&-; true)", shell=True,
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.stderr == "", (command, proc.stderr)
