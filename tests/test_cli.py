"""The command line, through a real subprocess: every verb, option, format and exit code."""
from __future__ import annotations

import json
import os
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

APEX = "from apex import amp  # old\nimport torch\n"
CLEAN = "import torch\nx = torch.ones(3)\n"
LOCAL_RULE = '''
import ast
from amplint.rule import Rule, Valid, Invalid, Fix, Edit


class NoHalfCall(Rule):
    code = "LOC001"
    name = "no-half-call"
    summary = "calls .half() (a local rule)"
    docs = "## What it does\\nFlags `.half()`.\\n## Why is this bad?\\nLocal policy.\\n## Example\\n`m.half()`\\n"
    fix_applicability = "unsafe"
    VALID = [Valid("m.float()\\n")]
    INVALID = [Invalid("m.half()\\n", expected_fix="m.to(torch.bfloat16)\\n")]

    def visit_Call(self, node, ctx):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "half" and not node.args:
            fix = Fix([Edit.replace(node, ctx.segment(node.func.value) + ".to(torch.bfloat16)")], "unsafe", "use bf16")
            ctx.report(self, node, "`.half()` call", fix=fix)
'''


@pytest.fixture(autouse=True)
def _colour_allowed(monkeypatch):
    """The colour tests decide colour themselves: no NO_COLOR from the calling shell."""
    monkeypatch.delenv("NO_COLOR", raising=False)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(APEX)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


def test_version_and_help(project, amplint):
    assert amplint("--version", cwd=project).stdout.startswith("amplint ")
    out = amplint("--help", cwd=project).stdout
    for verb in ("check", "fix", "rules", "explain", "verify"):
        assert verb in out
    check_help = amplint("check", "--help", cwd=project).stdout
    for option in ("--select", "--ignore", "--format", "--target", "--opt-level", "--statistics", "--exit-zero", "--no-cache"):
        assert option in check_help
    assert "--unsafe-fixes" in amplint("fix", "--help", cwd=project).stdout


def test_console_script_is_installed(project, amplint):
    proc = amplint("--version", cwd=project)  # the script beside sys.executable, not one on PATH
    assert proc.returncode == 0 and "amplint" in proc.stdout


def test_exit_codes(project, amplint):
    assert amplint("check", "clean.py", cwd=project).returncode == 0
    assert amplint("check", "train.py", cwd=project).returncode == 1
    assert amplint("check", "train.py", "--exit-zero", cwd=project).returncode == 0
    assert amplint("check", "--select", "NOPE1", cwd=project).returncode == 2
    assert amplint("check", "--target", "fp12", cwd=project).returncode == 2
    assert amplint("check", "missing.py", cwd=project).returncode == 2
    assert amplint("explain", "AMP999", cwd=project).returncode == 2
    assert amplint(cwd=project).returncode == 2  # no verb: help, usage error


def test_text_output_has_source_frame_and_summary(project, amplint):
    proc = amplint("check", "train.py", cwd=project)
    out = proc.stdout
    assert "train.py:1:1: AMP501 [*]" in out
    assert "1 | from apex import amp  # old" in out
    assert "^^^^^^^^^^^^^^^^^^^^ AMP501" in out
    assert "Found 1 finding (1 fixable with `amplint fix`)." in out
    assert "Traceback" not in proc.stderr


def test_default_path_is_current_folder(project, amplint):
    proc = amplint("check", "--format", "concise", cwd=project)
    assert proc.returncode == 1 and "train.py:1:1: AMP501" in proc.stdout


def test_json_output_shape(project, amplint):
    proc = amplint("check", ".", "--format", "json", cwd=project)
    data = json.loads(proc.stdout)
    assert len(data) == 1
    assert set(data[0]) == {"path", "line", "column", "end_line", "end_column", "code", "rule", "message", "severity", "fix",
                            "related", "fingerprint"}
    assert data[0]["fix"] == {"applicability": "safe", "description": "Import `amp` from `amplint`", "edits": [
        {"line": 1, "column": 1, "end_line": 1, "end_column": 21, "content": "from amplint import amp"}]}
    assert len(data[0]["fingerprint"].split(":")) == 2
    assert (data[0]["line"], data[0]["column"], data[0]["end_column"]) == (1, 1, 21)


