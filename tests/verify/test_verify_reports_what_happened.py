"""verify reports what happened (issue 24 #5), through the command line: a target that fails
in fp32 is one line and exit 2 (the harness, not mixed precision); a display-only fix is never
"fixed"; the banner names the failure that happened, the original code first."""
from __future__ import annotations

import json
import os
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HARNESS = textwrap.dedent("""
    import torch
    from torch import nn


    def broken():
        raise ValueError("config file not found: llama.json")


    def needs_gpu():
        return nn.Linear(4, 4).cuda(), (torch.randn(2, 4),)
""")


def test_a_target_that_fails_in_fp32_is_one_line(tmp_path, amplint):
    (tmp_path / "harness.py").write_text(HARNESS)
    proc = amplint("verify", "harness.py::broken", "--device", "cpu", "--steps", "1", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == "amplint: error: harness.py::broken raised ValueError: config file not found: llama.json (harness.py:7)\n"
    assert "NOT safe" not in proc.stdout and "CRASH" not in proc.stdout


def test_a_target_that_needs_an_absent_gpu_says_so(tmp_path, amplint):
    import torch

    if torch.cuda.is_available():
        return  # the machine has the device: nothing to report
    (tmp_path / "harness.py").write_text(HARNESS)
    proc = amplint("verify", "harness.py::needs_gpu", "--steps", "1", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert "harness.py::needs_gpu needs CUDA; use --device cpu" in proc.stderr


def test_a_display_only_fix_is_not_fixed(amplint):
    proc = amplint("verify", os.path.join(ROOT, "fixtures", "verify", "einsum_mixer.py") + "::example", "--fix",
                   "--opt-level", "O1", "--steps", "1", "--format", "json")
    [report] = json.loads(proc.stdout)["results"]
    display = [f for f in report["findings"] if f["fix"] == "display"]
    assert display and all(f["status"] == "fix not applied (display only)" for f in display), display


def test_the_banner_names_the_failure_original_code_first():
    from amplint.verify.records import Crash, LevelRun, VerifyReport
    from amplint.verify.report_text import _safe_tail, _why

    run = lambda level, **kw: LevelRun(level, "fp16", **kw)  # noqa: E731
    crash = Crash("RuntimeError", "x", "forward", 0)
    report = VerifyReport("t", "cpu", "fp16", ["O1", "O2"], 1, 0, 0.01, "auto", "adamw",
                          before={"O0": run("O0"), "O1": run("O1", nonfinite_loss=True), "O2": run("O2", crash=crash)},
                          after={"O0": run("O0"), "O1": run("O1"), "O2": run("O2", nonfinite_loss=True)},
                          failing_levels=["O1", "O2"], failing_levels_after=["O2"], fp32_change=0.0)
    assert _why(report) == "original code: O1 inf/NaN, O2 crash; after the fixes: O2 inf/NaN"
    report.after["O2"], report.failing_levels_after = run("O2"), []
    assert _safe_tail(report) == " after the fixes (the original code: O1 inf/NaN, O2 crash)"


CRASH_AFTER_FIX = textwrap.dedent("""
    import torch
    from torch import nn


    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(8, 8)

        def forward(self, x, mask):
            scores = self.q(x) @ x.transpose(-1, -2)
            scores = scores.masked_fill(mask, -1e9)
            attn = torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
            return torch.linalg.inv(attn + torch.eye(4, dtype=attn.dtype)).sum()


    def example():
        mask = torch.zeros(2, 4, 4, dtype=torch.bool)
        mask[:, :, 3] = True
        return Attn(), (torch.randn(2, 4, 8), mask)
""")


def test_a_fixed_run_that_crashed_is_never_fixed(tmp_path, amplint):
    (tmp_path / "attn.py").write_text(CRASH_AFTER_FIX)
    proc = amplint("verify", "attn.py::example", "--fix", "--opt-level", "O2", "--device", "cpu", "--steps", "1",
                   "--format", "json", cwd=tmp_path)
    [report] = json.loads(proc.stdout)["results"]
    assert report["before"]["O2"]["crash"]["line"] == 13 and report["after"]["O2"]["crash"]["line"] == 15, report["after"]["O2"]["crash"]
    fill = next(f for f in report["findings"] if f["code"] == "AMP101")
    assert fill["status"] == "fixed run crashed" and fill["after_crash"] == ["O2"], fill["status"]
    assert proc.returncode == 1


def test_a_factory_that_returns_no_module_is_one_line(tmp_path, amplint):
    # issue 29 N67: rows "O0 CRASH ... TargetError" and exit 1 before; a target error is one line, exit 2
    (tmp_path / "harness.py").write_text('def pair():\n    return "not a model", ()\n\n\ndef five():\n    return 5\n')
    for factory, got in (("pair", "got (str, tuple)"), ("five", "got int")):
        proc = amplint("verify", f"harness.py::{factory}", "--device", "cpu", "--steps", "1", cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
        assert proc.stderr.startswith(f"amplint: error: harness.py::{factory}: the factory must return (model, example_inputs)")
        assert "torch.nn.Module; " + got in proc.stderr and "raised" not in proc.stderr
