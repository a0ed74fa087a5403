"""Evidence a call inherits is not its own (issue 14, problem 2), through the CLI, CPU.

The axial-attention 0.6.1 ChanLayerNorm of the real-model suite (bench/verify_real.py):
``torch.var`` in half overflows on un-normalised activations, so ``std`` is inf and
``(x - mean) / (std + self.eps)`` is 0 everywhere at O2 -- whatever ``eps`` is.  The var
finding (AMP302) is confirmed by the origin; the epsilon finding (AMP102) on the next line
must not be confirmed by the zeros the division inherits."""
from __future__ import annotations

import json
import os
import textwrap

CHAN_NORM = """
    import torch
    from torch import nn


    class ChanLayerNorm(nn.Module):
        def __init__(self, dim, eps = 1e-5):
            super().__init__()
            self.eps = eps
            self.g = nn.Parameter(torch.ones(1, dim, 1, 1))
            self.b = nn.Parameter(torch.zeros(1, dim, 1, 1))

        def forward(self, x):
            std = torch.var(x, dim = 1, unbiased = False, keepdim = True).sqrt()
            mean = torch.mean(x, dim = 1, keepdim = True)
            return (x - mean) / (std + self.eps) * self.g + self.b


    def example():
        torch.manual_seed(0)
        model = nn.Sequential(ChanLayerNorm(16), nn.Conv2d(16, 16, 1))
        return model, (300 * torch.randn(2, 16, 4, 4),)
"""


def test_eps_is_not_confirmed_by_zeros_inherited_from_an_overflowed_variance(tmp_path, amplint):
    path = tmp_path / "chan_norm.py"
    path.write_text(textwrap.dedent(CHAN_NORM).lstrip(), encoding="utf-8")
    proc = amplint("verify", f"{path}::example", "--opt-level", "O2", "--device", "cpu", "--format", "json",
                   cwd=str(tmp_path), env={"NO_COLOR": "1", "OMP_NUM_THREADS": "1"}, timeout=120)
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = json.loads(proc.stdout)["results"][0]
    found = {(f["code"], f["line"]): f for f in report["findings"]}
    var = found[("AMP302", 13)]
    assert var["status"] == "confirmed", var
    assert [e["kind"] for e in var["evidence"]] == ["inf/NaN"], var["evidence"]
    eps = found[("AMP102", 15)]
    assert eps["status"] == "not reproduced", eps["evidence"]
    assert report["before"]["O2"]["origin"]["line"] == 13
    assert os.path.realpath(report["before"]["O2"]["origin"]["file"]) == os.path.realpath(str(path))
    # the zeros the division leaves (ChanLayerNorm's output) follow from the same overflow:
    # not a second, unpredicted problem
    assert [(p["kind"], p["line"]) for p in report["problems"]] == [("inf/NaN", 13)], report["problems"]
    assert report["runtime_only"] == []