def test_sarif_output(project, amplint):
    data = json.loads(amplint("check", ".", "--format", "sarif", cwd=project).stdout)
    assert data["version"] == "2.1.0"
    run = data["runs"][0]
    assert run["tool"]["driver"]["name"] == "amplint"
    assert any(r["id"] == "AMP501" for r in run["tool"]["driver"]["rules"])
    result = run["results"][0]
    assert result["ruleId"] == "AMP501" and result["level"] == "error"
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 1


def test_github_and_concise_output(project, amplint):
    gh = amplint("check", "train.py", "--format", "github", cwd=project).stdout
    assert gh.startswith("::error file=train.py,line=1,col=1,")
    concise = amplint("check", "train.py", "--format", "concise", cwd=project).stdout
    assert concise.splitlines()[0].startswith("train.py:1:1: AMP501 [*] ")


def test_statistics(project, amplint):
    out = amplint("check", ".", "--statistics", cwd=project).stdout
    assert "1  AMP501  [*] apex-amp-import" in out


def test_select_and_ignore(project, amplint):
    assert amplint("check", ".", "--ignore", "AMP5", cwd=project).returncode == 0
    assert amplint("check", ".", "--select", "AMP50", "--ignore", "AMP501", cwd=project).returncode == 0
    assert amplint("check", ".", "--select", "AMP5", "--ignore", "AMP", cwd=project).returncode == 1


def test_suppression_comment(project, amplint):
    (project / "train.py").write_text("from apex import amp  # amplint: ignore[AMP501]\n")
    assert amplint("check", "train.py", cwd=project).returncode == 0
    (project / "train.py").write_text("from apex import amp  # noqa: AMP501\nx = 1  # amplint: ignore[AMP501]\n")
    proc = amplint("check", "train.py", "--report-unused-suppressions", "--format", "concise", cwd=project)
    assert "train.py:2:" in proc.stdout and "AMP900" in proc.stdout


