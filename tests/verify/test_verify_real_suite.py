"""The real-model suite's machinery (bench/verify_real.py, bench/verify_real_truth.py) on a
tiny stand-in for a pinned upstream package, so no download is needed: the ground-truth
script derives each verdict from plain PyTorch runs, the runner compares ``amplint verify``'s
verdicts with the hand-written ones, and a wrong hand-written verdict is caught by both."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER = os.path.join(ROOT, "bench", "verify_real.py")
TRUTH = os.path.join(ROOT, "bench", "verify_real_truth.py")

# an "upstream" attention: einsum of a half Linear output (O1) with an fp32 parameter raises
UPSTREAM = """
    import torch
    from torch import nn


    class Attn(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.to_q = nn.Linear(dim, dim)
            self.proj = nn.Parameter(torch.randn(dim, dim) / dim ** 0.5)

        def forward(self, x):
            q = self.to_q(x)
            return torch.einsum('bnd,de->bne', q, self.proj)
"""

HARNESS = """
    import os
    import sys

    import torch

    sys.path.insert(0, os.path.join(os.environ["AMPLINT_REAL_SRC"], "tinyattn==0.1"))
    from tinyattn.attn import Attn  # noqa: E402


    def build():
        torch.manual_seed(0)
        return Attn(16), (torch.randn(2, 4, 16),)
"""


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text).lstrip())


def suite(tmp_path, verdict: str) -> tuple[str, str]:
    src = str(tmp_path / "src")
    write(os.path.join(src, "tinyattn==0.1", "tinyattn", "__init__.py"), "")
    write(os.path.join(src, "tinyattn==0.1", "tinyattn", "attn.py"), UPSTREAM)
    harness = str(tmp_path / "harness" / "tiny.py")
    write(harness, HARNESS)
    expected = {"models": [{
        "name": "tiny", "dist": "tinyattn==0.1", "target": f"{harness}::build",
        "level_outcomes": {"O0": "ok", "O1": "crash at tinyattn/attn.py:13", "O2": "ok"}, "unpredicted": [],
        "findings": [{"code": "AMP401", "file": "tinyattn/attn.py", "line": 13, "levels": ["O1"], "op": "einsum",
                      "expected": verdict, "why": "O1: einsum of a half q and an fp32 parameter raises"}]}]}
    path = str(tmp_path / f"expected-{verdict.replace(' ', '-')}.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(expected, fh)
    return path, src


def run(script, *args):
    env = dict(os.environ, OMP_NUM_THREADS="1", NO_COLOR="1")
    return subprocess.run([sys.executable, script, *args], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=300)


def test_truth_and_runner_agree_with_the_right_verdicts(tmp_path):
    expected, src = suite(tmp_path, "confirmed")
    truth = run(TRUTH, "--expected", expected, "--src", src, "--json", str(tmp_path / "truth.json"))
    assert truth.returncode == 0, truth.stdout + truth.stderr[-3000:]
    observed = json.loads((tmp_path / "truth.json").read_text())[0]
    assert observed["levels"]["O1"] == "crash at tinyattn/attn.py:13"
    assert observed["levels"]["autocast"] == "ok"  # torch.autocast lists einsum: no crash there
    assert observed["findings"][0]["observed"] == "confirmed"
    runner = run(RUNNER, "--expected", expected, "--src", src, "--json", str(tmp_path / "agree.json"))
    assert runner.returncode == 0, runner.stdout + runner.stderr[-3000:]
    assert "findings 1/1 levels 3/3 unpredicted agree" in runner.stdout
    totals = json.loads((tmp_path / "agree.json").read_text())["totals"]
    assert totals == {"findings": [1, 1], "levels": [3, 3], "unpredicted": [1, 1]}


def test_a_wrong_expected_verdict_is_reported_by_both(tmp_path):
    expected, src = suite(tmp_path, "not reproduced")
    truth = run(TRUTH, "--expected", expected, "--src", src)
    assert truth.returncode == 1
    assert "expected.json says 'not reproduced'" in truth.stdout
    runner = run(RUNNER, "--expected", expected, "--src", src)
    assert runner.returncode == 1
    assert "!! AMP401 tinyattn/attn.py:13: verify 'confirmed', expected 'not reproduced'" in runner.stdout
