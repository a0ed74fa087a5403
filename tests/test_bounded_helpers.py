"""AMP302 through the CLI: a hand-written L2 normalisation (``x / x.norm(dim, keepdim=True)``,
``torch.div(t, norm(t, dim))`` with a ``norm`` helper) has elements in [-1, 1], here and in
the files that import the helper (fair-esm's ``from .util import normalize``), so a dot
product of such vectors along a dimension cannot overflow; dividing by another tensor's
norm is still reported."""
import json
import textwrap

UTIL = """
import torch

def nan_to_num(ts, val=0.0):
    val = torch.tensor(val, dtype=ts.dtype, device=ts.device)
    return torch.where(~torch.isfinite(ts), val, ts)

def norm(tensor, dim, eps=1e-8, keepdim=False):
    return torch.sqrt(torch.sum(torch.square(tensor), dim=dim, keepdim=keepdim) + eps)

def normalize(tensor, dim=-1):
    return nan_to_num(torch.div(tensor, norm(tensor, dim=dim, keepdim=True)))

def scale_by(x, y):
    return x / y.norm(dim=-1, keepdim=True)
"""

MODEL = """
import torch
import torch.nn as nn
from .util import normalize, scale_by

class Dihedrals(nn.Module):
    def forward(self, X):
        dX = X[:, 1:] - X[:, :-1]
        U = normalize(dX, dim=-1)
        n_2 = normalize(torch.cross(U[:, :-2], U[:, 1:-1], dim=-1), dim=-1)
        cosD = torch.sum(n_2 * U[:, 2:], -1)
        feat = X / (X.norm(dim=-1, keepdim=True) + 1e-6)
        local = (feat * feat).sum(dim=-1)
        factor = torch.sqrt(torch.sum(X ** 2, dim=1, keepdim=True))
        unit = X / (factor + 1e-10)
        other = (unit * X.flip(1)).sum(1)
        wrong = torch.sum(scale_by(X, dX) * X, -1)
        return cosD + local + other + wrong
"""


def test_normalised_vectors_here_and_imported_are_bounded(amplint, tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "util.py").write_text(textwrap.dedent(UTIL).lstrip())
    (package / "model.py").write_text(textwrap.dedent(MODEL).lstrip())
    proc = amplint("check", "--select", "AMP302", "--opt-level", "O2", "--output-format", "json", "--no-cache",
                   str(package), cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    found = sorted((f["path"].rsplit("/", 1)[-1], f["line"]) for f in json.loads(proc.stdout) if f["code"] == "AMP302")
    # line 15: `X * X.flip(1)` is unbounded on one side; line 16: divided by another tensor's norm
    assert ("model.py", 10) not in found and ("model.py", 12) not in found
    assert ("model.py", 16) in found and ("model.py", 15) in found