def test_fix_writes_and_is_idempotent(project, amplint):
    proc = amplint("fix", "train.py", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (project / "train.py").read_text() == "from amplint import amp  # old\nimport torch\n"
    assert "Fixed 1 finding" in proc.stdout
    again = amplint("fix", "train.py", cwd=project)
    assert again.returncode == 0 and (project / "train.py").read_text() == "from amplint import amp  # old\nimport torch\n"


def test_fix_diff_writes_nothing(project, amplint):
    proc = amplint("fix", "train.py", "--diff", cwd=project)
    assert proc.returncode == 1
    assert "-from apex import amp  # old" in proc.stdout and "+from amplint import amp  # old" in proc.stdout
    assert (project / "train.py").read_text() == APEX


def test_fix_keeps_crlf_bom_and_permissions(project, amplint):
    path = project / "train.py"
    path.write_bytes(b"\xef\xbb\xbf" + APEX.replace("\n", "\r\n").encode())
    os.chmod(path, 0o751)
    assert amplint("fix", "train.py", cwd=project).returncode == 0
    assert path.read_bytes() == b"\xef\xbb\xbffrom amplint import amp  # old\r\nimport torch\r\n"
    assert os.stat(path).st_mode & 0o777 == 0o751


def test_unsafe_fixes_need_the_flag(project, amplint):
    rules = project / "local_rules"
    rules.mkdir()
    (rules / "no_half.py").write_text(LOCAL_RULE)
    (project / "pyproject.toml").write_text('[tool.amplint]\nrule-paths = ["local_rules"]\n')
    (project / "m.py").write_text("import torch\nm = torch.nn.Linear(8, 8)\nm.half()\n")
    assert amplint("rules", cwd=project).stdout.count("LOC001") == 0  # `rules` lists installed rules only
    check = amplint("check", "m.py", "--allow-local-rules", cwd=project)
    assert check.returncode == 1 and "LOC001 [-] `.half()` call" in check.stdout
    assert "1 fixable with `amplint fix --unsafe-fixes`" in check.stdout  # no "more": nothing is safe
    assert amplint("fix", "m.py", "--allow-local-rules", cwd=project).returncode == 1
    assert (project / "m.py").read_text().endswith("m.half()\n")
    assert amplint("fix", "m.py", "--unsafe-fixes", "--allow-local-rules", cwd=project).returncode == 0
    assert (project / "m.py").read_text().endswith("m.to(torch.bfloat16)\n")


def test_broken_local_rule_is_a_clear_error(project, amplint):
    rules = project / "local_rules"
    rules.mkdir()
    (rules / "broken.py").write_text("raise ValueError('boom')\n")
    (project / "pyproject.toml").write_text('[tool.amplint]\nrule-paths = ["local_rules"]\n')
    proc = amplint("check", ".", "--allow-local-rules", cwd=project)
    assert proc.returncode == 2 and "boom" in proc.stderr and "Traceback" not in proc.stderr


def test_entry_point_rules(project, tmp_path_factory, amplint):
    site = tmp_path_factory.mktemp("site")
    (site / "amplint_plugin_demo.py").write_text(LOCAL_RULE.replace("LOC001", "PLG001"))
    dist = site / "amplint_plugin_demo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: amplint-plugin-demo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[amplint.rules]\ndemo = amplint_plugin_demo\n")
    (project / "m.py").write_text("m.half()\n")
    env = {"PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    # installed plugins are code too: not loaded unless allowed, and never silently
    proc = amplint("check", "m.py", "--format", "concise", cwd=project, env=env)
    assert proc.returncode == 0 and "PLG001" not in proc.stdout
    assert "local rules not loaded" in proc.stderr and "demo (amplint-plugin-demo)" in proc.stderr
    assert "--allow-local-rules" in proc.stderr
    proc = amplint("check", "m.py", "--format", "concise", "--allow-local-rules", cwd=project, env=env)
    assert proc.returncode == 1 and "PLG001" in proc.stdout and "not loaded" not in proc.stderr
    allow = {**env, "AMPLINT_ALLOW_LOCAL_RULES": "1"}
    assert "PLG001" in amplint("check", "m.py", "--format", "concise", cwd=project, env=allow).stdout
    assert "PLG001" in amplint("rules", cwd=project, env=allow).stdout
    assert "PLG001" not in amplint("rules", cwd=project, env=env).stdout


def test_config_errors_exit_2_with_file_and_line(project, amplint):
    (project / "pyproject.toml").write_text("[tool.amplint]\ntarget = 'fp16'\nopt-level = 'O9'\n")
    proc = amplint("check", ".", cwd=project)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2
    assert "pyproject.toml:3:1: error: [tool.amplint] opt-level" in out and "Traceback" not in out
    (project / "pyproject.toml").write_text("[tool.amplint\n")
    proc = amplint("check", ".", cwd=project)
    assert proc.returncode == 2 and "invalid TOML" in proc.stdout + proc.stderr
    # with --config the file is the user's explicit choice: a usage error before any linting
    proc = amplint("check", ".", "--config", "pyproject.toml", cwd=project)
    assert proc.returncode == 2 and "amplint: error:" in proc.stderr and "invalid TOML" in proc.stderr


def test_config_select_and_cli_override(project, amplint):
    (project / "pyproject.toml").write_text("[tool.amplint]\nignore = ['AMP501']\n")
    assert amplint("check", ".", cwd=project).returncode == 0
    assert amplint("check", ".", "--ignore", "AMP999", cwd=project).returncode == 2  # unknown code
    assert amplint("check", ".", "--select", "AMP501", "--ignore", "AMP50", cwd=project).returncode == 1  # longest match wins


def test_exclude(project, amplint):
    (project / "vendor").mkdir()
    (project / "vendor" / "old.py").write_text(APEX)
    (project / "train.py").write_text(CLEAN)
    assert amplint("check", ".", cwd=project).returncode == 1
    assert amplint("check", ".", "--exclude", "vendor", cwd=project).returncode == 0
    (project / "pyproject.toml").write_text("[tool.amplint]\nexclude = ['vendor/*']\n")
    assert amplint("check", ".", cwd=project).returncode == 0


def test_parse_error_is_reported_and_other_files_still_linted(project, amplint):
    (project / "bad.py").write_text("import torch\ndef f(:\n")
    proc = amplint("check", ".", "--format", "concise", cwd=project)
    assert proc.returncode == 2
    assert "bad.py:2:" in proc.stderr and "syntax error" in proc.stderr
    assert "train.py:1:1: AMP501" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_cache_is_used_and_invalidated(project, amplint):
    first = amplint("check", ".", "--format", "json", cwd=project)
    assert (project / ".amplint_cache").is_dir()
    second = amplint("check", ".", "--format", "json", cwd=project)
    assert first.stdout == second.stdout
    assert amplint("check", ".", "--target", "bf16", "--format", "json", cwd=project).stdout == first.stdout
    (project / "train.py").write_text(CLEAN)
    assert json.loads(amplint("check", ".", "--format", "json", cwd=project).stdout) == []
    (project / "train.py").write_text(APEX)
    nocache = project / "nc"
    nocache.mkdir()
    (nocache / "t.py").write_text(APEX)
    amplint("check", "t.py", "--no-cache", cwd=nocache)
    assert not (nocache / ".amplint_cache").exists()


def test_many_files_use_the_process_pool(project, amplint):
    for i in range(20):
        (project / f"m{i:02d}.py").write_text(APEX if i % 2 else CLEAN)
    proc = amplint("check", ".", "--format", "concise", "--no-cache", "-j", "2", cwd=project)
    assert proc.returncode == 1
    assert len([l for l in proc.stdout.splitlines() if "AMP501" in l]) == 11


def test_rules_and_explain(project, amplint):
    out = amplint("rules", cwd=project).stdout
    assert "AMP501" in out and "apex-amp-import" in out and "safe" in out
    rows = json.loads(amplint("rules", "--format", "json", cwd=project).stdout)
    assert {"code", "name", "fix", "default", "summary", "severity"} <= set(rows[0])
    text = amplint("explain", "AMP501", cwd=project).stdout
    assert "## Why is this bad?" in text and "2025" in text
    assert amplint("explain", "apex-amp-import", cwd=project).returncode == 0


def test_check_never_imports_the_linted_code(project, amplint):
    marker = project / "ran.txt"
    (project / "evil.py").write_text(textwrap.dedent(f"""
        import torch
        open({str(marker)!r}, "w").write("ran")
        raise SystemExit("imported!")
        from apex import amp
    """))
    assert amplint("check", "evil.py", cwd=project).returncode == 1
    assert amplint("fix", "evil.py", cwd=project).returncode == 0
    assert not marker.exists()


def test_pre_commit_hooks_definition():
    with open(os.path.join(ROOT, ".pre-commit-hooks.yaml")) as fh:
        text = fh.read()
    assert "id: amplint\n" in text and "id: amplint-fix\n" in text


def test_fix_verify_writes_only_proven_fixes(tmp_path, amplint):
    for name in ("handwritten_norm.py", "overflow_gemm.py"):
        (tmp_path / name).write_text(open(os.path.join(ROOT, "fixtures", "verify", name)).read())
    before = (tmp_path / "overflow_gemm.py").read_text()
    failing = amplint("fix", "overflow_gemm.py", "--verify", "overflow_gemm.py::example", "--threads-hint", cwd=tmp_path)
    assert failing.returncode == 2  # unknown option: usage error, nothing run
    failing = amplint("fix", "overflow_gemm.py", "--unsafe-fixes", "--verify", "overflow_gemm.py::example", cwd=tmp_path)
    assert failing.returncode != 0 and "fixes not written" in failing.stderr
    assert (tmp_path / "overflow_gemm.py").read_text() == before
    proven = amplint("fix", "handwritten_norm.py", "--unsafe-fixes", "--verify", "handwritten_norm.py::example", cwd=tmp_path)
    assert proven.returncode == 0, proven.stdout[-2000:] + proven.stderr
    # the norm is computed in fp32 (issue 13), which cures the eps at O2 without changing it
    fixed = (tmp_path / "handwritten_norm.py").read_text()
    assert "x = x.float()" in fixed and ".to(input_dtype)" in fixed and "+ 1e-8)" in fixed
