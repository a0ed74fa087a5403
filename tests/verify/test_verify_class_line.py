"""A finding at a class line (AMP401 reports a custom autograd Function where ``custom_fwd`` is
missing) ran when the class's methods ran, not when the class statement did: every class
statement runs at import.  The real-model suite's axial-attention and linformer define a
``_ReversibleFunction`` the models built there never use (bench/verify_real.py: verify said
"not reproduced", the plain runs "not executed").  Through the CLI, CPU."""
from __future__ import annotations

import json
import textwrap

HARNESS = """
    import torch
    from torch import nn
    from torch.autograd import Function


    class Double(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2


    class Plain(nn.Module):
        def __init__(self, use):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.use = use

        def forward(self, x):
            x = self.lin(x)
            if self.use:
                x = Double.apply(x)
            return x


    def unused():
        return Plain(False), (torch.randn(2, 8),)


    def used():
        return Plain(True), (torch.randn(2, 8),)
"""


def _class_finding(tmp_path, amplint, factory):
    (tmp_path / "fn.py").write_text(textwrap.dedent(HARNESS).lstrip(), encoding="utf-8")
    proc = amplint("verify", f"fn.py::{factory}", "--opt-level", "O1", "--device", "cpu", "--steps", "1",
                   "--format", "json", cwd=str(tmp_path), env={"NO_COLOR": "1", "OMP_NUM_THREADS": "1"}, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    findings = json.loads(proc.stdout)["results"][0]["findings"]
    (f,) = [f for f in findings if f["code"] == "AMP401" and f["line"] == 6]
    return f


def test_a_function_the_model_never_calls_is_not_executed(tmp_path, amplint):
    f = _class_finding(tmp_path, amplint, "unused")
    assert f["status"] == "not executed", f


def test_a_function_the_model_calls_ran(tmp_path, amplint):
    f = _class_finding(tmp_path, amplint, "used")
    assert f["status"] != "not executed", f
