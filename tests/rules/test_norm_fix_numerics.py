"""The hand-written-norm fix (AMP102): fp32 output bit-identical, no inf/NaN in fp16."""
import torch

NORMS = '''
import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        return self.weight * (x - u) / torch.sqrt(s + self.eps) + self.bias


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-8):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
'''


def _load(text):
    space = {}
    exec(compile(text, "<norms>", "exec"), space)
    return space


def test_norm_fix_keeps_fp32_and_cures_fp16(tmp_path, amplint):
    path = tmp_path / "norms.py"
    path.write_text(NORMS)
    proc = amplint("fix", "--no-cache", "--select", "AMP102", str(path))
    fixed = path.read_text()
    assert "x = x.float()" in fixed and "1e-4" not in fixed, proc.stdout + fixed
    before, after = _load(NORMS), _load(fixed)
    torch.manual_seed(0)
    x = torch.randn(4, 64) * 3
    x[1] = 0  # a zero row: var + eps is eps
    big = torch.randn(4, 64) * 300  # |x| ~ 300: the half square overflows
    for name in ("LayerNorm", "RMSNorm"):
        old, new = before[name](64), after[name](64)
        assert torch.equal(old(x), new(x)), name
        half = new.half()
        for inp in (x, big):
            out = half(inp.half())
            assert out.dtype == torch.float16 and torch.isfinite(out).all(), name
            assert (out.float() - new(inp)).abs().max() < 0.05, name
        # the unfixed norm squares 300 in half: 90000 overflows, the output is wrong
        assert (old.half()(big.half()).float() - old(big)).abs().max() > 0.5, name
