"""The pytest plugin (entry point pytest11) in a separate pytest run."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_amp_verify_fixture_passes_and_fails(tmp_path):
    (tmp_path / "test_models.py").write_text(textwrap.dedent('''
        import torch
        from torch import nn


        class Norm(nn.Module):
            def forward(self, x):
                return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-8)


        def test_safe(amp_verify):
            model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
            report = amp_verify(model, (torch.randn(4, 8),), levels=("O1", "O2"), device="cpu", steps=2)
            assert report["exit_status"] == 0 and set(report["before"]) == {"O0", "O1", "O2"}


        def test_unsafe(amp_verify):
            x = torch.randn(4, 8)
            x[1] = 0
            amp_verify(nn.Sequential(nn.Linear(8, 8, bias=False), Norm()), (x,), levels="O2", device="cpu", steps=1)


        def test_factory(amp_verify):
            amp_verify(lambda: (nn.Linear(8, 8), (torch.randn(2, 8),)), levels=["O3"], device="cpu", steps=1, optimizer="sgd")
    '''))
    (tmp_path / "conftest.py").write_text("")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_models.py"],
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert "1 failed, 2 passed" in out, out[-3000:]
    assert "test_unsafe" in out and "not mixed-precision safe at O2" in out
    # the failure carries the report: the level table and the source line of the first NaN
    assert "inf/NaN" in out and "test_models.py:8" in out
